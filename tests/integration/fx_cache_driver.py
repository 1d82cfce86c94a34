"""One process of the FX-graph-cache test (run as a script): a training step of a model whose two
equal blocks are split by a graph break, so the second block's forward and backward graphs equal
the first's. ``cold``: stock's step, then (``torch._dynamo.reset()``) the same step with
``raycompile.enable()`` (compiled frames on, as by default), each with the FX-graph cache hits
torch counted in it; ``warm``: the farm's step alone. Saved: each run's outputs, gradients and
hits, and the farm's stats.

    python fx_cache_driver.py SHARED_URL CACHE_DIR OUT.pt cold|warm
"""

from __future__ import annotations

import sys
from typing import Any

import torch

import raycompile
from raycompile.wrapper import compat


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.inp = torch.nn.Linear(16, 16)  # so each block's input requires grad, as the next block's
        self.blocks = torch.nn.ModuleList([Block(), Block()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # each block a graph of its own (unrolled: Dynamo runs a frame whose loop breaks eagerly)
        x = self.inp(x)
        torch._dynamo.graph_break()
        x = self.blocks[0](x)
        torch._dynamo.graph_break()
        x = self.blocks[1](x)
        torch._dynamo.graph_break()
        return torch.tanh(x).sum()


def hits() -> int:
    return compat.precompile.torch_cache_counters()["torch_fxgraph_hits"]


def run() -> dict[str, Any]:
    model = Net()
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
    before = hits()
    loss = torch.compile(model)(x)
    loss.backward()
    return {"out": loss.detach(), "grads": {n: p.grad.clone() for n, p in model.named_parameters()},
            "hits": hits() - before}


def main(shared: str, cache_dir: str, out_path: str, mode: str) -> None:
    saved: dict[str, Any] = {}
    if mode == "cold":
        saved["stock"] = run()
        torch._dynamo.reset()
    with raycompile.enabled(shared_cache=shared, cache_dir=cache_dir, compile_jobs="local", fallback=False):
        saved["farm"] = run()
        saved["stats"] = raycompile.stats()
    # the frames' entry is written at disable(), when the with ends
    torch.save(saved, out_path)


if __name__ == "__main__":
    main(*sys.argv[1:])
