"""Autotuning on GPU actors, on a real multi-node Ray cluster (``cluster_utils``) with fake GPUs:
two nodes with a GPU of model A, one with a GPU of model B, a head with none. Only the GPU timing
is a test double (``gpu_double.FakeGPUTiming``); grouping, fan-out, actor crashes and restarts,
what travels to the actors, the Inductor seams and the cache of winners are real."""

from __future__ import annotations

import pathlib
import pickle
import threading
import time
from collections.abc import Iterator
from typing import Any

import gpu_double
import pytest
import torch
import triton
import triton.language as tl
from gpu_double import FakeGPUTiming, fake_ms, template_ms
from raystart import ray_cluster
from templates import triton_mm_choices
from waiting import wait_until

import raycompile
from raycompile.cache import Cache, Entry
from raycompile.kernels import Versions
from raycompile.kernels.benchmark import INF, BenchJob, Payload
from raycompile.observe.stats import Stats
from raycompile.orchestrator.gpu_pool import GPUPool
from raycompile.settings import Settings

pytestmark = pytest.mark.slow  # a multi-node cluster of fake-GPU nodes; max-autotune compiles

A, B = "Fake A (sm_90)", "Fake B (sm_80)"
CORPUS = pathlib.Path(__file__).parents[1] / "fixtures" / "corpus_torch211" / "kernels"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    with ray_cluster(*({"num_cpus": 1, "num_gpus": 1, "resources": {f"{gpu_double.PREFIX}{model}": 1}}
                       for model in ("A", "A", "B"))) as c:
        gpu_double.register()
        yield c


@pytest.fixture(scope="class")
def pool(cluster: Any) -> Iterator[GPUPool]:
    """One actor per fake GPU, for the tests of one class (actors hold their GPU until closed)."""
    with GPUPool(Stats(), measure=FakeGPUTiming(busy_s=0.2), start_timeout_s=300) as p:
        yield p


def jobs(configs: list[dict[str, Any]], name: str = "triton_red_fused_0") -> list[tuple[BenchJob, Payload]]:
    payload = Payload.make("inductor", name, f"def {name}(): pass\n")
    return [(BenchJob(payload.kernel_id, name, i, cfg, Versions.here()), payload) for i, cfg in enumerate(configs)]


CONFIGS = [{"XBLOCK": x, "num_warps": w, "num_stages": 1} for x in (16, 32, 64, 128) for w in (2, 4, 8)]


class TestPool:
    """The GPU pool itself: grouping, fan-out, crash isolation."""

    def test_actors_are_grouped_by_gpu_model(self, pool: GPUPool) -> None:
        groups = pool.groups()
        assert sorted(groups) == [A, B]
        assert len(groups[A]) == 2 and len(groups[B]) == 1
        assert len({g.split("/")[0] for g in groups[A]}) == 2  # on two nodes


    def test_configs_fan_out_over_the_gpus_of_their_model(self, pool: GPUPool) -> None:
        before, waited = dict(pool.stats.gpus), pool.stats.benchmark_wall_seconds
        t0 = time.perf_counter()
        timings = pool.run(jobs(CONFIGS), A)
        wall = time.perf_counter() - t0
        # the driver's wait is counted: at least the 0.2 s doubles spread over 2 GPUs, at most the call
        waited = pool.stats.benchmark_wall_seconds - waited
        assert 0.2 * len(CONFIGS) / 2 <= waited <= wall
        assert [t.ms for t in timings] == [fake_ms(c) for c in CONFIGS]
        ran = {g: n - before.get(g, 0) for g, n in pool.stats.gpus.items() if n != before.get(g, 0)}
        assert sorted(ran) == sorted(pool.groups()[A])  # both GPUs of model A, none of model B
        assert sum(ran.values()) == len(CONFIGS) and min(ran.values()) >= 3
        print(f"\n{len(CONFIGS)} configs x 0.2 s on 2 fake GPUs: {wall:.2f} s (serial {0.2 * len(CONFIGS):.1f} s), "
              f"per GPU {ran}")


    def test_each_candidate_is_in_the_report_and_on_its_gpu_workers_track(self, pool: GPUPool) -> None:
        """What the operator sees: every candidate a slice on the trace track of the actor that
        timed it, and the summary's autotune lines; the compile-job lines leave benchmarks out."""
        from raycompile.observe.report import chrome_trace, summary

        before = len(pool.stats.job_records())
        t0 = time.time()
        timings = pool.run(jobs(CONFIGS[:6], "triton_poi_traced_0"), A)
        records = pool.stats.job_records()[before:]
        assert [r.label for r in records if r.is_benchmark] == [f"benchmark {j.name}" for j, _ in
                                                               jobs(CONFIGS[:6], "triton_poi_traced_0")]
        assert {(r.node_id, r.pid) for r in records} == {(t.node_id, t.pid) for t in timings}
        assert all(r.started >= t0 - 1 and r.seconds >= 0.2 for r in records)  # the double's 0.2 s each
        events = chrome_trace(records)["traceEvents"]
        tracks = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
        assert tracks == {f"GPU worker {t.pid}" for t in timings}
        assert sum(e["ph"] == "X" and e["name"].startswith("benchmark triton_poi_traced_0") for e in events) == 6
        text = summary(pool.stats.snapshot(), pool.stats.job_records())
        gpus = len(pool.stats.gpus)
        assert f"autotune: {pool.stats.benchmarks} candidates on {gpus} GPU(s)" in text
        assert "slowest kernels" not in text  # no compile job ran: the benchmarks are not listed as ones

    def test_a_config_that_crashes_its_gpu_takes_down_only_its_actor(self, pool: GPUPool) -> None:
        configs = [*CONFIGS[:4], {"XBLOCK": 64, "num_warps": 4, "num_stages": 1, "POISON": 1}, *CONFIGS[4:8]]
        restarts = pool.stats.gpu_restarts
        timings = pool.run(jobs(configs, "triton_poi_poison_0"), A)
        assert timings[4].ms == INF and "died" in timings[4].error
        assert all(t.ms == fake_ms(c) for i, (t, c) in enumerate(zip(timings, configs)) if i != 4)
        assert pool.stats.gpu_restarts == restarts + 1
        # the crashed actor is restarted (a new process: seconds on a loaded box; meanwhile the
        # other GPU takes every job): then both GPUs of model A time the next kernels
        deadline = time.monotonic() + 120
        for attempt in range(1000):
            before = dict(pool.stats.gpus)
            again = pool.run(jobs(CONFIGS, f"triton_poi_after_{attempt}"), A)
            assert all(t.ms < INF for t in again)
            if all(pool.stats.gpus.get(g, 0) > before.get(g, 0) for g in pool.groups()[A]):
                break
            assert time.monotonic() < deadline, "the crashed GPU worker did not come back within 120 s"


    def test_a_gpu_model_the_cluster_lacks_is_an_error(self, pool: GPUPool) -> None:
        with pytest.raises(raycompile.NoGPUError, match="Fake C"):
            pool.run(jobs(CONFIGS[:1]), "Fake C (sm_100)")


    def test_a_held_gpu_takes_no_job_until_released(self, pool: GPUPool) -> None:
        """The driver's own timings hold the actor on its GPU (``hold``): it finishes the job it
        has, takes no other while held, and takes jobs again after."""
        pool.start()
        actors = [a for a in pool._actors or [] if a.group == A]
        held, other = actors
        assert held.uuid and held.uuid != other.uuid  # each actor reports its GPU's UUID
        busy_inside: list[bool] = []
        done: list[list[Any]] = []
        background = threading.Thread(target=lambda: done.append(pool.run(jobs(CONFIGS, "triton_poi_held_0"), A)))
        background.start()
        wait_until(lambda: {id(held), id(other)} <= pool._busy, 120, "both actors timing jobs")
        with pool.hold(held.uuid):  # waits for the job the held actor has
            # while held, its actor is never given a job: the rest of the run goes to the other one
            while background.is_alive():
                busy_inside.append(id(held) in pool._busy)
                background.join(timeout=0.05)
                assert len(busy_inside) < 2400, "the run did not end within 120 s"
        assert busy_inside and not any(busy_inside)
        assert [t.ms for t in done[0]] == [fake_ms(c) for c in CONFIGS]
        # released: it takes jobs again; held again: every job goes to the other GPU
        with pool.hold(held.uuid):
            timings = pool.run(jobs(CONFIGS[:4], "triton_poi_held_1"), A)
        assert {t.gpu for t in timings} == {other.gpu}
        assert {t.gpu for t in pool.run(jobs(CONFIGS, "triton_poi_held_2"), A)} == {held.gpu, other.gpu}
        # every GPU of the group held by this very thread (a kernel's first run, with configs sent to
        # the actors, inside a timing of its own): no actor can free, so its jobs fail at once,
        # and the caller times them itself, rather than waiting forever
        t0 = time.monotonic()
        with pool.hold(held.uuid), pool.hold(other.uuid):
            stuck = pool.run(jobs(CONFIGS[:2], "triton_poi_held_3"), A)
        assert [t.ms for t in stuck] == [INF, INF] and "this thread is timing on" in stuck[0].error
        assert time.monotonic() - t0 < 60
        assert {t.gpu for t in pool.run(jobs(CONFIGS[:2], "triton_poi_held_4"), A)} <= {held.gpu, other.gpu}


@pytest.mark.extended  # left out of CI's run (docs/testing.md): a timing edge of the pool's start
def test_a_start_in_progress_never_delays_the_drivers_own_timings(cluster: Any) -> None:
    """``hold`` (what the driver enters around each timing of its own) and ``started`` answer at
    once while the actors are starting: here they cannot start (another pool has every GPU) and
    the start waits out its time-out in the background."""
    with GPUPool(Stats(), measure=FakeGPUTiming(), start_timeout_s=300) as owner:
        owner.start()
        late = GPUPool(Stats(), measure=FakeGPUTiming(), start_timeout_s=20)
        try:
            late.prestart()
            wait_until(late._starting.locked, 60, "the background start under way")  # waiting for a GPU
            assert not late.started
            with late.hold(owner._actors[0].uuid):
                pass
            # it returned while the start was still waiting for a GPU (it ends after its 20 s)
            assert late._starting.locked() and not late.started
            late._prestart.join(timeout=120)
            assert late.started and late.groups() == {}  # none came up: left out, not an error
        finally:
            late.close()


def test_max_autotune_decisions_are_timed_in_the_background(cluster: Any, tmp_path: pathlib.Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Pipelined max-autotune: as soon as Inductor makes a decision's precompile function
    (``make_precompile_fn``, the real one), its Triton choices are precompiled and timed on the
    actors in the background, several decisions at once; the benchmark Inductor asks for later
    collects those timings instead of sending the choices again, and each precompile runs once."""
    import sys
    import types

    from torch._inductor import autotune_process
    from torch._inductor import select_algorithm as sa

    from raycompile.autotune_session import AutotuneSession

    # Inductor skips threaded precompiles on Python <= 3.11.8 (cpython#106905), as on CI's 3.11.7
    py312 = types.SimpleNamespace(major=3, minor=12, micro=0)
    monkeypatch.setattr(sa, "sys", types.SimpleNamespace(**{**vars(sys), "version_info": py312}))
    stock = sa.AlgorithmSelectorCache.__dict__["make_precompile_fn"]
    precompiled: list[str] = []
    go = threading.Event()  # each precompile waits for it: until then, none has ended

    def decision(sub: str, configs: list[tuple[int, int]]) -> list[Any]:
        (tmp_path / sub).mkdir()
        choices = triton_mm_choices(tmp_path / sub, configs)
        for i, c in enumerate(choices):
            c.hash_key = c.kernel_hash_key = (lambda k=f"{sub}{i}": k)
            c.precompile = (lambda k=f"{sub}{i}": (go.wait(120), precompiled.append(k)))
        return choices

    stats = Stats()
    cache = Cache.from_settings(str(tmp_path / "cache"), "none", 2**30, stats)
    session = AutotuneSession(stats, cache, Settings.resolve(), group=A, measure=FakeGPUTiming(busy_s=0.2))
    try:
        session.pool.start()
        first, second = decision("a", [(4, 4), (2, 8)]), decision("b", [(2, 4), (3, 4), (1, 4)])
        selector = sa.AlgorithmSelectorCache()
        precompile_first = selector.make_precompile_fn(first, "mm", "first")
        precompile_second = selector.make_precompile_fn(second, "mm", "second")
        assert precompiled == [] and stats.benchmarks == 0  # returned before any precompile ended
        go.set()
        wait_until(lambda: stats.benchmarks >= 5, 120, "the 5 choices timed")  # nobody asked for them yet
        assert stats.benchmarks == 5 and stats.benchmark_wall_seconds == 0  # in the background
        assert selector.make_precompile_fn(first, "mm", "first") is precompile_first  # the same decision again
        for precompile, choices in ((precompile_second, second), (precompile_first, first)):
            precompile()  # what do_autotuning calls first: already done
            timings = autotune_process.benchmark_in_sub_process(choices)
            assert [timings[c] for c in choices] == [template_ms(c.bmreq.num_stages, c.bmreq.num_warps)
                                                     for c in choices]
        assert stats.benchmarks == 5  # collected, not sent again
        assert sorted(precompiled) == ["a0", "a1", "b0", "b1", "b2"]  # each precompile ran once
        # a decision whose timings never arrived in the background is timed when asked
        third = decision("c", [(2, 4)])
        assert autotune_process.benchmark_in_sub_process(third) == {third[0]: template_ms(2, 4)}
        assert stats.benchmarks == 6
    finally:
        session.close()
    assert sa.AlgorithmSelectorCache.__dict__["make_precompile_fn"] is stock


def test_max_autotune_choices_go_to_the_gpu_actors(cluster: Any, tmp_path: pathlib.Path) -> None:
    """Inductor's ``benchmark_in_sub_process`` (what select_algorithm calls for Triton template
    choices) reaches the GPU actors while the hooks are installed; stock is restored after."""
    from torch._inductor import autotune_process, config

    from raycompile.autotune_session import AutotuneSession
    from raycompile.wrapper.gpu_autotune import template_payload
    from raycompile.wrapper.job_keys import triton_key as triton_source_key

    stock_pool, stock_subproc = autotune_process.get_tuning_process_pool, config.autotune_in_subproc
    stats = Stats()
    cache = Cache.from_settings(str(tmp_path / "cache"), "none", 2**30, stats)
    session = AutotuneSession(stats, cache, Settings.resolve(), group=A, measure=FakeGPUTiming())
    try:
        assert config.autotune_in_subproc is True
        choices = triton_mm_choices(tmp_path, [(4, 4), (2, 8), (2, 4), (3, 4)])
        timings = autotune_process.benchmark_in_sub_process(choices)
        assert [timings[c] for c in choices] == [template_ms(c.bmreq.num_stages, c.bmreq.num_warps) for c in choices]
        assert stats.benchmarks == len(choices) and set(stats.gpus) <= set(session.pool.groups()[A])
        # the kernel's Triton cache group (compiled by the farm, in the cache) travels with it
        source = pathlib.Path(choices[0].bmreq.module_path).read_text()
        cache.put(Entry(triton_source_key("triton_mm", source), {"triton/GRP/triton_mm.cubin": b"cubin"}))
        payload, _ = template_payload(choices[0], cache)
        assert payload.files == {"triton/GRP/triton_mm.cubin": b"cubin"} and payload.source == source
        assert pickle.loads(payload.bmreq).num_stages == 4
    finally:
        session.close()
    assert autotune_process.get_tuning_process_pool is stock_pool and config.autotune_in_subproc == stock_subproc


def load_kernel(name_part: str) -> tuple[Any, str]:
    """A real Inductor kernel from the corpus, loaded as Inductor loads it (not compiled: no GPU)."""
    from torch._inductor.codecache import _load_triton_kernel_from_source

    from raycompile.wrapper.compat import compile_only_driver

    path = next(p for p in sorted(CORPUS.glob("*.py")) if name_part in p.read_text())
    source = path.read_text()
    name = next(line.split("(")[0][4:] for line in source.splitlines() if line.startswith("def "))
    with compile_only_driver("cuda", 90, 32):
        return _load_triton_kernel_from_source(name, source), name


class Launcher:  # stands in for a launcher: loading a cubin needs a GPU this machine lacks
    def __init__(self, config: Any) -> None:
        self.config = config


def test_config_winner_is_cached_and_stitched(cluster: Any, tmp_path: pathlib.Path) -> None:
    """``autotune_configs="actors"``: a kernel's configs are timed on the GPU actors of its model
    (first run); the winner is filed in the cache, handed to the output module's runtime, and a
    second run benchmarks nothing."""
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    from raycompile.autotune_session import AutotuneSession
    from raycompile.cache.winners import WinnerStore
    from raycompile.wrapper import compat, runtime
    from raycompile.wrapper.job_keys import triton_key as triton_source_key

    kernel, name = load_kernel("def triton_poi_fused__to_copy__unsafe_view_add_bmm_cat_cos_mul")  # 6 configs
    kernel.launchers = [Launcher(c) for c in kernel.configs]
    configs = [compat.config_dict(c) for c in kernel.configs]
    assert len(configs) >= 2
    key = triton_source_key(name, pathlib.Path(kernel.filename).read_text())
    args = [torch.randn(64, 512), torch.randn(64, 512), torch.empty(64), 64, 512]
    stats = Stats()
    cache = Cache.from_settings(str(tmp_path / "cache"), "none", 2**30, stats)
    registry = runtime.Winners()  # what the session binds for the output modules it loads
    unbind = runtime.bind(runtime.Binding(registry))
    session = AutotuneSession(stats, cache, Settings.resolve(autotune_configs="actors"), group=A,
                              measure=FakeGPUTiming(), registry=registry)
    try:
        timings = CachingAutotuner.benchmark_all_configs(kernel, *args)
        assert [timings[launcher] for launcher in kernel.launchers] == [fake_ms(c) for c in configs]
        best = configs[min(range(len(configs)), key=lambda i: fake_ms(configs[i]))]
        assert stats.benchmarks == len(configs) and len(stats.gpus) == 2
        assert runtime.winner_for(key) == best  # what the output module stitches in
        again = CachingAutotuner.benchmark_all_configs(kernel, *args)  # a later run: nothing benchmarked
        assert stats.benchmarks == len(configs) and stats.autotune_cached == 1
        assert min(again, key=again.get).config is kernel.configs[configs.index(best)]
    finally:
        session.close()
    assert runtime.winner_for(key) is None  # the store is unregistered with the session
    unbind()
    # another process reads it from the cache tiers
    assert WinnerStore(Cache.from_settings(str(tmp_path / "cache"), "none", 2**30, Stats())).get(key) == best


def test_indirect_indexing_falls_back_to_local_autotune(cluster: Any, tmp_path: pathlib.Path) -> None:
    from raycompile.autotune_session import AutotuneSession

    kernel, _ = load_kernel("index out of bounds")
    kernel.launchers = [Launcher(c) for c in kernel.configs] * (2 if len(kernel.configs) == 1 else 1)
    stats = Stats()
    session = AutotuneSession(stats, None, Settings.resolve(), group=A, measure=FakeGPUTiming())
    local: list[Any] = []

    def stock(k: Any, *args: Any, **kwargs: Any) -> dict[Any, float]:
        local.append(k)
        return dict.fromkeys(k.launchers, 1.0)

    try:
        session.hooks.tuner.benchmark_all_configs(kernel, stock, torch.zeros(4))
    finally:
        session.close()
    assert local == [kernel] and stats.benchmarks_local == 1 and stats.benchmarks == 0


@triton.jit
def _scale(x, factor: tl.constexpr):
    return x * factor


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, _scale(tl.load(x_ptr + offs, mask=mask), 2) + tl.load(y_ptr + offs, mask=mask),
             mask=mask)


def test_raycompile_autotune_a_user_kernel(cluster: Any) -> None:
    """``raycompile.autotune``: the kernel (and the jit function it calls) rebuilt from its bundle
    on the actors, configs timed over the GPUs of model A, a crashing config marked failed."""
    from raycompile.autotune_session import AutotuneSession

    raycompile.enable(address="auto", autotune=False, shared_cache="none")
    try:
        raycompile.ready()  # the session's own hooks installed (autotune=False: none), then the double's
        session = raycompile.session.current()
        session.autotune = AutotuneSession(session.stats, None, session.settings, group=A, measure=FakeGPUTiming())
        configs = [triton.Config({"BLOCK": b}, num_warps=w) for b in (32, 64, 256) for w in (2, 4)]
        configs.append(triton.Config({"BLOCK": 64, "POISON": 1}, num_warps=4))
        x = torch.randn(1000)
        result = raycompile.autotune(add_kernel, configs, (x, x, torch.empty_like(x), x.numel()),
                                     grid=lambda meta: (triton.cdiv(1000, meta["BLOCK"]),))
        s = raycompile.stats()
    finally:
        raycompile.disable()
    assert result.best is configs[3]  # BLOCK 64, 4 warps: the double's fastest
    assert [ms for _, ms in result.timings[:-1]] == [fake_ms({**c.kwargs, "num_warps": c.num_warps})
                                                     for c in configs[:-1]]
    assert result.timings[-1][1] == INF and len(result.errors) == 1 and len(result.gpus) == 2
    assert s["benchmarks"] == len(configs) and s["gpu_restarts"] == 1 and len(s["gpus"]) == 2


# extended (docs/testing.md, stop 60): the actors' timings in the pool's other tests
@pytest.mark.extended
def test_gpu_actors_start_in_the_background_at_the_first_triton_compile(cluster: Any, tmp_path: pathlib.Path) -> None:
    """Not at ``enable()``, and not inside the first benchmark's wait: under max-autotune the
    session's GPU actors start in the background when the farm is sent the first GPU kernel to
    compile, so they are up when the kernel's candidates are timed; in default mode (configs timed
    here) they never start."""
    import functools

    from torch._inductor import config as inductor_config
    from torch._inductor.codecache import _load_triton_kernel_from_source
    from torch._inductor.runtime.compile_tasks import _worker_compile_triton

    from raycompile.autotune_session import AutotuneSession
    from raycompile.orchestrator import Farm
    from raycompile.wrapper import compat
    from raycompile.wrapper.hooks import ReadyFarm, Router

    stats = Stats()
    cache = Cache.from_settings(str(tmp_path / "cache"), "none", 2**30, stats)
    session = AutotuneSession(stats, cache, Settings.resolve(), group=A, measure=FakeGPUTiming())
    try:
        assert not session.pool.started
        with Farm(Settings.resolve(), toolchain=compat.TOOLCHAIN) as farm:
            router = Router(ReadyFarm(farm), stats, *compat.stock_pools(), cache)
            router.on_triton_job = session.prestart
            path = next(p for p in sorted(CORPUS.glob("*.py")) if "@triton.jit" in p.read_text())
            source = path.read_text()
            name = next(line.split("(")[0][4:] for line in source.splitlines() if line.startswith("def "))
            load = functools.partial(_load_triton_kernel_from_source, name, source)
            router.submit(_worker_compile_triton, load, {}, compat.triton_extra_config(source)).result(timeout=300)
            # default mode: no benchmark will go to the actors, so their start was not even asked for
            # (the Router asks on the submitting thread, before it returns)
            assert session.pool._prestart is None and not session.pool.started
            with inductor_config.patch(max_autotune=True):  # what mode="max-autotune" sets while compiling
                done = router.submit(_worker_compile_triton, load, {}, compat.triton_extra_config(source))
            # the actors' start does not hold up the compile job: asked for, not waited for
            assert session.pool._prestart is not None
            kernel, _ = done.result(timeout=300)
            assert farm.stats.jobs == 1 and kernel is not None  # compiled on the farm (once; then a cache hit)
            session.pool._prestart.join(timeout=120)
            assert session.pool.started and stats.benchmarks == 0  # up before any benchmark asked for them
            assert sorted(session.pool.groups()) == [A, B] and len(session.pool.groups()[A]) == 2
    finally:
        session.close()
