"""How long ``raycompile.enable()`` takes, and when what it starts in the background is ready.

    python benchmarks/enable_time.py [--rounds 3] [--address auto]

Each round: ``enable()`` (returns at once; the goal is at most 0.3 s), then ``ready()`` (Ray joined
or started, every node probed, the Inductor hooks installed), then ``disable()``; the median of the
rounds, with the stages ``ready()`` reports (seconds since ``enable()``). ``import torch`` comes
first and is not counted: a user has it imported before enabling the farm.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch  # noqa: F401 - imported before the timing, as in a user's program


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--address", default=None, help="default: RAY_ADDRESS, a cluster on this machine, else embedded")
    args = p.parse_args()
    t = time.perf_counter()
    import raycompile

    print(f"import raycompile: {time.perf_counter() - t:.3f} s")
    enable, ready = [], []
    for _ in range(args.rounds):
        t = time.perf_counter()
        raycompile.enable(address=args.address)
        enable.append(time.perf_counter() - t)
        up = raycompile.ready()
        ready.append(time.perf_counter() - t)
        raycompile.disable()
        print(f"  enable() {enable[-1]:.3f} s; ready after {ready[-1]:.2f} s "
              f"({', '.join(f'{k} {v:.2f} s' for k, v in up['seconds'].items())}; {up['nodes']} node(s), "
              f"{'embedded' if up['embedded'] else up['address']})")
        time.sleep(1)
    print(f"enable() median {statistics.median(enable):.3f} s (goal <= 0.3 s); "
          f"ready() median {statistics.median(ready):.2f} s after enable()")


if __name__ == "__main__":
    main()
