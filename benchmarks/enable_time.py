"""How long ``raycompile.enable()`` takes (an embedded local Ray on this machine): the
first-contact probe reading each node's torch/triton from package metadata (what enable() does)
against the probe that imports torch on the node (what it did before 2026-11-23, and what
``raycompile status`` still does to name GPU models); alternating, 3 rounds, the median.

    python benchmarks/enable_time.py
"""
import statistics
import time

import raycompile
from raycompile.orchestrator import farm

light, heavy = farm._probe_versions, farm._probe
times = {"light": [], "import torch": []}
for _ in range(3):
    for name, fn in (("light", light), ("import torch", heavy)):
        farm._probe_versions = fn
        t = time.perf_counter()
        raycompile.enable(num_cpus=2)
        times[name].append(time.perf_counter() - t)
        raycompile.disable()
        time.sleep(2)
for name, ts in times.items():
    print(f"{name}: enable() median {statistics.median(ts):.2f} s  {[round(x, 2) for x in ts]}")
