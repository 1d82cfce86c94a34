"""Ray clusters for the tests.

``ray_cluster``: one or several nodes on this machine (``ray.cluster_utils``), this process connected.
``ray_head``: a real `ray start --head` cluster, the way an operator starts one, with its own
ports and temp dir (so it never touches another Ray on this machine, nor /tmp/ray's
"current cluster" file, unless ``ray_tmpdir`` asks it to be the current cluster there), stopped by
terminating the blocking `ray start` process: with --block, Ray kills every process it started
(and its reaper does if that process dies).

Both start as Ray starts by default (tests/conftest.py: RAY_AUTH_MODE unset, a token present), so a
``ray_head`` has Ray's token authentication on unless its ``env`` says RAY_AUTH_MODE=disabled; a
driver that joins it by its address needs RAY_AUTH_MODE=token, as Ray documents for an explicit
address: ``RayHead.driver_env``.

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
    dashboard: str  # http://127.0.0.1:Q, for `ray job submit --address` ("" without the dashboard)
    env: dict[str, str]  # the environment the cluster's processes run with
    token_auth: bool  # whether the head wants Ray's token (what Ray decided at `ray start`)
    client: str = ""  # ray://127.0.0.1:C, its Ray Client server

    @property
    def driver_env(self) -> dict[str, str]:
        """What a process joining by ``address`` (or RAY_ADDRESS) adds to the environment: Ray
        uses its token for an explicit address only with RAY_AUTH_MODE=token."""
        return {"RAY_AUTH_MODE": "token"} if self.token_auth else {}


def token_auth(env: dict[str, str]) -> bool:
    """Whether `ray start --head` with ``env`` turns token authentication on: RAY_AUTH_MODE when
    set, else whether a token exists (RAY_AUTH_TOKEN, the file RAY_AUTH_TOKEN_PATH names, else
    ~/.ray/auth_token), as ray/_private/authentication/authentication_token_setup.py decides in
    Ray 2.60 (maybe_enable_token_auth_if_token_available)."""
    mode = env.get("RAY_AUTH_MODE")
    if mode is not None:
        return mode.lower() == "token"
    return bool(_token(env))


def _token(env: dict[str, str]) -> str:
    """The token Ray finds with ``env`` ("" for none): RAY_AUTH_TOKEN, else the file
    RAY_AUTH_TOKEN_PATH names, else ~/.ray/auth_token."""
    if env.get("RAY_AUTH_TOKEN"):
        return env["RAY_AUTH_TOKEN"].strip()
    path = env.get("RAY_AUTH_TOKEN_PATH") or os.path.join(env.get("HOME", os.path.expanduser("~")), ".ray",
                                                          "auth_token")
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def new_token(path: str) -> str:
    """Write a new token to ``path`` as `ray get-auth-token --generate` makes one (256 random bits
    as hex: ray/_private/authentication/authentication_token_generator.py); returns ``path``."""
    import secrets

    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(secrets.token_hex(32))
    return path


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
def short_tmpdir() -> Iterator[str]:
    """A directory under /tmp for a head's ``ray_tmpdir``, removed afterwards: short, since Ray's
    socket paths have a length limit that a pytest tmp path (more so an xdist worker's) exceeds."""
    path = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def ray_head(num_cpus: int = 2, env: dict[str, str] | None = None, timeout: float = 90, dashboard: bool = True,
             ray_tmpdir: str | None = None) -> Iterator[RayHead]:
    """Start a head node on 127.0.0.1, with the job API (dashboard) unless ``dashboard`` is False;
    stop it afterwards. With ``ray_tmpdir``, the head is the current cluster of the processes
    whose RAY_TMPDIR is that directory (its temp dir is ``ray_tmpdir/ray``, where `ray start`
    writes the current-cluster file that ray.init() and raycompile read)."""
    port, dash, client, agent = free_port(), free_port(), free_port(), free_port()
    # short: Ray's socket paths have a length limit
    temp = os.path.join(ray_tmpdir, "ray") if ray_tmpdir else tempfile.mkdtemp(prefix="rc", dir="/tmp")
    os.makedirs(temp, exist_ok=True)
    bindir = os.path.dirname(sys.executable)
    # no drain on SIGTERM: nothing to hand over, and it would hold the teardown for 30 s
    full_env = {**os.environ, "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0", **(env or {}),
                "PATH": f"{bindir}:{os.environ.get('PATH', '')}"}  # `raycompile` on PATH for job entrypoints
    full_env.pop("RAY_ADDRESS", None)
    if ray_tmpdir:
        full_env["RAY_TMPDIR"] = ray_tmpdir
    web = ["--include-dashboard", "true", "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dash),
           "--dashboard-agent-listen-port", str(agent)] if dashboard else \
        ["--include-dashboard", "false", "--dashboard-agent-listen-port", str(agent)]
    log = open(os.path.join(temp, "ray-start.log"), "w")  # noqa: SIM115 -- closed in finally
    proc = subprocess.Popen(
        [os.path.join(bindir, "ray"), "start", "--head", "--block", "--port", str(port),
         "--node-ip-address", "127.0.0.1", "--num-cpus", str(num_cpus), "--num-gpus", "0", *web,
         "--ray-client-server-port", str(client), "--temp-dir", temp, "--disable-usage-stats"],
        env=full_env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout
        # polled: the ports are another process's, with nothing to wait on but a connect
        while not (_answers(port) and (not dashboard or _answers(dash))
                   and (not ray_tmpdir or os.path.exists(os.path.join(temp, "ray_current_cluster")))):
            if proc.poll() is not None or time.monotonic() > deadline:
                log.flush()
                with open(log.name) as f:
                    raise RuntimeError(f"ray start did not come up:\n{f.read()[-3000:]}")
            time.sleep(0.5)
        auth = token_auth(full_env)
        if dashboard:  # with token authentication, the dashboard answers only requests bearing the token
            _wait_for_job_api(f"http://127.0.0.1:{dash}", deadline, _token(full_env) if auth else "")
        yield RayHead(f"127.0.0.1:{port}", f"http://127.0.0.1:{dash}" if dashboard else "", full_env, auth,
                      f"ray://127.0.0.1:{client}")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        log.close()
        shutil.rmtree(temp, ignore_errors=True)  # with ray_tmpdir: its current-cluster file too


def _wait_for_job_api(url: str, deadline: float, token: str) -> None:
    import urllib.request

    request = urllib.request.Request(f"{url}/api/version",
                                     headers={"Authorization": f"Bearer {token}"} if token else {})
    while True:  # polled: the dashboard is another process's, with nothing to wait on but a request
        try:
            with urllib.request.urlopen(request, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the job API at {url} did not answer")
        time.sleep(0.5)
