"""One process of the lazy-backward tests (run as a script): ``raycompile.enable()`` alone (no
cluster; kernels in Inductor's own workers), a ``file://`` shared tier, and one compiled function
called the way ``MODE`` says, then its stats and results saved.

    python backward_driver.py SHARED_URL CACHE_DIR OUT.pt MODE [DEVICE]

``MODE``: ``train`` (a forward, then its backward), ``forward`` (a forward of a model whose
parameters require grad, and no backward: an evaluation that forgot ``no_grad``), or
``forward-unlowerable`` (the same, with a fault injected: lowering a backward ahead fails, as it
does under DDPOptimizer), or ``forward-exit`` (a forward, then the interpreter's exit without
``disable()``: the results are saved before it). Saved: the
stats, the output (and the gradients after ``train``), whether the backward was lowered with the
forward when the compile began, and how many AOTAutograd entries were complete (saved: a training
graph's once its backward is lowered) after the forward and after the backward."""

from __future__ import annotations

import sys

import torch

import raycompile
from raycompile.wrapper import compat


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(16, 24)
        self.b = torch.nn.Linear(24, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.b(torch.nn.functional.gelu(self.a(x)))).sum()


def complete_graphs() -> int:
    """AOTAutograd entries saved in this process: a training graph's once its backward is lowered."""
    from torch._dynamo.utils import counters

    return int(counters["aot_autograd"]["autograd_cache_saved"])


def main(shared: str, cache_dir: str, out_path: str, mode: str, device: str = "cpu") -> None:
    if mode == "forward-unlowerable":
        def fails(*args: object, **kwargs: object) -> tuple[int, int]:
            raise RuntimeError("injected: no backward can be lowered ahead here")

        compat.autograd.lower_backwards = fails
    raycompile.enable(shared_cache=shared, cache_dir=cache_dir, compile_jobs="local", fallback=False)
    model = Net().to(device)
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(1)).to(device)
    saved: dict[str, object] = {}
    if mode == "forward-exit":
        out = torch.compile(model)(x)
        torch.save({"out": out.detach().cpu(), "stats": raycompile.stats()}, out_path)
        return  # raycompile's own exit hook disables it
    try:
        out = torch.compile(model)(x)
        saved["with_forward"] = compat.precompile.backward_with_forward()
        saved["graphs_after_forward"] = complete_graphs()
        saved["out"] = out.detach().cpu()
        if mode == "train":
            out.backward()
            saved["graphs_after_backward"] = complete_graphs()
            saved["grads"] = {n: p.grad.cpu() for n, p in model.named_parameters()}
    finally:
        raycompile.disable()  # writes what is complete, notes what ran no backward
    saved["stats"] = raycompile.stats()
    saved["torch_traced"] = compat.precompile.traced_frames()
    torch.save(saved, out_path)


if __name__ == "__main__":
    main(*sys.argv[1:])
