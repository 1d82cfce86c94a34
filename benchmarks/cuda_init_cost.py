"""What asking "is there a GPU here?" costs a fresh process, as each compile worker asks it.

    python benchmarks/cuda_init_cost.py [--rounds 3]

A compile worker decides whether it compiles for this node's GPU or cross-compiles for another
(``wrapper/compat/triton.py`` ``target_driver``). ``torch.cuda.is_available()`` initializes the CUDA
driver (cuInit); ``torch.cuda.device_count()`` asks NVML where it can. Each round runs each way in a
new process that has imported torch, and times the one call with ``resource.getrusage``; the
table gives the median CPU-seconds and wall seconds, and the ratio against ``is_available()``
(stock Inductor's compile job asks neither). Without a GPU both answer at once.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = """
import json, resource, sys, time
import torch
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
c0, t0 = cpu(), time.perf_counter()
value = torch.cuda.is_available() if sys.argv[1] == "is_available" else torch.cuda.device_count()
print(json.dumps({"value": value, "cpu_s": cpu() - c0, "wall_s": time.perf_counter() - t0}))
"""

WAYS = ("is_available", "device_count")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows: dict[str, list[dict]] = {way: [] for way in WAYS}
    for _ in range(args.rounds):
        for way in WAYS:
            out = subprocess.run([sys.executable, "-c", CHILD, way], capture_output=True, text=True, timeout=120,
                                 check=True).stdout
            rows[way].append(json.loads(out.strip().splitlines()[-1]))
    base = statistics.median(r["cpu_s"] for r in rows["is_available"])
    print(f"{'call':14s} {'answer':>7s} {'CPU s':>8s} {'wall s':>8s} {'x is_available':>15s}")
    for way in WAYS:
        cpu = statistics.median(r["cpu_s"] for r in rows[way])
        wall = statistics.median(r["wall_s"] for r in rows[way])
        ratio = f"{cpu / base:.2f}" if base > 0 else "-"
        print(f"{way:14s} {rows[way][0]['value']!s:>7s} {cpu:8.3f} {wall:8.3f} {ratio:>15s}")


if __name__ == "__main__":
    main()
