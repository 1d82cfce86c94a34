"""Seam family "autograd": AOTAutograd's backward, lowered lazily (at a training graph's first
backward, as stock lowers it), and lowered now for a graph whose backward never ran, so that its
AOTAutograd entry, and the compiled frame that holds it, is complete (``wrapper/frames.py``).

A training graph's runtime is an ``autograd.Function`` subclass named ``CompiledFunction`` whose
``compiled_bw`` stays None until its first backward; its ``_backward_impl`` holds what lowering
needs in its closure: torch 2.13 and later a ``backward_compiler`` (``get_or_compile``), torch 2.11
the lazy info, the config and the cache-entry writer, used here as its own lazy branch uses them.
Checked on torch 2.11.0 and 2.13.0."""

from __future__ import annotations

import contextlib
import copy
import logging
from typing import Any

from ._base import Seams

CHECKED_ON = ("2.11.0", "2.13.0")

SEAMS: Seams = {
    "runtime_wrappers.AutogradLazyBackwardCompileInfo": (
        "torch._functorch._aot_autograd.runtime_wrappers", "AutogradLazyBackwardCompileInfo"),
    "_guards.tracing": ("torch._guards", "tracing"),
    "_guards.compile_context": ("torch._guards", "compile_context"),
    "convert_frame.compile_lock": ("torch._dynamo.convert_frame", "compile_lock"),
}

log = logging.getLogger("raycompile.frames")


def _closure(fn: Any) -> dict[str, Any]:
    cells = getattr(fn, "__closure__", None) or ()
    names = getattr(getattr(fn, "__code__", None), "co_freevars", ())
    out = {}
    for name, cell in zip(names, cells, strict=False):
        with contextlib.suppress(ValueError):  # an empty cell
            out[name] = cell.cell_contents
    return out


def _unlowered() -> list[tuple[type, dict[str, Any]]]:
    """The live training graphs of this process whose backward is not lowered yet."""
    import torch

    found = []
    for cls in torch.autograd.Function.__subclasses__():
        if cls.__name__ != "CompiledFunction" or getattr(cls, "compiled_bw", False) is not None:
            continue
        impl = cls.__dict__.get("_backward_impl")
        env = _closure(getattr(impl, "__func__", impl))
        if env:
            found.append((cls, env))
    return found


def _backend_id(env: dict[str, Any]) -> str | None:
    config = env.get("aot_config") or getattr(env.get("backward_compiler"), "aot_config", None)
    return getattr(config, "precompile_backend_id", None)


def _lower(cls: type, env: dict[str, Any]) -> bool:
    """Lower ``cls``'s backward now, as its first backward would (saved tensors used once, so the
    donated buffers are stock's); False where it cannot be done here."""
    import torch
    from torch._functorch._aot_autograd.runtime_wrappers import AutogradLazyBackwardCompileInfo
    from torch._guards import compile_context, tracing

    compiler = env.get("backward_compiler")
    info = getattr(compiler, "lazy_backward_info", None) if compiler is not None else env.get("lazy_backward_info")
    if not isinstance(info, AutogradLazyBackwardCompileInfo):
        return False
    saved = getattr(info, "saved_context", None)
    if saved is not None and getattr(saved, "ddp_optimizer_ctx", None) is not None:
        return False  # DDPOptimizer's buckets are lowered in the order the backward meets them
    if compiler is not None:  # torch 2.13 and later
        cls.compiled_bw = compiler.get_or_compile(saved_tensors_use_once=True)  # type: ignore[attr-defined]
        return True
    config, save = env.get("aot_config"), env.get("try_save_cache_entry")
    if config is None or config.bw_compiler is None or "fw_metadata" not in env:
        return False
    amp = torch._C._DisableAutocast if env.get("disable_amp") else contextlib.nullcontext
    with tracing(saved), compile_context(info.saved_compile_context), amp():
        compiled = config.bw_compiler(copy.deepcopy(info.bw_module), info.placeholder_list)
        cls.compiled_bw = compiled  # type: ignore[attr-defined]
        if save is not None:
            save(compiled, info.bw_module, env["fw_metadata"], config)
    return True


def lower_backwards(backend_ids: set[str] | None = None, wait: float = 30.0) -> tuple[int, int]:
    """Lower now the backward of every live training graph whose backward has not run (of the
    precompile backends ``backend_ids``; None: all), writing its
    AOTAutograd entry as its first backward would, under Dynamo's compile lock (waited for at most
    ``wait`` s: nothing is traced meanwhile). Returns (lowered, left as they were)."""
    from torch._dynamo.convert_frame import compile_lock

    if not compile_lock.acquire(timeout=wait):
        return 0, len(_unlowered())
    try:
        return _lower_all(backend_ids)
    finally:
        compile_lock.release()


def _lower_all(backend_ids: set[str] | None) -> tuple[int, int]:
    lowered = left = 0
    for cls, env in _unlowered():
        backend = _backend_id(env)
        if backend_ids is not None and backend not in backend_ids:
            continue  # another function's, or a graph no saved frame holds (a stock compile's)
        try:
            if _lower(cls, env):
                lowered += 1
                continue
        except Exception as e:  # noqa: BLE001 - left lazy: its first backward lowers it, as stock
            log.debug("raycompile: a backward could not be lowered ahead (%s: %s)", type(e).__name__, e)
        left += 1
    return lowered, left
