"""One process of benchmarks/chaos_flights.py (run as a script), modelled on
tests/integration/frames_driver.py: a rank that joins the machine's cluster (no address: its
current-cluster file, under RAY_TMPDIR) and compiles one training step of a CPU model with a graph
break (two compiled frames) through raycompile, with its compiled frames and single flight on;
or the stock run the ranks are checked against.

    python flights_rank.py rank SHARED_URL CACHE_DIR OUT_DIR WIDTH BATCH
    python flights_rank.py stock OUT.pt WIDTH:BATCH [WIDTH:BATCH ...]

``rank``: raycompile's settings come from the arguments and the RAYCOMPILE_* environment
(fallback on, as by default). While the step compiles, a thread appends what the rank has become
to OUT_DIR/phase, one line each: ``started``, ``role owner|waiter <cluster|node>`` (as soon as
its flight is claimed: the chaos driver kills the owner by this), ``stepped``, ``done``. The
stats, loss, gradients and Dynamo's own count of traced graphs go to OUT_DIR/out.pt.

``stock``: raycompile never enabled; each WIDTH:BATCH step compiled by stock Inductor with fresh
Dynamo and Inductor caches, its loss and gradients saved to OUT.pt as {"W:B": {...}, "seconds": {...}}.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time

import torch

LABEL = "__main__.Block.forward"


class Block(torch.nn.Module):
    """frames_driver's Block, ``width`` wide: two layers with a graph break between them (two
    compiled frames, ``forward`` and its resume function, each with a forward and a backward)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.a = torch.nn.Linear(32, width)
        self.b = torch.nn.Linear(width, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.gelu(self.a(x))
        torch._dynamo.graph_break()
        return torch.tanh(self.b(y)).sum()


def step(width: int, batch: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    model = Block(width)
    x = torch.randn(batch, 32, requires_grad=True)
    loss = torch.compile(model)(x)
    loss.backward()
    return {"loss": loss.detach(), "x": x.grad, **{n: p.grad for n, p in model.named_parameters()}}


class Phase:
    """OUT_DIR/phase: one line per event, appended (the chaos driver polls it)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.t0 = time.monotonic()

    def __call__(self, what: str) -> None:
        with open(self.path, "a") as f:
            f.write(f"{what} {time.monotonic() - self.t0:.3f}\n")


def watch_role(phase: Phase, stop: threading.Event) -> None:
    """Say the rank's role as soon as its flight is claimed (the session's counters, read from
    this thread while the main one compiles)."""
    import raycompile

    while not stop.wait(0.02):
        try:
            row = raycompile.stats().get("dynamo_functions", {}).get(LABEL, {})
        except Exception:  # noqa: BLE001 - no session yet or any more
            continue
        if row.get("role"):
            phase(f"role {row['role']} {row.get('flight', '?')}")
            return


def rank(shared: str, cache_dir: str, out_dir: str, width: str, batch: str) -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s")
    logging.getLogger("raycompile.frames").setLevel(logging.INFO)  # a waiter's "tracing it here: <why>"
    import raycompile
    from raycompile.wrapper import compat

    phase = Phase(os.path.join(out_dir, "phase"))
    phase("started")
    stop = threading.Event()
    raycompile.enable(shared_cache=shared, cache_dir=cache_dir)
    watcher = threading.Thread(target=watch_role, args=(phase, stop), daemon=True)
    watcher.start()
    try:
        result = step(int(width), int(batch))
        phase("stepped")
    finally:
        stop.set()
        raycompile.disable()  # writes what is left
    saved = {"stats": raycompile.stats(), "result": result, "torch_traced": compat.precompile.traced_frames(),
             "pid": os.getpid()}
    torch.save(saved, os.path.join(out_dir, "out.pt"))
    phase("done")


def stock(out_path: str, *shapes: str) -> None:
    from raycompile.wrapper import compat

    out: dict[str, object] = {"seconds": {}}
    for shape in shapes:
        width, batch = (int(v) for v in shape.split(":"))
        torch._dynamo.reset()
        t = time.perf_counter()
        with compat.fresh_cache():
            out[shape] = step(width, batch)
        out["seconds"][shape] = round(time.perf_counter() - t, 2)  # type: ignore[index]
    torch.save(out, out_path)


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    {"rank": rank, "stock": stock}[mode](*args)
