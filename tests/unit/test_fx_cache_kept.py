"""``compat.fx_cache.fx_cache_kept``'s parts that a CPU compile cannot reach. A graph Inductor's
FX-graph cache served keeps its entry's Triton bundle, whose statically launchable kernels (CUDA
only) are the very objects its module runs; they leave the bundle that goes into the frame's entry,
and its kernel files stay. The whole path, on CPU: ``tests/integration/test_frames_fx_cache.py``."""

from __future__ import annotations

import torch._functorch.config as fconfig
from torch._inductor.triton_bundler import TritonBundle

from raycompile.wrapper.compat import fx_cache


class Graph:
    """Stands in for a ``CompiledFxGraph``: only its ``_triton_bundle`` is read."""

    _triton_bundle: TritonBundle | None = None


def test_a_served_graphs_bundle_loses_its_live_kernels_and_keeps_its_files() -> None:
    files, live = [object()], [object()]  # named stand-ins: a kernel's artifacts, a launched autotuner
    graph = Graph()
    graph._triton_bundle = TritonBundle(files, live)
    fx_cache._without_live_kernels(graph)
    assert graph._triton_bundle.kernel_artifacts is files and graph._triton_bundle.static_autotuners == []
    assert live  # the kernels themselves are untouched: the module runs them


def test_a_bundle_without_live_kernels_and_a_graph_without_one_are_left_alone() -> None:
    bundle = TritonBundle([object()], [])
    graph, bare = Graph(), Graph()
    graph._triton_bundle = bundle
    fx_cache._without_live_kernels(graph)
    fx_cache._without_live_kernels(bare)
    assert graph._triton_bundle is bundle and bare._triton_bundle is None


def test_a_graph_compiled_unbundled_for_the_fx_cache_still_counts_as_bundled() -> None:
    """Whole-graph routing asks ``bundling()`` whether a backward may wait for its call: inside
    ``fx_cache_kept`` torch's setting reads off, but the entry outside still bundles the graph."""
    with fconfig.patch(bundled_autograd_cache=False):
        assert not fx_cache.bundling()
        fx_cache.UNBUNDLED.active = True
        try:
            assert fx_cache.bundling()
        finally:
            fx_cache.UNBUNDLED.active = False
    with fconfig.patch(bundled_autograd_cache=True):
        assert fx_cache.bundling()
