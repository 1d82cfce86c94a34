"""Does a busy CPU change what max-autotune picks? GPU timings of the GPT-2 step's GEMMs, quiet and busy.

    python benchmarks/timing_noise.py [--rounds 5] [--busy N] [--out DIR --label NAME]
        [--gpu-states --gap S] [--gil N] [--loads N]

Under max-autotune the farm's driver times the ATen choices (and confirms the fastest templates)
while the node's compile workers and their ``ptxas`` children keep every CPU busy; stock times a
decision's choices after their precompile, on a quieter machine. A GEMM of the GPT-2-style step
(2048 tokens, hidden 768) runs for a few microseconds, so a timing can include the time the
timing thread waited for a CPU to launch it. This times, with Inductor's own benchmarker
(``benchmarker.benchmark_gpu``: L2 flush, warm-up, the median of repeats), each shape two ways:
ATen (``torch.mm``, as ``extern_kernels.mm``) and a Triton GEMM of one of max-autotune's template
configs (128x128x64, 3 stages, 4 warps). Three conditions, each round in turn:

- ``quiet``: nothing else running;
- ``busy``: ``--busy`` processes (default: one per CPU) spinning at the default priority;
- ``busy-nice``: the same processes at ``nice 10``, as compile workers that yield to the driver.

With ``--gpu-states``, two more, for the order in which the farm times a decision (stop 64: in one
farm process ATen was timed 52-54% slower than a template on two weight-gradient GEMMs where
stock timed ATen faster; the farm times a decision's ATen choices, then waits seconds for its
template timings, and confirms the fastest templates; stock times all of them back to back):

- ``after-idle``: each GEMM timed after the GPU idled ``--gap`` seconds (the driver lowering);
- ``after-busy``: each GEMM timed right after ``--gap`` seconds of large GEMMs on the GPU (the
  actor timing candidates).

With ``--gil N``, one more, for where the farm's driver times ATen: ``gil-busy``, each GEMM timed
while N threads of this process run Python (as the driver's I/O threads do while they pickle, hash
and send candidates). The benchmarker's loop launches each repeat from Python between two CUDA
events; a launch that waits for the GIL leaves the GPU idle between them, and that idle time is
timed. The farm times ATen in its busy driver and the templates on a quiet GPU actor, so the row
``aten gil-busy / triton quiet`` is the ratio such a decision would see.

With ``--loads N``, ``loading``: each GEMM timed while N threads of this process load a compiled
Triton kernel's binary into the CUDA context again and again, as the farm's background precompiles
of other decisions load theirs while its driver times ATen; ``aten loading / triton quiet`` is
that decision's ratio.

The table gives each timing's median over rounds and its ratio to ``quiet``; ``aten/triton`` is
the ratio that decides a pick. A ratio that moves with the condition is a pick that moves with it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SHAPES = {  # (M, K, N) of the step's forward and backward GEMMs, bf16
    "qkv": (2048, 768, 2304),
    "proj": (2048, 768, 768),
    "fc": (2048, 768, 3072),
    "fc_out": (2048, 3072, 768),
    "dW_fc": (768, 2048, 3072),
    # the two weight-gradient decisions stop 64's farm decided against stock, the first operand
    # transposed as in the step (strides [1, M]); the Triton GEMM takes a contiguous copy
    "dW_fc_out^T": (3072, 2048, 768),
    "dW_proj^T": (768, 2048, 768),
}
SPIN = "import os, sys\nos.nice(int(sys.argv[1]))\nwhile True:\n    pass\n"


def triton_mm():
    import triton
    import triton.language as tl

    @triton.jit
    def kernel(a, b, c, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               GROUP_M: tl.constexpr):
        pid = tl.program_id(0)
        grid_m, grid_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
        width = GROUP_M * grid_n
        group = pid // width
        size = min(grid_m - group * GROUP_M, GROUP_M)
        pid_m = group * GROUP_M + (pid % size)
        pid_n = (pid % width) // size
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        rk = tl.arange(0, BLOCK_K)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            x = tl.load(a + rm[:, None] * K + (k + rk)[None, :])
            y = tl.load(b + (k + rk)[:, None] * N + rn[None, :])
            acc += tl.dot(x, y)
        tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16))

    def run(x, y, out):
        M, K = x.shape
        N = y.shape[1]
        grid = (triton.cdiv(M, 128) * triton.cdiv(N, 128),)
        run.compiled = kernel[grid](x, y, out, M, N, K, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8,
                                    num_stages=3, num_warps=4)  # Triton's CompiledKernel (--loads)
    return run


def time_all(bench, run_triton, before=None) -> dict[str, float]:
    """Each shape's ATen and Triton GEMM timed (us); ``before()``, where given, runs before each
    timing (an idle or a busy GPU)."""
    import torch
    out = {}
    for name, (m, k, n) in SHAPES.items():
        if name.endswith("^T"):
            x = torch.randn(k, m, device="cuda", dtype=torch.bfloat16).t()
        else:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        xc = x.contiguous()
        y = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        if before is not None:
            before()
        out[f"{name} aten"] = bench(lambda x=x, y=y, c=c: torch.mm(x, y, out=c)) * 1000.0  # us
        if before is not None:
            before()
        out[f"{name} triton"] = bench(lambda x=xc, y=y, c=c: run_triton(x, y, c)) * 1000.0
    return out


def gpu_states(gap_s: float) -> dict:
    """``after-idle`` and ``after-busy``: what runs before each timing."""
    import torch

    big = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)

    def idle() -> None:
        torch.cuda.synchronize()
        time.sleep(gap_s)

    def busy() -> None:
        end = time.monotonic() + gap_s
        while time.monotonic() < end:
            for _ in range(8):
                torch.mm(big, big)
            torch.cuda.synchronize()

    return {"after-idle": idle, "after-busy": busy}


class PythonThreads:
    """``n`` threads of this process running Python bytecode while inside (no I/O, no C call that
    lets the GIL go): what the farm driver's I/O threads do to its main thread's launches."""

    def __init__(self, n: int) -> None:
        import threading

        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._spin, daemon=True) for _ in range(n)]
        self.loops = 0

    def _spin(self) -> None:
        count = 0
        while not self.stop.is_set():
            for _ in range(10_000):
                count += 1
        self.loops += count

    def __enter__(self) -> PythonThreads:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=10)


class ModuleLoads(PythonThreads):
    """``n`` threads of this process loading a compiled Triton kernel's binary into the CUDA context
    again and again while inside (``load_binary``, what a kernel's first launch or Inductor's
    precompile of a candidate does): the farm's background precompiles of other decisions while
    its driver times ATen. ``compiled`` is a Triton ``CompiledKernel``."""

    def __init__(self, n: int, compiled: object) -> None:
        super().__init__(n)
        from triton.runtime import driver

        self.load = driver.active.utils.load_binary  # (name, binary, shared memory, device)
        self.device = driver.active.get_current_device()
        self.compiled = compiled

    def _spin(self) -> None:
        c, count = self.compiled, 0
        while not self.stop.wait(0.005):  # ~200 loads a second a thread: each one stays loaded (Triton
            self.load(c.name, c.kernel, c.metadata.shared, self.device)  # unloads none), so not unbounded
            count += 1
        self.loops += count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--busy", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", default=None)
    parser.add_argument("--label", default="timing_noise")
    parser.add_argument("--gpu-states", action="store_true", help="also time after an idle and after a busy GPU")
    parser.add_argument("--gap", type=float, default=2.0, help="seconds of idle or busy GPU before each timing")
    parser.add_argument("--gil", type=int, default=0, metavar="N",
                        help="also time while N threads of this process run Python (gil-busy)")
    parser.add_argument("--loads", type=int, default=0, metavar="N",
                        help="also time while N threads of this process load a Triton binary again and again")
    args = parser.parse_args()
    import torch
    from torch._inductor.runtime.benchmarking import benchmarker
    if not torch.cuda.is_available():
        print("timing_noise: no GPU here: nothing to time")
        return
    run_triton = triton_mm()
    time_all(benchmarker.benchmark_gpu, run_triton)  # compile and warm up once
    conditions: dict[str, int | None] = {"quiet": None, "busy": 0, "busy-nice": 10}
    states = gpu_states(args.gap) if args.gpu_states else {}
    conditions.update(dict.fromkeys(states))
    if args.gil:
        conditions["gil-busy"] = None
    if args.loads and not hasattr(getattr(run_triton, "compiled", None), "kernel"):
        print("timing_noise: --loads needs the CompiledKernel a Triton launch returns; this Triton's "
              "launch returned none: no loading condition")
    elif args.loads:
        conditions["loading"] = None
    loads: dict[str, int] = {}
    rows: dict[str, dict[str, list[float]]] = {c: {} for c in conditions}
    for _ in range(args.rounds):
        for cond, nice in conditions.items():
            if cond in states:  # the CPU quiet; the GPU idle or busy just before each timing
                for key, us in time_all(benchmarker.benchmark_gpu, run_triton, states[cond]).items():
                    rows[cond].setdefault(key, []).append(us)
                continue
            if cond in ("gil-busy", "loading"):  # the CPU otherwise quiet; this process's other threads busy
                threads = (PythonThreads(args.gil) if cond == "gil-busy"
                           else ModuleLoads(args.loads, run_triton.compiled))
                with threads:
                    for key, us in time_all(benchmarker.benchmark_gpu, run_triton).items():
                        rows[cond].setdefault(key, []).append(us)
                loads[cond] = loads.get(cond, 0) + threads.loops
                continue
            spinners = [] if nice is None else [subprocess.Popen([sys.executable, "-c", SPIN, str(nice)])
                                                for _ in range(args.busy)]
            try:
                time.sleep(0.5 if spinners else 0.0)
                for key, us in time_all(benchmarker.benchmark_gpu, run_triton).items():
                    rows[cond].setdefault(key, []).append(us)
            finally:
                for p in spinners:
                    p.kill()
                for p in spinners:
                    p.wait(timeout=10)
    med = {c: {k: statistics.median(v) for k, v in r.items()} for c, r in rows.items()}
    print(f"{torch.cuda.get_device_name()}, {os.cpu_count()} CPUs, {args.busy} spinning, {args.rounds} rounds; "
          f"median us (x quiet)")
    print(f"{'GEMM':8s} {'way':7s} " + " ".join(f"{c:>18s}" for c in conditions))
    for name in SHAPES:
        for way in ("aten", "triton"):
            key = f"{name} {way}"
            cells = [f"{med[c][key]:8.2f} ({med[c][key] / med['quiet'][key]:4.2f}x)" for c in conditions]
            print(f"{name:8s} {way:7s} " + " ".join(f"{s:>18s}" for s in cells))
        ratios = [med[c][f"{name} aten"] / med[c][f"{name} triton"] for c in conditions]
        print(f"{name:8s} {'a/t':7s} " + " ".join(f"{r:18.3f}" for r in ratios))
        for cond in ("gil-busy", "loading"):  # the farm's view: ATen timed in a busy driver, the template
            if cond in med:                    # on a quiet actor
                label = f"a({cond})/t"
                print(f"{name:8s} {label:17s}{med[cond][f'{name} aten'] / med['quiet'][f'{name} triton']:8.3f}")
    if loads:
        print("loops of the other threads: " + ", ".join(f"{c} {n}" for c, n in loads.items()))
    if args.out:
        path = os.path.join(args.out, f"timing_noise_{args.label}.json")
        with open(path, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "cpus": os.cpu_count(), "busy": args.busy,
                       "rounds": rows}, f, indent=1)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
