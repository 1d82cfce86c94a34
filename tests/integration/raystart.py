"""Ray clusters for the tests.

``ray_cluster``: one or several nodes on this machine (``ray.cluster_utils``), this process connected.
``ray_head``: a real `ray start --head` cluster, the way an operator starts one, with its own
ports and temp dir (so it never touches another Ray on this machine, nor /tmp/ray's
"current cluster" file), stopped by terminating the blocking `ray start` process: with --block,
Ray kills every process it started (and its reaper does if that process dies).

Both take every port free (Ray picks most of them itself; a head's dashboard agent would take
52365, the same for every Ray on the machine, and wait out a clash); ``ray_cluster`` lives in the
session's temp dir (tests/conftest.py's RAY_TMPDIR). Nothing here survives the ray CLI's stop run elsewhere
on the machine: it stops every Ray process it finds, whatever their ports and temp dirs."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class RayHead:
    address: str  # GCS, for ray.init / --address
    dashboard: str  # http://127.0.0.1:Q, for `ray job submit --address`
    env: dict[str, str]  # the environment the cluster's processes run with


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


@contextmanager
def ray_cluster(*nodes: dict[str, Any], head_cpus: int = 1) -> Iterator[Any]:
    """A ``ray.cluster_utils.Cluster``: a head with ``head_cpus`` CPUs, and one node per ``nodes``
    entry (the arguments of ``add_node``), with this process connected to it until the block ends."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": head_cpus, "include_dashboard": False, "dashboard_agent_listen_port": free_port()})
    try:
        for args in nodes:
            cluster.add_node(**args)
        ray.init(address=cluster.address, log_to_driver=False, namespace="raycompile")
        cluster.wait_for_nodes()
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


@contextmanager
def ray_head(num_cpus: int = 2, env: dict[str, str] | None = None, timeout: float = 90) -> Iterator[RayHead]:
    """Start a head node on 127.0.0.1 with the job API (dashboard) on; stop it afterwards."""
    port, dash, client, agent = free_port(), free_port(), free_port(), free_port()
    temp = tempfile.mkdtemp(prefix="rc", dir="/tmp")  # short: Ray's socket paths have a length limit
    bindir = os.path.dirname(sys.executable)
    # no drain on SIGTERM: nothing to hand over, and it would hold the teardown for 30 s
    full_env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0", **(env or {}),
                "PATH": f"{bindir}:{os.environ.get('PATH', '')}"}  # `raycompile` on PATH for job entrypoints
    full_env.pop("RAY_ADDRESS", None)
    log = open(os.path.join(temp, "ray-start.log"), "w")  # noqa: SIM115 -- closed in finally
    proc = subprocess.Popen(
        [os.path.join(bindir, "ray"), "start", "--head", "--block", "--port", str(port),
         "--node-ip-address", "127.0.0.1", "--num-cpus", str(num_cpus), "--num-gpus", "0",
         "--include-dashboard", "true", "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dash),
         "--ray-client-server-port", str(client), "--dashboard-agent-listen-port", str(agent),
         "--temp-dir", temp, "--disable-usage-stats"],
        env=full_env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout
        while not (_answers(port) and _answers(dash)):
            if proc.poll() is not None or time.monotonic() > deadline:
                log.flush()
                with open(log.name) as f:
                    raise RuntimeError(f"ray start did not come up:\n{f.read()[-3000:]}")
            time.sleep(0.5)
        _wait_for_job_api(f"http://127.0.0.1:{dash}", deadline)
        yield RayHead(f"127.0.0.1:{port}", f"http://127.0.0.1:{dash}", full_env)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def _wait_for_job_api(url: str, deadline: float) -> None:
    import urllib.request

    while True:
        try:
            with urllib.request.urlopen(f"{url}/api/version", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the job API at {url} did not answer")
        time.sleep(0.5)
