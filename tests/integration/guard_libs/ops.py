"""A library's custom op (a ``torch.ops`` namespace of its own, as transformers registers
``torch.ops.transformers``; tests/integration/guards_driver.py)."""

import torch


@torch.library.custom_op("raycompile_guard_libs::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@twice.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)
