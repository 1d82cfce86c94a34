"""The pure parts of autotuning on GPU actors: what a benchmark job carries, how its arguments
are described and rebuilt, which kernels are kept local (indirect indexing), how a user's kernel
travels, and the store of winners."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import textwrap
from typing import Any

import pytest
import torch
import triton
import triton.language as tl
from templates import triton_mm_choices

from raycompile.cache import Cache
from raycompile.cache.winners import WinnerStore, get_winner, put_winner
from raycompile.kernels.benchmark import (
    INF,
    Payload,
    TensorArg,
    Timing,
    describe_args,
    fastest,
    has_indirect_indexing,
    is_sticky,
    load_user_kernel,
    make_args,
)
from raycompile.observe.stats import Stats
from raycompile.wrapper.compat import TOOLCHAIN, bundle_user_kernel, retarget_device

CORPUS = pathlib.Path(__file__).parents[1] / "fixtures" / "corpus_torch211" / "kernels"


def test_arguments_by_value_round_trip_with_strides_and_offset() -> None:
    base = torch.arange(60, dtype=torch.float32).reshape(6, 10)
    view = base[1:, 2:7].t()  # non-contiguous, offset 12
    described = describe_args([view, 7, 2.5, None, torch.tensor([3, 1, 2])], by_value=True)
    assert isinstance(described[0], TensorArg) and described[0].offset == view.storage_offset()
    rebuilt = make_args(described, "cpu", TOOLCHAIN)
    assert torch.equal(rebuilt[0], view) and rebuilt[0].stride() == view.stride()
    assert rebuilt[1:4] == [7, 2.5, None] and torch.equal(rebuilt[4], torch.tensor([3, 1, 2]))


def test_arguments_by_layout_are_made_as_inductor_makes_examples() -> None:
    x = torch.randn(8, 16, dtype=torch.float16).t()
    idx = torch.tensor([5, 9])
    described = describe_args([x, idx])
    assert described[0].data is None
    made, made_idx = make_args(described, "cpu", TOOLCHAIN)
    assert made.shape == x.shape and made.stride() == x.stride() and made.dtype == torch.float16
    assert torch.equal(made_idx, torch.zeros(2, dtype=idx.dtype))  # rand_strided: zeros for integers


def test_payload_id_changes_with_every_input() -> None:
    base = dict(kind="inductor", name="k", source="src")
    ids = {Payload.make(**base).kernel_id, Payload.make(**{**base, "source": "src2"}).kernel_id,
           Payload.make(**base, args=(TensorArg((2,), (1,), "float32"),)).kernel_id,
           Payload.make(**base, bmreq=b"x").kernel_id, Payload.make(**{**base, "kind": "template"}).kernel_id}
    assert len(ids) == 5 and Payload.make(**base).kernel_id == Payload.make(**base).kernel_id


def test_indirect_indexing_is_found_in_real_kernels() -> None:
    sources = {p.name: p.read_text() for p in sorted(CORPUS.glob("*.py"))}
    flagged = {n for n, s in sources.items() if has_indirect_indexing(s)}
    bounds_checked = {n for n, s in sources.items() if "index out of bounds" in s}
    assert flagged == bounds_checked and len(flagged) >= 2  # embedding gathers; nothing else


def test_indirect_indexing_in_user_kernels() -> None:
    gather = textwrap.dedent("""
        def k(idx_ptr, src_ptr, out_ptr, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            i = tl.load(idx_ptr + offs)
            row = i * 64
            tl.store(out_ptr + offs, tl.load(src_ptr + row + offs))
    """)
    plain = gather.replace("tl.load(src_ptr + row + offs)", "tl.load(src_ptr + offs) * row")
    assert has_indirect_indexing(gather) and not has_indirect_indexing(plain)


def test_sticky_cuda_errors_are_recognised() -> None:
    assert is_sticky(RuntimeError("CUDA error: an illegal memory access was encountered"))
    assert not is_sticky(RuntimeError("out of resource: shared memory"))


def test_retarget_device_and_fastest() -> None:
    src = "meta={'device': DeviceProperties(type='cuda', index=3, multi_processor_count=132, cc=90, warp_size=32)}"
    assert retarget_device(src, 0) == src.replace("index=3", "index=0")
    ts = [Timing(0, INF), Timing(1, 2.0), Timing(2, 1.5), Timing(3, 1.5)]
    assert fastest(ts) is ts[2] and fastest([Timing(0, INF)]) is None


SCALE = tl.constexpr(3)


@triton.jit
def _times(x):
    return x * SCALE


@triton.jit
def user_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, _times(tl.load(x_ptr + offs, mask=offs < n)), mask=offs < n)


def test_a_user_kernel_travels_as_source_and_rebuilds_in_another_process(tmp_path: pathlib.Path) -> None:
    """A JITFunction does not pickle; its bundle (source, the jit functions it calls, its globals)
    rebuilds in a process that never imported this test module."""
    import cloudpickle

    source, values = bundle_user_kernel(user_kernel)
    assert "def _times(x)" in source and "def user_kernel(" in source and set(values) == {"SCALE"}
    blob = tmp_path / "bundle.pkl"
    blob.write_bytes(cloudpickle.dumps((source, values)))
    code = ("import pickle, sys; from raycompile.kernels.benchmark import load_user_kernel; "
            f"src, values = pickle.loads(open({str(blob)!r}, 'rb').read()); "
            "k = load_user_kernel('user_kernel', src, values); "
            "print(type(k).__name__, k.fn.__globals__['SCALE'].value, 'test_benchmark' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["JITFunction", "3", "False"]
    rebuilt = load_user_kernel("user_kernel", source, values)  # here too: same source as the original
    assert rebuilt.src == user_kernel.src
    with pytest.raises(TypeError, match="triton.jit"):
        bundle_user_kernel(lambda x: x)


def test_winners_survive_in_the_cache_tiers(tmp_path: pathlib.Path) -> None:
    stats = Stats()
    shared = f"file://{tmp_path / 'shared'}"
    cache = Cache.from_settings(str(tmp_path / "a"), shared, 2**30, stats)
    winner = {"XBLOCK": 64, "num_warps": 4, "num_stages": 1}
    assert get_winner(cache, "k1") is None
    put_winner(cache, "k1", winner, {"kernel": "triton_poi_0"})
    assert get_winner(cache, "k1") == winner
    # another process: an empty local tier, the same shared tier (and this user's key)
    other = Cache.from_settings(str(tmp_path / "b"), shared, 2**30, Stats())
    store = WinnerStore(other)
    assert store.get("k1") == winner and store.get("k2") is None
    assert get_winner(Cache(other.local, None, Stats()), "k1") == winner  # copied to the local tier
    assert stats.misses == 0 and stats.local_hits == 0  # winner lookups are not kernel lookups


def test_a_shared_winner_is_copied_to_the_local_tier_on_the_caches_thread(tmp_path: pathlib.Path) -> None:
    """A winner read while a module loads (the main thread) is copied into the local tier on the
    cache's I/O thread, never on the reader's: that write took 0.75 s of a warm GPT-2 first call."""
    import threading

    shared = f"file://{tmp_path / 'shared'}"
    winner = {"XBLOCK": 64, "num_warps": 4, "num_stages": 1}
    put_winner(Cache.from_settings(str(tmp_path / "a"), shared, 2**30, Stats()), "k1", winner)
    writers: list[str] = []
    held = threading.Event()
    queued: list[Any] = []

    def submit(fn: Any, *args: Any) -> None:
        queued.append((fn, args))  # run later, as a busy executor would

    fresh = Cache.from_settings(str(tmp_path / "b"), shared, 2**30, Stats())
    fresh._submit = submit
    local_put = fresh.local.put

    def put(entry: Any) -> int:
        writers.append(threading.current_thread().name)
        held.set()
        return local_put(entry)

    fresh.local.put = put  # type: ignore[method-assign]
    assert get_winner(fresh, "k1") == winner
    assert writers == [] and len(queued) == 1  # answered before the copy was made
    fn, args = queued[0]
    worker = threading.Thread(target=fn, args=args, name="io")
    worker.start()
    worker.join(30)
    assert held.is_set() and writers == ["io"]
    assert get_winner(Cache(fresh.local, None, Stats()), "k1") == winner  # now in the local tier


def test_a_max_autotune_request_is_pointed_at_this_node(tmp_path: pathlib.Path) -> None:
    """A TritonBenchmarkRequest made on the driver names a module file that exists only there and
    the driver's device: on the GPU node its source is written to the local Inductor cache and
    its tensors are put on the local GPU."""
    from torch._inductor.autotune_process import TensorMeta, TritonGPUBenchmarkRequest

    from raycompile.wrapper.compat.autotune import point_request_here

    meta = TensorMeta(device=torch.device("cuda", 3), dtype=torch.float16, sizes=(8, 8), strides=(8, 1), offset=0)
    bmreq = TritonGPUBenchmarkRequest("triton_mm", [meta, meta], meta, [], "/elsewhere/triton_mm.py", "k",
                                      num_stages=2, num_warps=4)
    source = "def triton_mm():\n    pass\n"
    point_request_here(bmreq, source, torch.device("cpu"))
    assert pathlib.Path(bmreq.module_path).read_text() == source and bmreq.module_cache_key in bmreq.module_path
    assert {m.device for m in bmreq.input_tensor_meta} == {torch.device("cpu")}
    assert bmreq.output_tensor_meta.device == torch.device("cpu")


# --- the fastest candidates, confirmed in the driver ----------------------------------------------


def test_the_apparent_fastest_is_timed_here_until_the_fastest_was() -> None:
    """An actor that times one candidate too fast (another process, another GPU) does not decide:
    the apparent fastest is timed here, then the next apparent fastest, until the fastest was timed
    here; past the budget the rest are scaled by the here/actor ratio seen."""
    from raycompile.wrapper.gpu_autotune import confirm_fastest

    actor = {"a": 1.0, "b": 2.0, "c": 2.2, "d": INF}
    here = {"a": 3.0, "b": 2.5, "c": 2.4, "d": 9.9}  # "a" only looked fast on its actor
    asked: list[str] = []

    def time_here(k: str) -> float:
        asked.append(k)
        return here[k]

    timings, timed = confirm_fastest(actor, time_here, budget=3)
    assert asked == ["a", "b", "c"] and timed == {"a": 3.0, "b": 2.5, "c": 2.4}
    assert min(timings, key=timings.__getitem__) == "c" and timings["d"] == INF  # a failure stays failed
    # actors 20% fast: timed here until the fastest was (the next one is slower than it, as here)
    timings, timed = confirm_fastest({"a": 1.0, "b": 1.1, "c": 2.0}, lambda k: {"a": 1.2, "b": 1.32, "c": 2.4}[k])
    assert timed == {"a": 1.2, "b": 1.32} and timings["c"] == 2.0 and min(timings, key=timings.__getitem__) == "a"
    # the budget bounds the work; a candidate that fails here is inf; nothing finite: nothing timed
    timings, timed = confirm_fastest({"a": 1.0, "b": 2.0, "c": 3.0}, lambda k: 1 / 0 if k == "a" else 9.0, budget=2)
    assert timed == {"a": INF, "b": 9.0} and timings["a"] == INF and timings["c"] == pytest.approx(13.5)
    assert confirm_fastest({"a": INF}, lambda k: 1.0) == ({"a": INF}, {})


def test_candidates_the_actors_cannot_tell_apart_are_all_timed_here() -> None:
    """Within ``near`` of the actors' fastest their ranking is noise: "c" looked third on its actor
    but is the fastest here, and is found although the apparent fastest was confirmed at once."""
    from raycompile.wrapper.gpu_autotune import confirm_fastest

    actor = {"a": 1.00, "b": 1.05, "c": 1.08, "d": 1.50}
    here = {"a": 1.02, "b": 1.06, "c": 0.95, "d": 1.40}
    timings, timed = confirm_fastest(actor, here.__getitem__, budget=5, near=0.10)
    assert set(timed) == {"a", "b", "c"} and min(timings, key=timings.__getitem__) == "c"
    timings, timed = confirm_fastest(actor, here.__getitem__, budget=5, near=0.0)  # only the apparent fastest
    assert set(timed) == {"a"} and min(timings, key=timings.__getitem__) == "a"
    timings, timed = confirm_fastest(actor, here.__getitem__, budget=2, near=0.10)  # the budget still bounds it
    assert set(timed) == {"a", "b"}


def test_max_autotune_choices_are_ranked_on_actors_and_the_fastest_confirmed_here(tmp_path: pathlib.Path) -> None:
    """FarmTuningPool: the actors time every Triton choice; the ones that look fastest are timed
    again in the driver (where Inductor times the ATen choices they compete with), so an actor's
    bias cannot make a Triton choice win that stock Inductor would not pick."""
    from raycompile.wrapper.gpu_autotune import FarmTuningPool

    choices = triton_mm_choices(tmp_path, [(s, 4) for s in range(1, 5)])
    on_actors = [0.010, 0.011, 0.030, INF]  # choice 1 looks fastest on its actor
    here = {choices[0]: 0.020, choices[1]: 0.012, choices[2]: 0.031, choices[3]: 0.005}
    sent: list[int] = []

    def run(work: list[tuple[object, object]]) -> list[Timing]:
        sent.append(len(work))
        return [Timing(i, ms, gpu="g/0") for i, ms in enumerate(on_actors)]

    stats = Stats()
    pool = FarmTuningPool(run, None, lambda: None, stats, here.__getitem__, verify=3)
    timings = pool.benchmark(choices)
    assert sent == [4]  # every choice went to the actors, once
    assert min(timings, key=timings.__getitem__) is choices[1] and timings[choices[1]] == 0.012
    assert timings[choices[3]] == INF  # failed on its actor: never timed here
    assert stats.benchmarks_verified == 2 and stats.snapshot()["benchmarks_verified"] == 2
    # verify=0: the actors' timings as they came (what a driver without a GPU gets)
    plain = FarmTuningPool(run, None, lambda: None, Stats(), here.__getitem__, verify=0).benchmark(choices)
    assert [plain[c] for c in choices] == on_actors


def _corpus_kernel(name_part: str, source_edit: object = None) -> tuple[object, str, str]:
    """A real Inductor kernel from the corpus, loaded as Inductor loads a module (no GPU needed)."""
    from torch._inductor.codecache import PyCodeCache

    from raycompile.wrapper.compat import compile_only_driver

    source = next(p for p in sorted(CORPUS.glob("*.py")) if name_part in p.read_text()).read_text()
    name = next(line.split("(")[0][4:] for line in source.splitlines() if line.startswith("def "))
    if callable(source_edit):
        source, name = source_edit(source, name)
    with compile_only_driver("cuda", 90, 32):
        return getattr(PyCodeCache.load(source), name), name, source


def test_a_fusion_benchmark_kernel_is_sent_under_the_name_its_module_binds() -> None:
    """Inductor's fusion benchmarks load a module whose kernel is ``triton_`` while its
    inductor_meta still says 'Placeholder.DESCRIPTIVE_NAME' (generate_kernel_code_from_nodes
    replaces only KERNEL_NAME); the GPU actors look the kernel up by the name sent."""
    from torch._inductor.codecache import _load_triton_kernel_from_source

    from raycompile.wrapper.compat import autotuner_source, compile_only_driver
    from raycompile.wrapper.job_keys import triton_key as triton_source_key

    def as_benchmark_module(source: str, name: str) -> tuple[str, str]:
        return (source.replace(f"def {name}(", "def triton_(")
                .replace(f"'kernel_name': '{name}'", "'kernel_name': 'Placeholder.DESCRIPTIVE_NAME'"), "triton_")

    kernel, name, source = _corpus_kernel("def triton_poi_fused__to_copy__unsafe_view_add_bmm_cat_cos_mul",
                                          as_benchmark_module)
    assert kernel.inductor_meta["kernel_name"] == "Placeholder.DESCRIPTIVE_NAME"
    assert not hasattr(kernel, "_reload_kernel")  # loaded by the module, not by AsyncCompile
    found = autotuner_source(kernel)
    assert found == ("triton_", source)
    with compile_only_driver("cuda", 90, 32):  # what the actor does with it
        assert _load_triton_kernel_from_source(*found).fn.__name__ == "triton_"
    # the key its Triton cache group was filed under by the farm (async_compile.triton("triton_", src))
    assert triton_source_key(*found) == triton_source_key("triton_", source)


class _Launcher:  # stands in for a launcher: loading a cubin needs a GPU this machine lacks
    def __init__(self, config: object) -> None:
        self.config = config


def test_kernel_configs_ranked_on_actors_and_the_fastest_confirmed_with_the_real_arguments() -> None:
    from raycompile.cache.winners import WinnerStore
    from raycompile.wrapper import compat
    from raycompile.wrapper.gpu_autotune import ConfigTuner
    from raycompile.wrapper.job_keys import triton_key as triton_source_key

    kernel, name, _ = _corpus_kernel("def triton_poi_fused__to_copy__unsafe_view_add_bmm_cat_cos_mul")
    kernel.launchers = [_Launcher(c) for c in kernel.configs]
    configs = [compat.config_dict(c) for c in kernel.configs]
    assert len(configs) >= 3
    on_actors = [1.0 + i for i in range(len(configs))]
    on_actors[-1] = 0.5  # the last config looks fastest on its actor, is slowest here
    here_ms = {id(launcher): 10.0 if i == len(configs) - 1 else 2.0 + 0.1 * i
               for i, launcher in enumerate(kernel.launchers)}
    args = [torch.randn(64, 512), torch.randn(64, 512), torch.empty(64), 64, 512]
    seen: list[tuple[object, ...]] = []

    def here(k: object, launcher: object, a: object, kw: object) -> float:
        seen.append((k, a, kw))
        return here_ms[id(launcher)]

    stats = Stats()
    winners = WinnerStore(None)
    tuner = ConfigTuner(lambda work: [Timing(j.index, on_actors[j.index], gpu="g/0") for j, _ in work], None,
                        winners, stats, here, verify=3, mode="actors")
    timings = tuner.benchmark_all_configs(kernel, lambda *a, **k: pytest.fail("tuned locally"), *args)
    best = min(timings, key=timings.__getitem__)
    assert best is kernel.launchers[0] and timings[best] == 2.0  # confirmed here, with the real arguments
    assert all(k is kernel and list(a) == args and kw == {} for k, a, kw in seen)
    assert stats.benchmarks_verified == 2 and stats.benchmarks_local == 0
    assert winners.get(triton_source_key(name, _source_of(kernel))) == configs[0]


def test_by_default_configs_are_timed_here_as_stock_does_and_the_winner_is_filed(tmp_path: pathlib.Path) -> None:
    """``autotune_configs="local"`` (the default): a kernel's configs are timed by stock Inductor in
    this process at its first run (no actor is asked); the fastest is filed in the cache, so a
    later process that loads the kernel answers from it and times nothing."""
    from raycompile.cache.winners import WinnerStore
    from raycompile.wrapper import compat
    from raycompile.wrapper.gpu_autotune import ConfigTuner
    from raycompile.wrapper.job_keys import triton_key as triton_source_key

    kernel, name, _ = _corpus_kernel("def triton_poi_fused__to_copy__unsafe_view_add_bmm_cat_cos_mul")
    kernel.launchers = [_Launcher(c) for c in kernel.configs]
    configs = [compat.config_dict(c) for c in kernel.configs]
    stock_ms = [3.0 - 0.25 * i for i in range(len(configs))]
    stock_ms[1] = float("inf")  # a config that failed here
    calls: list[tuple[object, ...]] = []

    def stock(k: object, *a: object, **kw: object) -> dict[object, float]:
        calls.append((k, a, kw))
        return dict(zip(kernel.launchers, stock_ms))

    def no_actors(work: object) -> list[Timing]:
        raise AssertionError("an actor was asked")

    args = (torch.randn(64, 512), 64)
    cache = Cache.from_settings(str(tmp_path / "a"), f"file://{tmp_path / 'shared'}", 2**30, Stats())
    stats = Stats()
    tuner = ConfigTuner(no_actors, cache, WinnerStore(cache), stats, mode="local")
    timings = tuner.benchmark_all_configs(kernel, stock, *args, stream=0)
    assert timings == dict(zip(kernel.launchers, stock_ms)) and calls == [(kernel, args, {"stream": 0})]
    assert stats.benchmarks == 0 and stats.benchmarks_local == 1
    key = triton_source_key(name, _source_of(kernel))
    # another process, empty local tier: the winner comes from the shared tier, nothing is timed
    other = Cache.from_settings(str(tmp_path / "b"), f"file://{tmp_path / 'shared'}", 2**30, Stats())
    assert WinnerStore(other).get(key) == configs[-1]
    later = ConfigTuner(no_actors, other, WinnerStore(other), Stats(), mode="local")
    again = later.benchmark_all_configs(kernel, lambda *a, **k: pytest.fail("timed again"), *args)
    assert min(again, key=again.__getitem__) is kernel.launchers[-1]


def _source_of(kernel: object) -> str:
    from raycompile.wrapper.compat import autotuner_source

    found = autotuner_source(kernel)
    assert found is not None
    return found[1]


def test_every_timing_in_the_driver_holds_the_actors_on_its_gpu() -> None:
    """``driver_timing_held``: Inductor's one entry to timing a kernel (``benchmark_gpu``) runs
    inside the hold (the farm's ``QuietTimer``), also when it raises (no GPU here); stock is
    restored exactly after."""
    import contextlib

    from torch._inductor.runtime.benchmarking import benchmarker

    from raycompile.observe.quiet import QuietTimer
    from raycompile.wrapper.compat.autotune import driver_timing_held

    events: list[str] = []

    @contextlib.contextmanager
    def hold() -> object:
        events.append("held")
        try:
            yield
        finally:
            events.append("released")

    assert "benchmark_gpu" not in vars(benchmarker)
    with driver_timing_held(QuietTimer(hold)):
        with contextlib.suppress(Exception):  # this machine has no CUDA: stock raises, inside the hold
            benchmarker.benchmark_gpu(lambda: None)
    assert events == ["held", "released"] and "benchmark_gpu" not in vars(benchmarker)


def test_a_shared_precompile_runs_once_for_two_threads() -> None:
    import threading

    from raycompile.wrapper.compat.autotune import SharedPrecompile

    calls: list[int] = []
    inside, release = threading.Event(), threading.Event()

    def wait_on_futures() -> dict[str, float]:
        calls.append(1)
        inside.set()
        assert release.wait(60)  # the first call stays inside until the second has come
        return {"choice": 0.1}

    wait_on_futures.precompile_key = "mm: key"  # type: ignore[attr-defined]
    shared = SharedPrecompile(wait_on_futures)
    results: list[object] = []
    first, second = (threading.Thread(target=lambda: results.append(shared())) for _ in range(2))
    first.start()
    assert inside.wait(60)
    second.start()
    second.join(timeout=0.5)  # it cannot end while the first call is inside, however long it is given
    assert second.is_alive() and results == []
    release.set()
    for t in (first, second):
        t.join(timeout=60)
    assert calls == [1] and results == [{"choice": 0.1}] * 2 and shared.precompile_key == "mm: key"
