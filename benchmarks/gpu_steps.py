"""The model and the step measurements the autotune benchmarks share (``autotune_scaling.py``,
``autotune_diagnose.py``): the Llama-style model under test, GPU kernel time per step (profiler),
steady-state wall time per step on a pinned core, max-autotune decisions counted, and the farm's
compiled model against stock's compiled in the same process. Needs CUDA."""

from __future__ import annotations

import contextlib
import os
import pathlib
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

MODE = "max-autotune-no-cudagraphs"
QUALITY = 1.03


def build(model: str, layers: int = 4):  # noqa: ANN201 - returns (fn, args); warm_start.build, for inference
    import torch

    torch.manual_seed(0)
    if model == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = LlamaConfig(vocab_size=4096, hidden_size=1024, intermediate_size=2816, num_hidden_layers=layers,
                          num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=1024)
        m = LlamaForCausalLM(cfg).cuda().to(torch.bfloat16).eval()
        ids = torch.randint(0, cfg.vocab_size, (4, 512), device="cuda")

        def infer(ids: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                return m(input_ids=ids).logits

        return infer, (ids,)
    from raycompile.models import TransformerBlock

    blocks = torch.nn.Sequential(*[TransformerBlock(dim=512, heads=8, hidden=1376) for _ in range(layers)])
    blocks = blocks.cuda().to(torch.bfloat16).eval()
    x = torch.randn(8, 256, 512, device="cuda", dtype=torch.bfloat16)

    def infer_block(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return blocks(x)

    return infer_block, (x,)


def gpu_profile(fn: Callable[..., Any], args: tuple[Any, ...],
                n: int = 10) -> tuple[float, float, list[tuple[str, float]]]:
    """(GPU kernel ms per step, kernels per step, top kernels: name -> ms per step)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn(*args)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            fn(*args)
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        us = getattr(e, "self_device_time_total", None)
        if us is None:
            us = getattr(e, "self_cuda_time_total", 0)
        if us > 0:
            rows.append((e.key, us / n / 1e3, e.count / n))
    rows.sort(key=lambda r: -r[1])
    return sum(r[1] for r in rows), sum(r[2] for r in rows), [(k[:70], ms) for k, ms, _ in rows[:8]]


def cpus_near_gpu(index: int = 0) -> list[int]:
    """The CPU cores on GPU ``index``'s NUMA node (sysfs), or [] when unknown."""
    import torch

    try:
        p = torch.cuda.get_device_properties(index)
        bus = f"{getattr(p, 'pci_domain_id', 0):04x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"
        text = pathlib.Path(f"/sys/bus/pci/devices/{bus}/local_cpulist").read_text().strip()
    except (AssertionError, AttributeError, OSError, RuntimeError):  # no CUDA, no sysfs
        return []
    cpus: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return [c for c in cpus if c in os.sched_getaffinity(0)]


@contextlib.contextmanager
def pinned() -> Iterator[int | None]:
    """This thread on one core near GPU 0 (the last of them) inside the block; yields the core."""
    near = cpus_near_gpu() or sorted(os.sched_getaffinity(0))
    saved = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {near[-1]})
    except OSError:
        yield None
        return
    try:
        yield near[-1]
    finally:
        os.sched_setaffinity(0, saved)


def step_ms(fn: Callable[..., Any], args: tuple[Any, ...], steps: int, rounds: int = 5) -> float:
    """Steady-state ms per step: ``steps`` calls back to back between two synchronizes (the
    throughput a serving or training loop sees), the median of ``rounds``; on a pinned core."""
    with pinned():
        return _step_ms(fn, args, steps, rounds)


def _step_ms(fn: Callable[..., Any], args: tuple[Any, ...], steps: int, rounds: int) -> float:
    import torch

    for _ in range(3):
        fn(*args)
    per_round = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(steps):
            fn(*args)
        torch.cuda.synchronize()
        per_round.append((time.perf_counter() - t) * 1e3 / steps)
    return statistics.median(per_round)


@contextlib.contextmanager
def feedback_saver(saver: Callable[..., None]) -> Iterator[bool]:
    """``saver(timings, name, input_nodes, ...)`` called with every max-autotune decision's timings
    (select_algorithm's feedback hook) inside the block; yields False on an Inductor without it."""
    from torch._inductor import select_algorithm as sa

    try:
        sa.add_feedback_saver(saver)
    except Exception:  # noqa: BLE001 - a diagnostic only
        yield False
        return
    try:
        yield True
    finally:
        with contextlib.suppress(Exception):
            cache = sa.get_algorithm_selector_cache()
            cache.feedback_saver_fns = [f for f in cache.feedback_saver_fns if f is not saver]


@contextlib.contextmanager
def picks_counted(into: dict[str, int]) -> Iterator[None]:
    """Counts max-autotune decisions and those an ATen choice won (nothing counted on an Inductor
    without the feedback hook)."""

    def saver(timings: dict[Any, float], *_: Any) -> None:
        if timings:
            best = min(timings, key=timings.__getitem__)
            into["decisions"] = into.get("decisions", 0) + 1
            into["aten"] = into.get("aten", 0) + ("Extern" in type(best).__name__)

    with feedback_saver(saver):
        yield


def same_process_vs_stock(fn: Callable[..., Any], args: tuple[Any, ...], farm: Callable[..., Any], steps: int,
                          rounds: int = 7, mode: str = MODE) -> dict[str, Any]:
    """Stock Inductor compiled in this process (the farm disabled) under ``mode``, and step times of
    the farm's and stock's compiled model in alternating rounds: {farm_ms, stock_ms, ratio, gpu ratio}."""
    import types

    import torch
    from torch._inductor import select_algorithm
    from torch._inductor.utils import fresh_cache

    # a new code object: Dynamo's cache lives on the code, and the farm's compiled graph is there
    code = fn.__code__.replace(co_name=f"{fn.__code__.co_name}_stock")
    twin = types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)
    from torch._dynamo.utils import counters

    select_algorithm._ALGORITHM_SELECTOR_CACHE = None  # stock times its own choices
    graphs_before = counters["aot_autograd"]["total"]
    t0 = time.perf_counter()
    with fresh_cache():
        stock = torch.compile(twin, mode=mode)
        stock(*args)
        torch.cuda.synchronize()
    compile_s = time.perf_counter() - t0
    # a model Dynamo splits into frames of its own (a graph break inside the model's __call__):
    # those frames' compiled code lives on code objects the twin shares, and their guards pass, so
    # "stock" would run the farm's graphs; then this comparison says nothing, and says so
    valid = counters["aot_autograd"]["total"] > graphs_before
    farm_ms, stock_ms = [], []
    with pinned():
        for _ in range(3):
            farm(*args), stock(*args)
        for _ in range(rounds):
            farm_ms.append(_step_ms(farm, args, steps, 1))
            stock_ms.append(_step_ms(stock, args, steps, 1))
    f, s = statistics.median(farm_ms), statistics.median(stock_ms)
    farm_gpu, stock_gpu = gpu_profile(farm, args)[0], gpu_profile(stock, args)[0]
    return {"farm_ms": f, "stock_ms": s, "ratio": f / s, "farm_gpu_ms": farm_gpu, "stock_gpu_ms": stock_gpu,
            "gpu_ratio": farm_gpu / stock_gpu, "stock_compile_s": compile_s, "valid": valid,
            "stock_graphs": counters["aot_autograd"]["total"] - graphs_before}
