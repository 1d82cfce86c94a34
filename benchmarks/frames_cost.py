"""What the compiled-frames path costs a cold compile, and how much of it is torch's own.

    python benchmarks/frames_cost.py [--layers 16] [--rounds 2] [--label NAME]

overhead.py's Llama-style training step (transformers config, random weights: ``--layers``
layers, hidden 128 on CPU, 2048 on a GPU), each case a new process with empty Inductor, Triton and raycompile caches,
timed from the compiled step's first call to its result (imports and the model's build left out):

- ``stock``: ``torch.compile``;
- ``stock-nonlazy``: stock with ``torch._functorch.config.force_non_lazy_backward_lowering``, which
  the compiled-frames path turns on (a saved frame must hold its backward, so the backward is
  lowered with the forward instead of at the first backward);
- ``farm``: ``raycompile.enable()``, defaults (compiled frames on);
- ``farm-noframes``: the same with ``dynamo_cache=False`` (kernels only);
- ``farm-ray``: the farm with its Ray started before the call, as every cold compile did before
  stop 40 (an embedded Ray, though nothing of this compile needs it).

Prints each case's first-call seconds (every round, and the median) and its ratio to stock's
median, measured in the same run; writes JSON under benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
CASES = ("stock", "stock-nonlazy", "farm", "farm-noframes", "farm-ray")


def child(case: str, layers: int) -> None:
    import torch

    if case == "stock-nonlazy":
        import torch._functorch.config as functorch_config

        functorch_config.force_non_lazy_backward_lowering = True
    if case.startswith("farm"):
        import raycompile

        raycompile.enable(**({"dynamo_cache": False} if case == "farm-noframes" else {}))
    from overhead import build  # next to this script: the Llama step every overhead benchmark times

    step, (ids,) = build("llama", "cuda" if torch.cuda.is_available() else "cpu", layers)
    gpu = torch.cuda.is_available()

    compiled = torch.compile(step)
    if case == "farm-ray":
        raycompile.session.current().startup.begin()  # type: ignore[union-attr]
    t0 = time.perf_counter()
    loss = compiled(ids)
    if gpu:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    out = {"seconds": seconds, "loss": float(loss.detach())}
    if case.startswith("farm"):
        import raycompile

        raycompile.disable()
        s = raycompile.stats()
        out.update(frames_traced=s["dynamo_frames_traced"], jobs=s["jobs"] + s["jobs_local"])
    print("RESULT " + json.dumps(out), flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--child")
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    p.add_argument("--timeout", type=float, default=1200)
    p.add_argument("--label", default="local")
    p.add_argument("--out", type=pathlib.Path, default=HERE / "results")
    a = p.parse_args()
    if a.child:
        child(a.child, a.layers)
        return 0
    import torch

    where = torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU ({os.cpu_count()} cores)"
    print(f"frames_cost: {where}, torch {torch.__version__}, Llama-style, {a.layers} layers", flush=True)
    runs: dict[str, list[dict]] = {case: [] for case in a.cases}
    for r in range(a.rounds):
        for case in a.cases:  # interleaved: a slow spell of the machine hits every case
            work = tempfile.mkdtemp(prefix="frames-cost-")
            env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": f"{work}/inductor", "TRITON_CACHE_DIR": f"{work}/triton",
                   "RAYCOMPILE_CACHE_DIR": f"{work}/raycompile"}
            proc = subprocess.run([sys.executable, __file__, "--child", case, "--layers", str(a.layers)], env=env,
                                  capture_output=True, text=True, timeout=a.timeout, check=False)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            if proc.returncode != 0 or not lines:
                raise RuntimeError(f"{case} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
            runs[case].append(json.loads(lines[-1][7:]))
            print(f"  round {r + 1} {case:<14} {runs[case][-1]['seconds']:7.2f} s", flush=True)
    medians = {case: statistics.median(x["seconds"] for x in rows) for case, rows in runs.items()}
    base = medians.get("stock")
    print(f"\n{'case':<15}{'first call s (each round)':>34}{'median':>9}{'x stock':>9}  loss")
    for case, rows in runs.items():
        each = ", ".join(f"{x['seconds']:.2f}" for x in rows)
        ratio = f"{medians[case] / base:.2f}" if base else "-"
        print(f"{case:<15}{each:>34}{medians[case]:>9.2f}{ratio:>9}  {sorted({x['loss'] for x in rows})}")
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / f"frames_cost_{a.label}.json"
    path.write_text(json.dumps({"device": where, "torch": torch.__version__, "layers": a.layers, "runs": runs,
                                "medians": medians}, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
