"""One driver process of the cluster tests (run as a script): joins a cluster, compiles a small
model through the farm with empty Inductor caches, and saves its stats and output.

    python cluster_driver.py ADDRESS SHARED_URL OUT.pt [BARRIER_DIR]

An empty ADDRESS or SHARED_URL leaves that setting at its default (RAY_ADDRESS, then a cluster
running on this machine, then an embedded Ray; shared_cache "auto").

With BARRIER_DIR it writes ``ready-<pid>`` there once the farm is enabled and waits for ``go``,
so that several drivers compile at the same moment."""

from __future__ import annotations

import os
import sys
import time

import torch

import raycompile
from raycompile.models import examples
from raycompile.wrapper import compat


def main(address: str, shared: str, out_path: str, barrier: str | None = None) -> None:
    model, args = examples()["reduction_tail"]
    raycompile.enable(address=address or None, shared_cache=shared or None, fallback=False)
    # Inductor's caches empty for the rest of the session: the backward of a forward called
    # without one is lowered at disable() (wrapper/frames.py), and its kernels go to the farm too
    with compat.fresh_cache():
        try:
            if barrier:
                open(os.path.join(barrier, f"ready-{os.getpid()}"), "w").close()
                deadline = time.monotonic() + 300
                while not os.path.exists(os.path.join(barrier, "go")):
                    if time.monotonic() > deadline:
                        raise TimeoutError("no go signal")
                    time.sleep(0.05)
            torch._dynamo.reset()
            out = torch.compile(model)(*args)
            stats = raycompile.stats()
        finally:
            raycompile.disable()
    torch.save({"stats": stats, "out": out}, out_path)


if __name__ == "__main__":
    main(*sys.argv[1:])
