"""Helpers the integration tests share: a cold compile, and one through the farm."""

from __future__ import annotations

from typing import Any

import torch

import raycompile
from raycompile.wrapper import compat


def compile_fresh(model: torch.nn.Module, args: tuple[torch.Tensor, ...], **kw: Any) -> torch.Tensor:
    """A cold compile: empty Inductor caches, so every kernel is really built (or looked up). The
    compiled frames are written before the caches go: a forward called without a backward has
    its backward lowered then (wrapper/frames.py), in the same empty caches, not at disable()."""
    torch._dynamo.reset()
    with compat.fresh_cache():
        out = torch.compile(model, **kw)(*args)
        write_frames()
        return out


def write_frames() -> None:
    """Write the compiled frames of the farm's session now, as ``disable()`` would: a forward
    called without a backward gets its backward lowered here (wrapper/frames.py), so that a caller
    inside a fresh Inductor cache has it lowered in that cache, its kernels built by the farm."""
    session = raycompile.session.current()
    if session is not None and session.frames is not None:
        session.frames.publish(final=True)


def compile_on_farm(model: torch.nn.Module, args: tuple[torch.Tensor, ...],
                    **settings: Any) -> tuple[torch.Tensor, dict[str, Any]]:
    """``compile_fresh`` with the farm enabled (``settings`` go to ``raycompile.enable``)."""
    raycompile.enable(**settings)
    try:
        return compile_fresh(model, args), raycompile.stats()
    finally:
        raycompile.disable()
