"""``raycompile demo``: compile real models through the farm on an embedded local Ray, check
them against eager, and show what ran where."""

from __future__ import annotations

import copy
import time

import torch

from . import disable, enable, ready, report, stats
from .models import examples
from .wrapper import compat


def run_demo(address: str | None = None, num_cpus: int | None = None) -> int:
    """Returns 0 when every compiled model matches eager, else 1."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"raycompile demo: torch {torch.__version__} on {device}"
          + (f" ({torch.cuda.get_device_name()})" if device == "cuda" else ""))
    t0 = time.perf_counter()
    # an address the user named must be reachable: say so (exit 2) rather than run locally.
    # compile_jobs="cluster": the demo shows the farm at work even on one machine, where the
    # default ("auto") would keep the compiles in Inductor's own workers (README, "Where compiles run")
    enable(address, num_cpus=num_cpus, fallback=False if address else None, compile_jobs="cluster")
    enabled_in = time.perf_counter() - t0
    try:
        up = ready()
    except BaseException:
        disable()
        raise
    if up["fallback"]:  # the warning above said why; the report below says it again, with the count
        print(f"enable() returned in {enabled_in:.2f} s; Ray at {up['address']} could not be reached, so the models "
              "compile locally with stock Inductor")
    else:
        where = "an embedded local Ray" if up["embedded"] else f"the Ray cluster at {up['address']}"
        print(f"enable() returned in {enabled_in:.2f} s; {where} was ready {time.perf_counter() - t0:.1f} s after "
              f"it: {up['nodes']} node(s), {up['workers']} CPUs")
    ok = True
    rows = []
    # a cold compile, so every kernel really goes to the farm: Inductor's own cache dir is a fresh
    # one until disable() returned, which lowers the backwards the models' forwards did not run
    # (compiled frames) while it is, and a fresh one for each model's compile
    with compat.fresh_cache():
        try:
            for name, (model, args) in examples(device).items():
                eager = copy.deepcopy(model)(*args)
                torch.compiler.reset()
                before = stats()["jobs"]
                with compat.fresh_cache():  # each model's own, as its first compile would be
                    start = time.perf_counter()
                    out = torch.compile(model)(*args)
                    seconds = time.perf_counter() - start
                match = torch.allclose(out, eager, rtol=1e-4, atol=1e-4)
                ok &= match
                rows.append((name, stats()["jobs"] - before, seconds, "ok" if match else "MISMATCH"))
        finally:
            disable()
    final = stats()  # the closed session's, with what disable() compiled
    print(f"\n{'model':<20}{'jobs':>6}{'first call s':>14}  vs eager   (first call: trace, compile, run)")
    for name, jobs, seconds, verdict in rows:
        print(f"{name:<20}{jobs:>6}{seconds:>14.1f}  {verdict}")
    print()
    print(report())
    if final["jobs"] == 0 and final["local_hits"] + final["shared_hits"] > 0:
        print(f"\nevery kernel came from raycompile's cache ({final['local_hits'] + final['shared_hits']} hits, "
              "0 jobs): an earlier run compiled them. For a cold compile again: raycompile cache clear")
    print(f"worker processes {len(final['workers'])}")
    print(f"total {time.perf_counter() - t0:.1f} s: {'all outputs match eager' if ok else 'MISMATCH'}")
    return 0 if ok else 1
