"""What a user gets with no configuration: processes that share a tier agree on the secret; an
address left out or "auto" follows Ray's rules and never hangs on a crashed cluster's file;
enable() returns before Ray is up and the first compile still goes to the farm; and
backend="raycompile" takes mode and options as backend="inductor" does."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from farmrun import compile_fresh
from raystart import free_port

import raycompile
from raycompile.models import examples

HERE = pathlib.Path(__file__).parent


def driver(tmp: pathlib.Path, name: str, shared: str, **env: str) -> tuple[dict[str, Any], torch.Tensor, str]:
    """A new process (tests/integration/cluster_driver.py: embedded Ray, a cold compile) with its
    own empty local cache; returns its stats, output and log."""
    out = tmp / f"{name}.pt"
    proc = subprocess.run([sys.executable, str(HERE / "cluster_driver.py"), "", shared, str(out)],
                          env={**os.environ, "RAYCOMPILE_CACHE_DIR": str(tmp / f"local-{name}"), **env},
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    saved = torch.load(out)
    return saved["stats"], saved["out"], proc.stdout + proc.stderr


@pytest.mark.slow  # two driver processes, each with an embedded Ray and a cold compile
@pytest.mark.extended  # left out of CI's run (docs/testing.md): test_frames_fx_cache.py shares a tier, no secret
def test_two_processes_with_their_own_cache_dirs_share_a_file_tier_with_no_secret_set(tmp_path: pathlib.Path) -> None:
    """The default secret is this user's key (under XDG_CONFIG_HOME, not the cache dir), so a
    second process warm-starts from what the first published: 0 jobs, nothing refused."""
    shared = f"file://{tmp_path / 'shared'}"
    a, a_out, _ = driver(tmp_path, "a", shared)
    b, b_out, log = driver(tmp_path, "b", shared)
    assert a["jobs"] > 0 and a["refused"] == 0
    # b loads the compiled frame a published (nothing traced) and each kernel from the tier
    assert b["jobs"] == 0 and b["refused"] == 0 and b["shared_hits"] >= a["jobs"], (a, b)
    assert b["dynamo_hits"] >= 1 and b["dynamo_frames_traced"] == 0, b
    assert torch.equal(a_out, b_out) and "another secret" not in log


@pytest.mark.slow  # driver processes, each with an embedded Ray and a cold compile
@pytest.mark.extended  # left out of CI's run (docs/testing.md): test_warm_start.py refuses a tampered entry
def test_entries_signed_with_another_secret_are_refused_with_one_warning_and_recompiled(
        tmp_path: pathlib.Path) -> None:
    shared = f"file://{tmp_path / 'shared'}"
    a, a_out, _ = driver(tmp_path, "a", shared, RAYCOMPILE_SECRET="one")
    b, b_out, log = driver(tmp_path, "b", shared, RAYCOMPILE_SECRET="two")
    assert b["refused"] > a["jobs"] and b["jobs"] == a["jobs"] and b["shared_hits"] == 0, (a, b)
    assert torch.equal(a_out, b_out)  # recompiled, never loaded
    warnings = [line for line in log.splitlines() if "signed with another secret" in line]
    assert len(warnings) == 1 and "RAYCOMPILE_SECRET" in warnings[0], log[-3000:]
    count = int(warnings[0].split("raycompile: ")[1].split()[0])
    assert 0 < count <= b["refused"]
    # and `raycompile cache verify` on that tier, with the second secret, lists them
    proc = subprocess.run([sys.executable, "-m", "raycompile", "cache", "verify", "--shared", shared],
                          env={**os.environ, "RAYCOMPILE_SECRET": "two"}, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 1 and "another secret" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]


# -- addresses -----------------------------------------------------------------------------------


@pytest.fixture
def stale_cluster_file(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Ray's current-cluster file of a cluster that crashed: it names a port nobody listens on.
    In a Ray temp dir of this test's own (RAY_TMPDIR), short enough for Ray's socket paths."""
    root = tempfile.mkdtemp(prefix="rs", dir="/tmp")
    monkeypatch.setenv("RAY_TMPDIR", root)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    os.makedirs(os.path.join(root, "ray"))
    dead = f"127.0.0.1:{free_port()}"
    with open(os.path.join(root, "ray", "ray_current_cluster"), "w") as f:
        f.write(dead)
    yield dead


def test_auto_with_a_stale_cluster_file_and_no_fallback_raises_at_once(stale_cluster_file: str) -> None:
    """enable() itself raises (its one check, local and instant), before any background start."""
    import ray

    with pytest.raises(raycompile.FarmUnavailableError) as info:
        raycompile.enable(address="auto", fallback=False)
    assert stale_cluster_file in str(info.value) and "crashed or was stopped" in str(info.value)
    assert not raycompile.is_enabled() and not ray.is_initialized()


@pytest.mark.extended  # left out of CI's run (docs/testing.md): the fallback's one warning in test_unreachable.py,
# the stale file named in test_demo_and_status_treat_a_stale_cluster_file_as_enable_does
def test_auto_with_a_stale_cluster_file_falls_back_to_local_compiles(stale_cluster_file: str,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    import ray

    model, args = examples()["reduction_tail"]
    raycompile.enable(address="auto")
    try:
        out = compile_fresh(model, args)
        s = raycompile.stats()
        assert raycompile.ready()["fallback"] is True and not ray.is_initialized()
        text = raycompile.report()
    finally:
        raycompile.disable()
    assert s["jobs"] == 0 and s["fallbacks"] > 0
    # one warning, with the reason; the report says it too
    warnings = [r for r in caplog.records if "ompiling locally" in r.getMessage()]
    assert len(warnings) == 1 and stale_cluster_file in warnings[0].getMessage(), caplog.text
    assert f"{s['fallbacks']} compiles ran locally with stock Inductor, because: cannot reach Ray at auto" in text
    assert stale_cluster_file in s["ray_unavailable"], s["ray_unavailable"]
    torch.testing.assert_close(out, model(*args), rtol=1e-5, atol=1e-5)


def test_no_address_with_a_stale_cluster_file_starts_an_embedded_ray(stale_cluster_file: str) -> None:
    model, args = examples()["reduction_tail"]
    raycompile.enable()
    try:
        up = raycompile.ready()
        out = compile_fresh(model, args)
        s = raycompile.stats()
    finally:
        raycompile.disable()
    assert up["embedded"] and not up["fallback"] and s["jobs"] > 0 and s["fallbacks"] == 0
    torch.testing.assert_close(out, model(*args), rtol=1e-5, atol=1e-5)


def test_demo_and_status_treat_a_stale_cluster_file_as_enable_does(stale_cluster_file: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "raycompile", "status"], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 2 and stale_cluster_file in proc.stderr, proc.stderr[-2000:]
    proc = subprocess.run([sys.executable, "-m", "raycompile", "demo", "--address", "auto"], capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 2 and stale_cluster_file in proc.stderr, proc.stderr[-2000:]


# -- enable() and the first compile --------------------------------------------------------------


@pytest.mark.slow  # an embedded Ray started mid-compile
def test_enable_returns_before_ray_is_up_and_the_first_compile_still_goes_to_the_farm(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray's start is held (the real one, released later) to show that enable() does not wait for
    it, and that a compile missing the cache waits for it and goes to the farm, not to stock."""
    import ray

    from raycompile.orchestrator import startup

    release = threading.Event()
    real_connect = startup.connect

    def held_connect(*args: Any, **kwargs: Any) -> Any:
        assert release.wait(120)
        return real_connect(*args, **kwargs)

    # the moment a compile (on a lookup thread) starts waiting for the start, by the test's clock
    waiting: list[float] = []
    arrived = threading.Event()
    real_wait = startup.Startup.wait_farm

    def wait_farm(self: Any, timeout: float | None = None) -> Any:
        if threading.current_thread().name.startswith("raycompile-io"):
            waiting.append(time.monotonic())
            arrived.set()
        return real_wait(self, timeout)

    monkeypatch.setattr(startup, "connect", held_connect)
    monkeypatch.setattr(startup.Startup, "wait_farm", wait_farm)
    model, args = examples()["reduction_tail"]
    raycompile.enable()
    enabled = time.monotonic()
    try:
        assert not ray.is_initialized() and raycompile.is_enabled()
        result: dict[str, Any] = {}
        worker = threading.Thread(target=lambda: result.update(out=compile_fresh(model, args)))
        worker.start()
        assert arrived.wait(300), "no compile waited for Ray"
        assert worker.is_alive() and raycompile.stats()["jobs"] == 0  # the first miss waits for Ray
        released = time.monotonic()
        release.set()
        worker.join(timeout=300)
        assert not worker.is_alive()
        s = raycompile.stats()
        text = raycompile.report()
    finally:
        release.set()
        raycompile.disable()
    assert s["jobs"] > 0 and s["fallbacks"] == 0, s
    # what it waited is counted and reported: at least from its first wait to the release, and Ray
    # connected no sooner than the release (all on one monotonic clock)
    # Ray's start began at the first miss (lazy: not at enable()), before it connected
    assert set(s["ray_start_seconds"]) == {"begun", "connected", "ready"}, s
    assert 0 <= s["ray_start_seconds"]["begun"] <= s["ray_start_seconds"]["connected"], s
    assert s["ray_start_seconds"]["connected"] >= released - enabled, (s, released - enabled)
    assert s["ray_wait_seconds"] >= released - waiting[0], (s, released - waiting[0])
    assert "Ray after enable(): begun" in text and "connected" in text and "kernel compiles waited" in text, text
    torch.testing.assert_close(result["out"], model(*args), rtol=1e-5, atol=1e-5)


def test_a_process_whose_compiles_all_hit_the_cache_never_waits_for_ray(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: pathlib.Path) -> None:
    from raycompile.orchestrator import startup

    model, args = examples()["reduction_tail"]
    cache_dir = str(tmp_path / "local")
    raycompile.enable(cache_dir=cache_dir)
    try:
        cold = compile_fresh(model, args)
        assert raycompile.stats()["jobs"] > 0
    finally:
        raycompile.disable()
    never = threading.Event()  # Ray never comes up in the second session

    def no_connect(*args: Any, **kwargs: Any) -> Any:
        never.wait(300)
        raise RuntimeError("not reached")

    monkeypatch.setattr(startup, "connect", no_connect)
    raycompile.enable(cache_dir=cache_dir)
    try:
        warm = compile_fresh(model, args)
        s = raycompile.stats()
    finally:
        never.set()
        raycompile.disable()
    assert s["jobs"] == 0 and s["fallbacks"] == 0 and s["local_hits"] > 0 and s["misses"] == 0, s
    assert torch.equal(cold, warm)


# -- backend="raycompile" ------------------------------------------------------------------------


@pytest.mark.extended  # left out of CI's run (docs/testing.md): options in the key: test_frames_options.py
def test_the_backend_string_takes_mode_and_options_as_inductor_does() -> None:
    """Inductor runs with the mode's or the options' config patches (a post-grad pass records what
    it sees), through the farm, and an unknown option is refused as backend="inductor" does."""
    from torch._inductor import config

    model, args = examples()["reduction_tail"]
    seen: list[tuple[bool, bool]] = []

    def record(graph: torch.fx.Graph) -> None:
        seen.append((bool(config.max_autotune), bool(config.epilogue_fusion)))

    try:
        with config.patch(post_grad_custom_post_pass=record):
            by_mode = compile_fresh(model, args, backend="raycompile", mode="max-autotune-no-cudagraphs")
        from_mode, seen[:] = list(seen), []
        by_options = compile_fresh(model, args, backend="raycompile",
                                   options={"post_grad_custom_post_pass": record, "epilogue_fusion": False})
        s = raycompile.stats()
        with pytest.raises(Exception, match="Unexpected optimization option"):
            compile_fresh(model, args, backend="raycompile", options={"no_such_option": 1})
    finally:
        raycompile.disable()
    assert from_mode and all(v == (True, True) for v in from_mode), from_mode
    assert seen and all(v == (False, False) for v in seen), seen
    assert s["jobs"] > 0 and s["fallbacks"] == 0
    for out in (by_mode, by_options):
        torch.testing.assert_close(out, model(*args), rtol=1e-5, atol=1e-5)


@pytest.mark.slow  # three compiles, two in Inductor's own worker processes
def test_by_default_one_machine_compiles_in_inductors_own_workers_and_caches_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    """compile_jobs="auto" with an embedded Ray (no other node, no other driver): the farm's jobs
    run in Inductor's own compile pools without waiting for Ray at all (Ray is held back here and
    never comes up), bitwise stock's output; the entries are cached, so a second session on this
    machine compiles nothing. Nothing of such a compile needs Ray (no GPU timings, no other driver),
    so its start is not even begun: an embedded Ray would only take CPU and the GIL from the compile."""
    from raycompile.orchestrator import startup

    monkeypatch.delenv("RAYCOMPILE_COMPILE_JOBS")
    never = threading.Event()

    def no_connect(*args: Any, **kwargs: Any) -> Any:
        never.wait(300)
        raise RuntimeError("not reached")

    monkeypatch.setattr(startup, "connect", no_connect)
    model, args = examples()["reduction_tail"]
    stock = compile_fresh(model, args)
    cache_dir = str(tmp_path / "local")
    sessions = []
    try:
        for _ in range(2):
            raycompile.enable(cache_dir=cache_dir)
            try:
                out = compile_fresh(model, args)
                sessions.append(raycompile.stats())
            finally:
                raycompile.disable()
            assert torch.equal(out, stock)
    finally:
        never.set()
    cold, warm = sessions
    assert cold["jobs_local"] > 0 and cold["jobs"] == 0 and cold["fallbacks"] == 0, cold
    assert warm["jobs_local"] == 0 and warm["jobs"] == 0 and warm["local_hits"] >= cold["jobs_local"], warm
    assert cold["dynamo_misses"] >= 1 and cold["ray_start_seconds"] == {} == warm["ray_start_seconds"], cold


def _pool_wake(tmp_path: pathlib.Path, mode: str, **env: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, str(HERE / "pool_wake_driver.py"), mode, str(tmp_path / "cache")],
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[7:])


def test_inductors_wakeup_starts_its_own_compile_workers_where_this_node_compiles(tmp_path: pathlib.Path) -> None:
    """Stock starts its compile pool when a compile of CUDA inputs begins (AsyncCompile.wakeup),
    so its workers come up while AOTAutograd and lowering run. The Router answers that probe
    itself; where jobs run in this node's Inductor workers, it must start them then too, not at
    the first kernel job (that put the pool's start on the compile's critical path)."""
    r = _pool_wake(tmp_path, "local")
    assert r["before"] == 0 and r["routed"] and r["started"] and r["alive"] and r["pool"] == "SubprocPool", r
    # a warm load probes the pool as well, and must not start it (nor Ray): nothing compiles there
    assert not r["on_load"], r


@pytest.mark.slow  # an embedded Ray comes up in the driver
def test_a_node_whose_jobs_go_to_ray_starts_no_compile_workers_of_its_own(tmp_path: pathlib.Path) -> None:
    r = _pool_wake(tmp_path, "cluster")
    assert r["before"] == 0 and r["routed"] and not r["on_load"] and not r["started"], r


def test_a_cold_compile_asks_for_ray_with_the_mode_it_compiles_in(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: pathlib.Path) -> None:
    """Whether a cold compile begins Ray's start depends on whether it will time GPU candidates
    (max-autotune): the session is told so from the compile's own options, as the frames key holds
    them (text: "False" must not read as true), once at the function's miss and once at each graph's
    compile. Real torch.compile calls on this CPU, default mode and max-autotune."""
    from raycompile import session as session_module

    asked: list[bool] = []
    real = session_module.Session._ray_needed
    monkeypatch.setattr(session_module.Session, "_ray_needed",
                        lambda self, max_autotune: asked.append(max_autotune) or real(self, max_autotune))
    raycompile.enable(cache_dir=str(tmp_path / "cache"), compile_jobs="auto")
    try:
        x = torch.randn(8, 16)
        torch.compile(lambda t: (t.cos() + 1).sum(-1))(x)
        default = list(asked)
        asked.clear()
        torch.compile(lambda t: (t.sin() * 3).sum(-1), mode="max-autotune-no-cudagraphs")(x)
        tuned = list(asked)
        s = raycompile.stats()
    finally:
        raycompile.disable()
    assert default and not any(default), default
    assert tuned and all(tuned), tuned
    # no GPU here, no cluster: neither compile needed Ray, so neither began it
    assert s["ray_start_seconds"] == {}, s
