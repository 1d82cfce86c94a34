"""One process of the Inductor-cache-dir test (run as a script): a small training step compiled
with stock Inductor (``stock``) or with ``raycompile.enable()`` (``farm``), in whatever Inductor
cache dir the environment names. Saved: the loss, the gradients and (farm) the farm's stats.

    python inductor_dir_driver.py stock|farm OUT.pt
"""

from __future__ import annotations

import sys

import torch

import raycompile


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.up(x)).mul(0.5).sum(-1, keepdim=True) + self.down(self.up(x))


def main(mode: str, out: str) -> None:
    if mode == "farm":
        raycompile.enable()
    net = Net()
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
    loss = torch.compile(net)(x).square().mean()
    loss.backward()
    stats = {}
    if mode == "farm":
        raycompile.disable()
        stats = raycompile.stats()
    torch.save({"loss": loss.detach(), "grads": [p.grad for p in net.parameters()], "stats": stats}, out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
