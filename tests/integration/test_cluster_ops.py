"""Cluster operations on a real `ray start --head` (127.0.0.1, its own ports, the job API on):
cluster-wide dedupe across driver processes, `ray job submit -- raycompile precompile` followed by
a warm start elsewhere, `raycompile status`, and precompile's exit statuses."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator

import pytest
import torch
from farmrun import compile_fresh
from raystart import RayHead, ray_cluster, ray_head
from waiting import wait_until

from raycompile.kernels import Built
from raycompile.models import examples
from raycompile.orchestrator import Farm
from raycompile.orchestrator.remote import COMPILE_RESOURCE
from raycompile.settings import Settings
from raycompile.wrapper import compat
from raycompile.wrapper.job_keys import triton_job
from raycompile.wrapper.kernel_sources import find_kernels

HERE = pathlib.Path(__file__).parent
SECRET = "one-secret-for-the-whole-test-cluster"

MODELS = '''
from raycompile.kernels import Built, TritonJob, Versions
from raycompile.wrapper.kernel_sources import find_kernels
from raycompile.models import examples
from raycompile.orchestrator import Farm
from raycompile.orchestrator.remote import COMPILE_RESOURCE
from raycompile.settings import Settings


def reduction_tail():
    return examples()["reduction_tail"][0]


def broken():
    raise ValueError("this entry point is broken on purpose")
'''


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayHead]:
    d = tmp_path_factory.mktemp("cluster")
    env = {"RAYCOMPILE_CACHE_DIR": str(d / "worker-cache"), "RAYCOMPILE_HEAD_CACHE_DIR": str(d / "head-cache"),
           "RAYCOMPILE_SECRET": SECRET, "RAYCOMPILE_SHARED_CACHE": "none"}
    with ray_head(num_cpus=2, env=env) as h:
        yield h


@pytest.fixture(autouse=True)
def cluster_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    """Drivers that share a tier share one secret (RAYCOMPILE_SECRET), or they refuse each other."""
    monkeypatch.setenv("RAYCOMPILE_SECRET", SECRET)


def cli(*args: str, env: dict[str, str] | None = None, cwd: str | None = None,
        timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "raycompile", *args], capture_output=True, text=True,
                          timeout=timeout, check=False, env={**os.environ, **(env or {})}, cwd=cwd)


def drivers(n: int, address: str, shared: str, tmp: pathlib.Path, env: dict[str, str] | None = None,
            one_node: bool = False) -> list[dict]:
    """``n`` driver processes (tests/integration/cluster_driver.py), released together once all
    have joined the cluster; returns what each saved. Each has an empty local cache of its own, as
    on separate nodes, or with ``one_node`` one empty cache dir for all (processes of one node
    share it by default). ``env`` joins it: ``head.driver_env`` for an explicit address."""
    barrier = tmp / "barrier"
    barrier.mkdir(parents=True)
    procs = [subprocess.Popen(
        [sys.executable, str(HERE / "cluster_driver.py"), address, shared, str(tmp / f"out-{i}.pt"), str(barrier)],
        env={**os.environ, "RAYCOMPILE_CACHE_DIR": str(tmp / ("local" if one_node else f"local-{i}")), **(env or {})},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in range(n)]
    try:
        def joined() -> bool:
            assert all(p.poll() is None for p in procs), [p.communicate()[0][-3000:] for p in procs if p.poll()]
            return len(list(barrier.glob("ready-*"))) >= n

        wait_until(joined, 240, "the drivers all joining the cluster", interval=0.1)
        (barrier / "go").touch()
        for p in procs:
            out, _ = p.communicate(timeout=300)
            assert p.returncode == 0, out[-3000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return [torch.load(tmp / f"out-{i}.pt") for i in range(n)]


# slow: a `ray start --head` with the job API (``head``) or a cluster_utils cluster, and drivers
# compiling on it; the usage errors below need neither and stay in the quick run (-m "not slow")
@pytest.mark.slow
@pytest.mark.extended  # left out of CI's run (docs/testing.md): the default-settings drivers below compile once too
def test_four_drivers_compile_each_kernel_once(head: RayHead, tmp_path: pathlib.Path) -> None:
    """The coordinator's kernel dedupe, the path of functions whose compiled frames are not shared
    (here: turned off; with them on, one driver would compile the function and the others load
    it: tests/integration/test_single_flight.py)."""
    env = {**head.driver_env, "RAYCOMPILE_DYNAMO_CACHE": "0"}
    # one driver alone, on its own fresh shared dir: how many compile jobs the model takes
    (first,) = drivers(1, head.address, f"file://{tmp_path / 'shared-alone'}", tmp_path / "alone", env)
    alone_out, alone = first["out"], first["stats"]
    assert alone["jobs"] > 0 and alone["dedupe_cluster"] == 0
    # four drivers at once, empty local caches, one fresh shared dir
    results = drivers(4, head.address, f"file://{tmp_path / 'shared'}", tmp_path, env)
    stats = [r["stats"] for r in results]
    assert sum(s["jobs"] for s in stats) == alone["jobs"], stats
    assert sum(s["dedupe_cluster"] for s in stats) > 0, stats
    assert all(s["coordinator_unavailable"] == 0 and s["fallbacks"] == 0 for s in stats), stats
    assert all(torch.equal(r["out"], alone_out) for r in results)


# extended (docs/testing.md, stop 60): ranks of one node compiling once in test_graph_flights.py
@pytest.mark.slow
@pytest.mark.extended
def test_drivers_of_one_cluster_compile_each_kernel_once_with_default_settings(
        head: RayHead, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No address (RAY_ADDRESS names the cluster, as `ray job submit` and `ray start` users have
    it), no shared tier, no secret: ranks of one job on one node share this node's local cache
    dir, and the cluster's coordinator has each kernel compiled once between them."""
    monkeypatch.delenv("RAYCOMPILE_SECRET", raising=False)
    monkeypatch.delenv("RAYCOMPILE_COMPILE_JOBS")  # the default: a one-node cluster compiles in Inductor's pools
    (first,) = drivers(1, head.address, "", tmp_path / "alone", head.driver_env)
    alone_out, alone = first["out"], first["stats"]
    assert alone["jobs_local"] > 0 and alone["jobs"] == 0, alone
    results = drivers(3, "", "", tmp_path, env={"RAY_ADDRESS": head.address, **head.driver_env}, one_node=True)
    stats = [r["stats"] for r in results]
    assert sum(s["jobs_local"] for s in stats) == alone["jobs_local"] and sum(s["jobs"] for s in stats) == 0, stats
    # every driver has every kernel: compiled it, or read the one compile's entry from the node's
    # cache dir, either waiting for it through the coordinator (dedupe_cluster) or, started later
    # than its owner finished (a loaded 2-CPU box staggers the drivers), finding it there at once
    assert all(s["jobs_local"] + s["local_hits"] >= alone["jobs_local"] for s in stats), stats
    assert all(s["coordinator_unavailable"] == 0 and s["fallbacks"] == 0 and s["refused"] == 0 for s in stats)
    assert all(torch.equal(r["out"], alone_out) for r in results)


@pytest.mark.slow
def test_ray_job_submit_precompile_then_a_fresh_process_warm_starts(head: RayHead, tmp_path: pathlib.Path) -> None:
    work = tmp_path / "job"  # the job's working dir: small (never the .venv)
    work.mkdir()
    (work / "cluster_models.py").write_text(MODELS)
    spec = {"variants": [{"name": "tail-8", "entry": "cluster_models:reduction_tail", "inputs": [{"shape": [8, 96]}],
                          "threads": torch.get_num_threads()}]}  # Ray workers default to 1 thread
    (work / "spec.json").write_text(json.dumps(spec))
    shared = f"file://{tmp_path / 'shared'}"
    runtime_env = {"env_vars": {"RAYCOMPILE_SHARED_CACHE": shared, "RAYCOMPILE_SECRET": SECRET,
                                "RAYCOMPILE_CACHE_DIR": str(tmp_path / "job-cache")}}
    job = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "ray"), "job", "submit", "--address", head.dashboard,
         "--working-dir", str(work), "--runtime-env-json", json.dumps(runtime_env),
         "--", "raycompile", "precompile", "--spec", "spec.json"],
        capture_output=True, text=True, timeout=400, env={**head.env, **head.driver_env}, check=False)
    assert job.returncode == 0 and "succeeded" in job.stdout, job.stdout[-3000:] + job.stderr[-3000:]
    row = next(line.split() for line in job.stdout.splitlines() if line.startswith("tail-8"))
    assert row[1] == "ok" and int(row[3]) > 0, job.stdout[-3000:]  # status, jobs
    # a fresh process joining the cluster, empty local cache, the same shared tier: no compile jobs
    (b,) = drivers(1, head.address, shared, tmp_path, head.driver_env)
    assert b["stats"]["jobs"] == 0 and b["stats"]["shared_hits"] > 0, b["stats"]
    model, args = examples()["reduction_tail"]
    assert torch.equal(b["out"], compile_fresh(model, args))  # stock Inductor, bitwise


@pytest.mark.slow
def test_status_shows_nodes_coordinator_and_tiers(head: RayHead, tmp_path: pathlib.Path) -> None:
    from raycompile.orchestrator.cluster_status import render

    shared = tmp_path / "shared"
    shared.mkdir()
    proc = cli("status", "--address", head.address, "--json",
               env={"RAYCOMPILE_SHARED_CACHE": f"file://{shared}", **head.driver_env})
    assert proc.returncode == 0, proc.stderr[-3000:]
    status = json.loads(proc.stdout)
    (node,) = status["nodes"]
    assert node["alive"] and node["head"] and node["cpus"] == 2 and node["gpus"] == 0
    assert node["torch"] == torch.__version__ and node["hostname"]
    assert status["farm"]["compile_slots"] == 2 and status["farm"]["worker_processes"] is not None
    assert status["cache"]["shared"] == {"url": f"file://{shared}", "entries": 0, "bytes": 0}
    text = render(status)
    assert "1 node, 1 alive" in text and "coordinator:" in text and f"shared file://{shared}" in text


def test_status_of_an_unreachable_address_exits_2() -> None:
    proc = cli("status", "--address", "127.0.0.1:1", timeout=60)
    assert proc.returncode == 2 and "cannot reach Ray at 127.0.0.1:1" in proc.stderr


@pytest.mark.parametrize("spec,message", [
    ("{not json", "not valid JSON"),
    ('{"variants": [{"entry": "nosuchmodule_xyz:build", "inputs": []}]}', "cannot import module 'nosuchmodule_xyz'"),
    ('{"variants": [{"entry": "cluster_models:reduction_tail", "inputs": [{"shape": [8], "dtype": "float99"}]}]}',
     "unknown dtype 'float99'"),
])
def test_precompile_bad_spec_exits_2(spec: str, message: str, tmp_path: pathlib.Path) -> None:
    (tmp_path / "cluster_models.py").write_text(MODELS)
    (tmp_path / "spec.json").write_text(spec)
    proc = cli("precompile", "--spec", "spec.json", "--address", "127.0.0.1:1", cwd=str(tmp_path), timeout=60)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


@pytest.mark.slow
def test_precompile_a_failing_variant_exits_1(head: RayHead, tmp_path: pathlib.Path) -> None:
    (tmp_path / "cluster_models.py").write_text(MODELS)
    (tmp_path / "spec.yaml").write_text("variants:\n  - {name: boom, entry: 'cluster_models:broken', inputs: []}\n")
    proc = cli("precompile", "--spec", "spec.yaml", "--address", head.address, env=head.driver_env, cwd=str(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr[-3000:]
    assert "FAILED boom: ValueError: this entry point is broken on purpose" in proc.stdout
    assert "precompiled 1 variants (1 failed)" in proc.stdout


@pytest.mark.slow
@pytest.mark.extended  # left out of CI's run (docs/testing.md): test_token_auth.py runs precompile on a cluster
def test_precompile_runs_a_script_with_the_farm(head: RayHead, tmp_path: pathlib.Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import sys, torch\n"
        "print('argv', sys.argv[1:])\n"
        "torch.compile(lambda x: (x.sin() * 2).sum(-1))(torch.randn(8, 16))\n"
        "sys.exit(int(sys.argv[1]))\n")
    proc = cli("precompile", str(script), "--", "3", "--flag", env={"RAY_ADDRESS": head.address, **head.driver_env})
    assert proc.returncode == 3, proc.stdout + proc.stderr[-3000:]
    assert "argv ['3', '--flag']" in proc.stdout and "raycompile summary" in proc.stdout
    assert "jobs 0 " not in proc.stdout  # its kernel compiled on the farm


@pytest.mark.slow
def test_compile_jobs_go_only_to_nodes_that_lend_compile_slots(corpus: pathlib.Path) -> None:
    """cluster.yaml's raycompile_compile: where the cluster offers it, compile jobs ask for it."""
    with ray_cluster({"num_cpus": 1, "resources": {COMPILE_RESOURCE: 1}}) as cluster:
        (lender,) = cluster.worker_nodes
        sources = [k for k in find_kernels([str(corpus)]) if "triton_heuristics.template" not in k.source][:3]
        with Farm(Settings.resolve(address="auto"), toolchain=compat.TOOLCHAIN) as farm:
            assert farm.workers() == 1 and len(farm.nodes) == 2
            results = [f.result(timeout=300) for f in
                       [farm.submit(triton_job(k.name, k.source)) for k in sources]]
        assert all(isinstance(r, Built) for r in results)
        assert {r.node_id for r in results} == {lender.node_id}
