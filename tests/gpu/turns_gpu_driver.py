"""One of two processes of a node (tests/gpu/test_tuning_turns_gpu.py): compiles four reductions
with coordinate descent on, waits at the end of its compile until the other process has compiled
too (Dynamo's own compile-end callback: both have loaded their kernels, none has run one), then
runs them once and saves its outputs and ``raycompile.stats()``.

    python tests/gpu/turns_gpu_driver.py OUT.pt ME OTHER   (ME/OTHER: marker files)
"""

from __future__ import annotations

import pathlib
import sys
import time

import torch

import raycompile

SHAPES = ((8192, 1024), (4096, 2048), (2048, 4096), (16384, 512))


def reductions(*xs: torch.Tensor) -> list[torch.Tensor]:
    return [(x.float() * x.float()).sum(dim=-1).sqrt() * (i + 1) for i, x in enumerate(xs)]


def main() -> None:
    out, me, other = sys.argv[1], pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])

    @torch._dynamo.callback.on_compile_end
    def both_compiled(*_: object) -> None:
        me.touch()
        deadline = time.monotonic() + 300
        while not other.exists():
            if time.monotonic() > deadline:
                raise TimeoutError("the other process never finished compiling")
            time.sleep(0.05)

    raycompile.enable()
    torch.manual_seed(0)
    xs = [torch.randn(*s, device="cuda", dtype=torch.bfloat16) for s in SHAPES]
    got = torch.compile(reductions, options={"coordinate_descent_tuning": True})(*xs)
    torch.cuda.synchronize()
    stats = raycompile.stats()
    raycompile.disable()
    torch.save({"out": [g.cpu() for g in got], "stats": stats}, out)


if __name__ == "__main__":
    main()
