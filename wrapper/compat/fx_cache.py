"""Seam family "fx_cache": Inductor's FX-graph cache kept for the graphs of compiled frames.
Compiled frames need ``bundled_autograd_cache`` (``dynamo.frames_stored``), and torch skips the
FX-graph cache whenever it is on; ``fx_cache_kept`` wraps Inductor's ``_compile_fx_inner`` so that
each graph's own compile looks the cache up and writes it as stock does (``frames_stored`` patches
it in when Inductor is about to compile). Checked on torch 2.11.0 and 2.13.0."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from ._base import Seams

CHECKED_ON = ("2.11.0", "2.13.0")

SEAMS: Seams = {
    "compile_fx._compile_fx_inner": ("torch._inductor.compile_fx", "_compile_fx_inner"),
    "fx_cache.functorch.config.bundled_autograd_cache": ("torch._functorch.config", "bundled_autograd_cache"),
    "inductor.config.fx_graph_cache": ("torch._inductor.config", "fx_graph_cache"),
    "inductor.config.fx_graph_remote_cache": ("torch._inductor.config", "fx_graph_remote_cache"),
    "output_code.CompiledFxGraph._triton_bundle": ("torch._inductor.output_code", "CompiledFxGraph._triton_bundle"),
    "triton_bundler.TritonBundle": ("torch._inductor.triton_bundler", "TritonBundle"),
    "utils.counters": ("torch._dynamo.utils", "counters"),
}


class _Unbundled(threading.local):
    active = False  # this thread is in a graph's compile that ``fx_cache_kept`` runs unbundled


UNBUNDLED = _Unbundled()


def bundling() -> bool:
    """Whether the graph being compiled on this thread goes whole into an AOTAutograd entry
    (``bundled_autograd_cache``), also inside ``fx_cache_kept``, which turns the setting off
    for the graph's own compile."""
    import torch._functorch.config as fconfig

    return bool(fconfig.bundled_autograd_cache) or UNBUNDLED.active


def fx_cache_kept(inner: Callable[..., Any]) -> Callable[..., Any]:
    """``_compile_fx_inner`` with Inductor's FX-graph cache as stock has it. torch skips that cache
    (no lookup, no write) whenever ``bundled_autograd_cache`` is on, which compiled frames need;
    so a graph equal to one compiled before (each block of a model with a graph break in every
    block, a recompile that gives the same graph) was lowered and compiled again, where stock
    loads it: 1.26x stock's cold compile on a GPT-2-style step with 8 such blocks. Here each
    graph's compile runs with the setting off on its thread: the FX-graph cache is looked up and
    written as stock does (its local directory only; its remote tier stays off, as before), and
    AOTAutograd, outside, still bundles the graph whole into the frame's entry. A graph without
    calls is left to the bundled path (torch returns a plain function for it otherwise, which an
    entry cannot hold).

    A graph the cache served keeps the Triton bundle of its cache entry, whose statically
    launchable kernels (``TritonBundle.static_autotuners``) are the very ones its module then runs;
    once run they cannot be pickled, so the frame's entry could not be written ("pickle should not
    be called after make_launchers()", torch 2.11 on an H100). Such a graph goes into the entry
    with the bundle's kernel files and without those objects (a warm process builds the kernels
    from the files, or from the farm's cache, as for any graph whose bundle has none)."""
    import torch._functorch.config as fconfig
    import torch._inductor.config as iconfig
    from torch._dynamo.utils import counters

    def _compile_fx_inner(gm: Any, example_inputs: Any, *args: Any, **kwargs: Any) -> Any:
        if not fconfig.bundled_autograd_cache or not iconfig.fx_graph_cache or not _has_calls(gm):
            return inner(gm, example_inputs, *args, **kwargs)
        before, hits = UNBUNDLED.active, counters["inductor"]["fxgraph_cache_hit"]
        UNBUNDLED.active = True
        try:
            with fconfig.patch(bundled_autograd_cache=False), iconfig.patch(fx_graph_remote_cache=False):
                graph = inner(gm, example_inputs, *args, **kwargs)
        finally:
            UNBUNDLED.active = before
        if counters["inductor"]["fxgraph_cache_hit"] > hits:
            _without_live_kernels(graph)
        return graph

    _compile_fx_inner.__wrapped__ = inner  # type: ignore[attr-defined]
    return _compile_fx_inner


def _without_live_kernels(graph: Any) -> None:
    bundle = getattr(graph, "_triton_bundle", None)
    if bundle is not None and getattr(bundle, "static_autotuners", None):
        graph._triton_bundle = dataclasses.replace(bundle, static_autotuners=[])


def _has_calls(gm: Any) -> bool:
    return any(node.op in ("call_function", "call_method", "call_module") for node in gm.graph.nodes)
