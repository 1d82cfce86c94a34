"""Faults, load and bad input on a real multi-node Ray cluster (``cluster_utils``, one machine).

Each test asserts right outputs (bitwise equal to a stock compile) and no lost or corrupt cache
entries. Faults are real: SIGKILLed workers, a removed node, a killed actor, a stopped
redis-server, a read-only and a full filesystem. The one stand-in is the node "with another
triton": this machine has a single triton install, so that node's workers see triton report
another version (a ``sitecustomize`` on their PYTHONPATH) — what the farm reads to decide.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pathlib
import signal
import subprocess
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from farmrun import compile_fresh, compile_on_farm
from faults import WorkerKiller, freeze_on_job, raylet_of, raylet_pids, sound_entries, wait_for_job
from raystart import ray_cluster

import raycompile
from raycompile.cache import Cache, Entry
from raycompile.models import examples

pytestmark = pytest.mark.slow  # chaos on a multi-node cluster: workers and nodes killed mid-compile, Redis stopped

SECRET = "reliability-secret"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """A head (1 CPU) and a worker node (1 CPU); tests that remove a node add their own."""
    with ray_cluster({"num_cpus": 1}) as c:
        yield c


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYCOMPILE_SECRET", SECRET)


@pytest.fixture(scope="module")
def model_and_stock() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...], torch.Tensor]:
    model, args = examples()["transformer_block"]
    return model, args, compile_fresh(model, args)


def assert_intact(*roots: str | os.PathLike[str]) -> int:
    """Every entry in these file tiers is sound; returns how many there are."""
    total = 0
    for root in roots:
        good, bad = sound_entries(root, SECRET.encode())
        assert not bad, f"bad entries under {root}: {sorted(bad)}"
        total += len(good)
    return total


@pytest.mark.extended  # left out of CI's run (docs/testing.md): the node removed mid-run kills a worker mid-job
def test_a_worker_killed_mid_compile_is_retried_and_the_result_is_right(
        cluster: Any, model_and_stock: Any, tmp_path: pathlib.Path) -> None:
    model, args, stock = model_and_stock
    with WorkerKiller(raylet_pids(cluster), count=1) as killer:
        out, s = compile_on_farm(model, args, address="auto", cache_dir=str(tmp_path / "local"), shared_cache="none")
    assert killer.killed, "no compile job was seen running"
    assert torch.equal(out, stock)
    assert s["retried"] >= 1 and s["failures"] == 0 and s["fallbacks"] == 0
    assert assert_intact(tmp_path / "local") > 0


def test_a_node_removed_mid_run_the_run_completes(cluster: Any, model_and_stock: Any, tmp_path: pathlib.Path) -> None:
    """A worker node is removed (its raylet and workers killed) while it runs a compile job."""
    model, args, stock = model_and_stock
    cluster.add_node(num_cpus=1)  # the cluster keeps a head and a worker node after the removal
    cluster.wait_for_nodes()
    workers = raylet_pids(cluster, include_head=False)
    removed: list[Any] = []

    def remove_when_busy() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            pid = wait_for_job(workers, timeout=deadline - time.monotonic())
            if pid is None:
                return
            # Stopped while still on its job (a short one may be over already), the worker cannot
            # reply to its owner while its node goes; it is killed with it.
            if freeze_on_job(pid, workers):
                node = workers[raylet_of(pid)]
                cluster.remove_node(node, allow_graceful=False)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                removed.append(node)
                return

    remover = threading.Thread(target=remove_when_busy, daemon=True)
    remover.start()
    out, s = compile_on_farm(model, args, address="auto", cache_dir=str(tmp_path / "local"), shared_cache="none")
    remover.join(timeout=60)
    assert removed, "no job ran on a worker node before the run ended"
    assert torch.equal(out, stock)
    assert s["retried"] >= 1 and s["failures"] == 0 and s["fallbacks"] == 0
    assert assert_intact(tmp_path / "local") > 0


# extended (docs/testing.md, stop 60): a loss the run survives with its cache intact in the node removed mid-run
@pytest.mark.extended
def test_the_head_cache_actor_killed_is_restarted_and_loses_nothing(
        cluster: Any, model_and_stock: Any, tmp_path: pathlib.Path) -> None:
    import ray

    from raycompile.orchestrator.cache_service import SERVICE_NAME

    model, args, stock = model_and_stock
    out, s = compile_on_farm(model, args, address="auto", shared_cache="ray://head", cache_dir=str(tmp_path / "a"))
    assert torch.equal(out, stock)
    actor = ray.get_actor(SERVICE_NAME, namespace="raycompile")
    head_dir = ray.get(actor.usage.remote(), timeout=60)["root"]  # the detached service's, from its start
    before = assert_intact(head_dir)
    assert before > 0

    ray.kill(actor, no_restart=False)
    # Meanwhile a new process compiles (empty local dir): each lookup is a hit if the service is
    # back, else counted as unavailable and compiled; never an error.
    out, s = compile_on_farm(model, args, address="auto", shared_cache="ray://head", cache_dir=str(tmp_path / "b"))
    assert torch.equal(out, stock)
    assert s["failures"] == 0 and s["fallbacks"] == 0
    assert s["shared_hits"] + s["shared_unavailable"] + s["jobs"] > 0
    # restarted: the same named actor answers again, with every entry it had
    restarted = ray.get_actor(SERVICE_NAME, namespace="raycompile")
    usage = ray.get(restarted.usage.remote(), timeout=60)
    assert usage["entries"] >= before
    assert assert_intact(head_dir) >= before


def test_redis_going_down_mid_run_means_local_compiles_counted(
        cluster: Any, model_and_stock: Any, tmp_path: pathlib.Path, redis_server: tuple[Any, str]) -> None:
    model, args, stock = model_and_stock
    proc, url = redis_server
    killed: list[bool] = []

    def stop_redis_at_first_job() -> None:
        if wait_for_job(raylet_pids(cluster), timeout=300) is not None:
            proc.kill()
            killed.append(True)

    stopper = threading.Thread(target=stop_redis_at_first_job, daemon=True)
    stopper.start()
    out, s = compile_on_farm(model, args, address="auto", shared_cache=url, cache_dir=str(tmp_path / "local"))
    stopper.join(timeout=60)
    assert killed
    assert torch.equal(out, stock)
    assert s["shared_unavailable"] > 0 and s["failures"] == 0 and s["fallbacks"] == 0
    assert s["put_errors"] == 0  # an unreachable Redis is a counted miss, not a write error
    assert assert_intact(tmp_path / "local") > 0  # the local tier was written all along


def _mount(*argv: str) -> bool:
    return subprocess.run(["mount", *argv], capture_output=True, check=False).returncode == 0


# read-only: extended (docs/testing.md); a full filesystem takes the same path in CI's run
@pytest.fixture(params=[pytest.param("read-only", marks=pytest.mark.extended), "full"])
def bad_shared_dir(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    """A shared directory that refuses writes: read-only, or a filesystem with no space left."""
    d = tmp_path / "shared"
    d.mkdir()
    if request.param == "read-only":
        if os.geteuid() != 0:
            d.chmod(0o555)
            yield d
            d.chmod(0o755)
            return
        if not _mount("--bind", str(d), str(d)) or not _mount("-o", "remount,bind,ro", str(d)):
            pytest.skip("cannot bind-mount read-only here (needs CAP_SYS_ADMIN)")
    else:
        if os.geteuid() != 0 or not _mount("-t", "tmpfs", "-o", "size=64k", "tmpfs", str(d)):
            pytest.skip("cannot mount a small tmpfs here (needs root)")
        (d / "filler").write_bytes(b"x" * (64 * 1024 - 4096))  # leave less than one entry's room
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], capture_output=True, check=False)


def test_a_read_only_or_full_shared_dir_warns_and_keeps_the_local_cache(
        cluster: Any, model_and_stock: Any, bad_shared_dir: pathlib.Path, tmp_path: pathlib.Path,
        caplog: pytest.LogCaptureFixture) -> None:
    model, args, stock = model_and_stock
    before = sorted(p.name for p in bad_shared_dir.rglob("*"))
    out, s = compile_on_farm(model, args, address="auto", shared_cache=f"file://{bad_shared_dir}",
                             cache_dir=str(tmp_path / "local"))
    assert torch.equal(out, stock)
    assert s["put_errors"] > 0 and s["failures"] == 0 and s["fallbacks"] == 0
    assert "could not write cache entry to the shared tier" in caplog.text
    assert assert_intact(tmp_path / "local") > 0
    assert sorted(p.name for p in bad_shared_dir.rglob("*") if ".tmp" not in p.name) == before or \
        assert_intact(bad_shared_dir) >= 0  # whatever landed is sound; nothing half-written


def test_a_hung_compile_times_out_is_retried_once_then_compile_error(cluster: Any, tmp_path: pathlib.Path) -> None:
    """A real torch.compile on CPU whose C++ compiler never finishes a build (a wrapper around g++
    that sleeps instead of linking the kernel library): the farm times the job out, sends it again once,
    then the wait point raises CompileError naming the kernel. Nothing is cached for it."""
    from raycompile.wrapper import compat

    cxx = tmp_path / "hanging-g++"
    cxx.write_text('#!/bin/sh\ncase "$*" in *" -shared "*) exec sleep 60;; esac\nexec g++ "$@"\n')
    cxx.chmod(0o755)
    x = torch.randn(64)
    raycompile.enable(address="auto", job_timeout_s=3, cache_dir=str(tmp_path / "local"), shared_cache="none")
    try:
        torch._dynamo.reset()
        with compat.fresh_cache(), compat.inductor_config().patch({"cpp.cxx": (str(cxx),)}):
            start = time.monotonic()
            with pytest.raises(Exception) as info:
                torch.compile(lambda t: t.sin() * 2 + 1)(x)
        elapsed = time.monotonic() - start
        s = raycompile.stats()
    finally:
        raycompile.disable()
        torch._dynamo.reset()
    chain, e = [], info.value
    while e is not None:
        chain.append(e)
        e = getattr(e, "inner_exception", None) or e.__cause__ or e.__context__
    errors = [e for e in chain if isinstance(e, raycompile.CompileError)]
    assert errors, f"no CompileError in {[type(e).__name__ for e in chain]}"
    assert "twice" in errors[0].message and "RAYCOMPILE_JOB_TIMEOUT_S" in errors[0].message
    assert s["retried"] == 1 and s["jobs"] == 1 and s["fallbacks"] == 0 and elapsed < 120
    assert not list((tmp_path / "local").rglob("manifest.json"))  # nothing cached for it


def test_a_node_with_another_triton_is_refused_naming_both(cluster: Any, tmp_path: pathlib.Path) -> None:
    import triton

    shim = tmp_path / "other-triton"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(textwrap.dedent('''
        # Stand-in for a node with another triton install: this machine has one triton.
        import importlib.abc, importlib.util, sys

        class _OtherTriton(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name != "triton":
                    return None
                sys.meta_path.remove(self)
                spec = importlib.util.find_spec("triton")
                run = spec.loader.exec_module
                def exec_module(module):
                    run(module)
                    module.__version__ = "0.0.1+other"
                spec.loader.exec_module = exec_module
                return spec

        sys.meta_path.insert(0, _OtherTriton())
    '''))
    # ... and its package metadata (what the first-contact probe reads, without importing triton)
    info = shim / "triton-0.0.1+other.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: triton\nVersion: 0.0.1+other\n")
    path = os.pathsep.join([str(shim), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    node = cluster.add_node(num_cpus=1, env_vars={"PYTHONPATH": path})
    cluster.wait_for_nodes()
    try:
        raycompile.enable(address="auto", cache_dir=str(tmp_path / "local"))  # fallback on: still refused
        try:
            with pytest.raises(raycompile.VersionMismatchError) as info:
                raycompile.ready()
            text = str(info.value)
            assert f"triton {triton.__version__}" in text and "triton 0.0.1+other" in text
            # and a compile that needs the farm fails with it, naming both versions, instead of mixing binaries
            model, args = examples()["reduction_tail"]
            with pytest.raises(Exception, match="0.0.1.other"):
                compile_fresh(model, args)
            assert raycompile.stats()["jobs"] == 0
        finally:
            raycompile.disable()
        assert not list((tmp_path / "local").rglob("manifest.json"))
    finally:
        cluster.remove_node(node)


def _hammer(root: str, shared: str, key: str, seed: int) -> None:
    from raycompile.observe.stats import Stats

    cache = Cache.from_settings(os.path.join(root, f"local{seed}"), shared, 1 << 30, Stats(), secret=SECRET.encode())
    for _ in range(20):
        cache.put(Entry(key, {"payload": bytes([7]) * 50_000, "meta": b"m" * 1000}, {"label": "k"}))
        got = cache.get(key)
        assert got is not None and got.blobs["payload"] == bytes([7]) * 50_000


@pytest.mark.parametrize("tier", ["file", pytest.param("redis", marks=pytest.mark.extended)])  # redis: extended
def test_eight_processes_hammering_one_key_leave_one_valid_entry(tier: str, tmp_path: pathlib.Path,
                                                                 request: pytest.FixtureRequest) -> None:
    shared = f"file://{tmp_path / 'shared'}" if tier == "file" else request.getfixturevalue("redis_url")
    key = ("cd" * 32) if tier == "file" else os.urandom(32).hex()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_hammer, args=(str(tmp_path), shared, key, i)) for i in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    if tier == "file":
        entries = list((tmp_path / "shared" / "entries").glob("*/*"))
        assert [e.name for e in entries] == [key]  # one entry, no temp or trash left behind
        assert assert_intact(tmp_path / "shared") == 1
    from raycompile.observe.stats import Stats

    stats = Stats()
    got = Cache.from_settings(str(tmp_path / "reader"), shared, 1 << 30, stats, secret=SECRET.encode()).get(key)
    assert got is not None and stats.shared_hits == 1 and got.blobs["payload"] == bytes([7]) * 50_000
