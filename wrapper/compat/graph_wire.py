"""The wire of whole-graph compiles (the "graphs" seam family's helpers, ``graphs.py``): torch's
graph pickler with PyTorch's own operators admitted, the refusal reasons it gives (or, on 2.11,
drops), and the receiving end in a worker. Its seams are listed in ``graphs.SEAMS``."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

# namespaces of operators PyTorch itself defines, so a worker with the same torch has them (torch's
# graph pickler admits aten and fbgemm only, and refuses every graph with a prims op: an ``arange``
# (prims.iota) or a dtype conversion (prims.convert_element_type), that is most real models')
BUILT_IN_OPS = ("torch.ops.aten.", "torch.ops.prims.", "torch.ops.fbgemm.", "torch.ops.inductor.",
                "torch.ops.rngprims.", "torch.ops.quantized_decomposed.", "torch.ops._c10d_functional.",
                "torch.ops.c10d_functional.", "torch.ops._dtensor.", "torch.ops.quantized.")


def _built_in(name: str) -> bool:
    return name.startswith(BUILT_IN_OPS)


def _dumps(obj: Any) -> bytes:
    """``obj`` pickled by torch's graph pickler, admitting the operators of ``BUILT_IN_OPS``."""
    from torch.fx._graph_pickler import GraphPickler, Options

    return GraphPickler.dumps(obj, Options(ops_filter=_built_in))


@contextlib.contextmanager
def _pickling_failures() -> Iterator[list[str]]:
    """Inside, what torch's serializer logs when it gives up on a graph (its debug "Skipping ..."
    lines and its "Unable to pickle input graph or example inputs" warning, with the exception) is
    collected instead of printed: the refusal is counted with those words."""
    failures: list[str] = []

    class Collect(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            if record.exc_info and record.exc_info[1] is not None:
                failures.append(f"{type(record.exc_info[1]).__name__}: {record.exc_info[1]}")
                return False
            if record.levelno < logging.WARNING:
                failures.append(record.getMessage())
                return False  # enabled here only to be collected
            return True

    from torch._inductor import compile_fx_ext

    wire = compile_fx_ext._WireProtocolInput
    stock_serialize = wire.__dict__["serialize"]  # torch's: the stock filter, and no word on failure

    def serialize(self: Any) -> Any:  # torch (2.11) drops the pickling error without a word: keep it
        try:
            return compile_fx_ext._WireProtocolPickledInput(_dumps(self))
        except Exception as e:
            failures.append(f"{type(e).__name__}: {e}")
            raise

    logger = logging.getLogger("torch._inductor.compile_fx_ext")
    collect, level = Collect(), logger.level
    logger.addFilter(collect)
    logger.setLevel(logging.DEBUG)
    wire.serialize = serialize
    try:
        yield failures
    finally:
        wire.serialize = stock_serialize
        logger.setLevel(level)
        logger.removeFilter(collect)


def _unserializable(gm: Any, failures: list[str]) -> str:
    """Why torch's serializer refused ``gm``, in its words where it gave them."""
    from torch._inductor.codecache import BypassFxGraphCache, FxGraphCache
    from torch._inductor.compile_fx_ext import _graph_contains_triton_kernel_wrappers

    try:
        FxGraphCache._check_for_hop(gm)
    except BypassFxGraphCache as e:
        return f"a higher-order op torch cannot serialize ({e})"
    if _graph_contains_triton_kernel_wrappers(gm):
        return "a user Triton kernel (its side table lives in this process)"
    if failures:
        return "torch's graph serializer refused it: " + failures[-1][:240]
    return "torch's graph serializer refused it"


def worker_warm() -> None:
    """Import what compiling a graph imports, and start CUDA where this worker has a GPU."""
    import torch
    import torch._inductor.compile_fx  # noqa: F401 - the import is the warm-up
    import torch._inductor.compile_fx_ext  # noqa: F401

    if torch.cuda.is_available():
        torch.cuda.init()


def compile_here(payload: bytes) -> bytes:
    """The receiving end (a Ray worker): compile the pickled graph with Inductor in this
    process, as torch's compile subprocess does, and return the pickled output."""
    import torch._inductor.metrics
    from torch._inductor.compile_fx_ext import (
        _SerializedFxCompile,
        _WireProtocolOutput,
        _WireProtocolPickledInput,
        _WireProtocolPickledOutput,
    )
    from torch._inductor.output_code import CompiledFxGraph

    def serialize(self: Any) -> Any:  # torch's, with the operators of BUILT_IN_OPS admitted
        if isinstance(self.graph, CompiledFxGraph):
            self.graph.prepare_for_serialization()
        return _WireProtocolPickledOutput(_dumps(self))

    # Inductor's caches are kept from graph to graph, as in one process compiling a model's graphs
    # (torch's compile subprocess clears them for each graph, because its parent may have moved
    # its cache dir; this worker's dir is its session's): the vector-ISA checks, the imports'
    # lru_caches, the max-autotune timings of a shape another graph of this worker timed
    torch._inductor.metrics.reset()
    stock = _WireProtocolOutput.__dict__["serialize"]
    _WireProtocolOutput.serialize = serialize
    try:
        return _SerializedFxCompile._run_in_child(_WireProtocolPickledInput(payload)).value
    finally:
        _WireProtocolOutput.serialize = stock
