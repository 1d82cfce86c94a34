"""One process of the compiled-frames tests (run as a script): joins a cluster, compiles a CPU model
with a graph break through the farm with Dynamo precompile entries on, runs a training step, and
saves its stats, loss and gradients.

    python frames_driver.py ADDRESS SHARED_URL CACHE_DIR OUT.pt BATCH [stock]

With ``stock`` it then also compiles the same step with stock Inductor (raycompile disabled, fresh
Dynamo and Inductor caches) and saves that loss and those gradients too. With
``FRAMES_DRIVER_PAUSE_S`` set, the step of a process that traced its first frame sleeps that long at
its graph break (a call Dynamo does not trace): a compiling process whose first run of a frame is
long (it tunes the kernels) reaches the next frame late, while a process served those frames,
with nothing left to tune, reaches it at once. With ``FRAMES_DRIVER_UNSAVEABLE=1`` the step calls,
after its graph break, a function whose frame torch cannot save (its guard names a class defined
in a function), with a graph break of its own; the frame after it is saved."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import torch

import raycompile
from raycompile.wrapper import compat

PAUSE_S = float(os.environ.get("FRAMES_DRIVER_PAUSE_S", "0"))


UNSAVEABLE = os.environ.get("FRAMES_DRIVER_UNSAVEABLE") == "1"


def _scale() -> object:
    class Scale:  # defined in a function: torch cannot save a frame whose guards name its type
        k = 2.0

    return Scale()


SCALE = _scale()


def scaled(y: torch.Tensor) -> torch.Tensor:
    """Its own frames (the break below stops the caller's graph at the call): the first guards on
    ``SCALE``'s type, so no process can save it; what follows the break is a trivial frame."""
    z = y * SCALE.k  # type: ignore[attr-defined]
    torch._dynamo.graph_break()
    return z


@torch._dynamo.disable
def pause() -> None:
    if compat.precompile.traced_frames():
        time.sleep(PAUSE_S)


class Block(torch.nn.Module):
    """Two layers with a graph break between them: two compiled frames (``forward`` and its resume
    function), each with a forward and a backward."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(32, 48)
        self.b = torch.nn.Linear(48, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.gelu(self.a(x))
        if PAUSE_S:
            pause()  # the graph break, slept through
        else:
            torch._dynamo.graph_break()
        if UNSAVEABLE:
            y = scaled(y)
        return torch.tanh(self.b(y)).sum()


# Inductor's modules of a compile (lowering, scheduling, codegen): a process whose frames all load
# needs none of them (wrapper/compat/precompile.py, light_loads)
INDUCTOR_COMPILE_MODULES = ("torch._inductor.compile_fx", "torch._inductor.graph", "torch._inductor.lowering",
                            "torch._inductor.scheduler", "torch._inductor.select_algorithm",
                            "torch._inductor.codegen.wrapper", "torch._inductor.debug")


def step(batch: int, compiler: object, kept: list[Any] | None = None) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    model = Block()
    x = torch.randn(batch, 32, requires_grad=True)
    compiled = compiler(model)  # type: ignore[operator]
    if kept is not None:
        kept.append((compiled, x))
    loss = compiled(x)
    loss.backward()
    return {"loss": loss.detach(), "x": x.grad, **{n: p.grad for n, p in model.named_parameters()}}


def main(address: str, shared: str, cache_dir: str, out_path: str, batch: str, stock: str = "") -> None:
    # no address: the cluster of this machine (its current-cluster file), as ray.init() joins it
    raycompile.enable(address=address or None, shared_cache=shared, cache_dir=cache_dir, fallback=False)
    kept: list[Any] = []
    try:
        result = step(int(batch), torch.compile, kept)
        ray_imported = "ray" in sys.modules
        compile_modules = sorted(m for m in INDUCTOR_COMPILE_MODULES if m in sys.modules)
    finally:
        raycompile.disable()  # writes what is left
    saved = {"stats": raycompile.stats(), "result": result, "torch_traced": compat.precompile.traced_frames(),
             "ray_imported": ray_imported, "inductor_compile_modules": compile_modules}
    # the compiled function called again after the session (forward and backward): loaded graphs run
    # as they did in it
    compiled, x = kept[0]
    x.grad = None  # (the results above keep their gradients)
    for p in compiled.parameters():
        p.grad = None
    again = compiled(x)
    again.backward()
    saved["after_disable"] = again.detach()
    if stock:
        torch._dynamo.reset()
        with compat.fresh_cache():
            saved["stock"] = step(int(batch), torch.compile)
    torch.save(saved, out_path)


if __name__ == "__main__":
    main(*sys.argv[1:])
