"""Helpers the integration tests share: a cold compile, and one through the farm."""

from __future__ import annotations

from typing import Any

import torch

import raycompile
from raycompile.wrapper import compat


def compile_fresh(model: torch.nn.Module, args: tuple[torch.Tensor, ...], **kw: Any) -> torch.Tensor:
    """A cold compile: empty Inductor caches, so every kernel is really built (or looked up)."""
    torch._dynamo.reset()
    with compat.fresh_cache():
        return torch.compile(model, **kw)(*args)


def compile_on_farm(model: torch.nn.Module, args: tuple[torch.Tensor, ...],
                    **settings: Any) -> tuple[torch.Tensor, dict[str, Any]]:
    """``compile_fresh`` with the farm enabled (``settings`` go to ``raycompile.enable``)."""
    raycompile.enable(**settings)
    try:
        return compile_fresh(model, args), raycompile.stats()
    finally:
        raycompile.disable()
