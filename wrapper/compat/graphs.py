"""Seam family "graphs": a graph's whole Inductor compile (lowering, codegen, kernel builds,
max-autotune's timings) run somewhere else, through Inductor's out-of-process compile
(``torch/_inductor/compile_fx_ext.py``: the graph, its fake inputs, the tracing context and the
portable config pickled as a ``_WireProtocolPickledInput``; the ``OutputCode`` back as a
``_WireProtocolPickledOutput``, loaded here). torch sends it to one local subprocess
(``TORCHINDUCTOR_FX_COMPILE_MODE=SUBPROCESS``); ``graphs_routed`` sends it wherever ``Route.send``
says (raycompile: a Ray task, ``wrapper/graph_compiles.py``) by replacing
``compile_fx.fx_codegen_and_compile``, which ``_compile_fx_inner`` calls after its FX-graph cache
lookup missed, so a cache hit never leaves the process.

A backward graph (AOTAutograd compiles it right after the forward here:
``force_non_lazy_backward_lowering``) is not waited for: it comes back as a ``PendingGraph`` that
waits at its first call, in ``loss.backward()``, while the forward runs and the later graphs are
traced and sent. Its FX-graph cache entry is written when it arrives (``FxGraphCache._save_graph``
deferred), its ``post_compile`` run then.

What that path drops is refused to the in-process compile, with the reason: custom passes and
every other Inductor setting that ``save_config_portable`` leaves out (``_``-prefixed ones), a graph
torch's own serializer refuses (higher-order ops it cannot cache, user Triton kernels), and
``cpp_wrapper``/AOT mode. The pickling itself, and the worker's end, are in ``graph_wire.py``.
Checked on torch 2.11.0 and 2.13.0.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from ._base import Seams
from .graph_wire import _pickling_failures, _unserializable

CHECKED_ON = ("2.11.0", "2.13.0")

SEAMS: Seams = {
    "compile_fx.fx_codegen_and_compile": ("torch._inductor.compile_fx", "fx_codegen_and_compile"),
    "compile_fx._InProcessFxCompile": ("torch._inductor.compile_fx", "_InProcessFxCompile"),
    "compile_fx.FxCompileMode": ("torch._inductor.compile_fx", "FxCompileMode"),
    "compile_fx.fx_compile_mode": ("torch._inductor.compile_fx", "fx_compile_mode"),
    "compile_fx_ext._SerializedFxCompile.serialize_compile": (
        "torch._inductor.compile_fx_ext", "_SerializedFxCompile.serialize_compile"),
    "compile_fx_ext._SerializedFxCompile._run_in_child": (
        "torch._inductor.compile_fx_ext", "_SerializedFxCompile._run_in_child"),
    "compile_fx_ext._OutOfProcessFxCompile._postprocess": (
        "torch._inductor.compile_fx_ext", "_OutOfProcessFxCompile._postprocess"),
    "compile_fx_ext._WireProtocolPickledInput": ("torch._inductor.compile_fx_ext", "_WireProtocolPickledInput"),
    "compile_fx_ext._WireProtocolInput.serialize": ("torch._inductor.compile_fx_ext", "_WireProtocolInput.serialize"),
    "compile_fx_ext._WireProtocolOutput.serialize": ("torch._inductor.compile_fx_ext", "_WireProtocolOutput.serialize"),
    "fx._graph_pickler.GraphPickler.dumps": ("torch.fx._graph_pickler", "GraphPickler.dumps"),
    "fx._graph_pickler.Options": ("torch.fx._graph_pickler", "Options"),
    "compile_fx_ext._graph_contains_triton_kernel_wrappers": (
        "torch._inductor.compile_fx_ext", "_graph_contains_triton_kernel_wrappers"),
    "codecache.FxGraphCache._check_for_hop": ("torch._inductor.codecache", "FxGraphCache._check_for_hop"),
    "codecache.BypassFxGraphCache": ("torch._inductor.codecache", "BypassFxGraphCache"),
    "compile_fx_ext._WireProtocolPickledOutput.deserialize": (
        "torch._inductor.compile_fx_ext", "_WireProtocolPickledOutput.deserialize"),
    "codecache.FxGraphCache._save_graph": ("torch._inductor.codecache", "FxGraphCache._save_graph"),
    "output_code.OutputCode": ("torch._inductor.output_code", "OutputCode"),
    "output_code.CompiledFxGraph": ("torch._inductor.output_code", "CompiledFxGraph"),
    "metrics.reset": ("torch._inductor.metrics", "reset"),
    "config.save_config_portable": ("torch._inductor.config", "save_config_portable"),
    "config._get_dict": ("torch._inductor.config", "_get_dict"),
    "config._config": ("torch._inductor.config", "_config"),
    "config.cpp_wrapper": ("torch._inductor.config", "cpp_wrapper"),
    "virtualized.V.aot_compilation": ("torch._inductor.virtualized", "V.aot_compilation"),
    "functorch.config.force_non_lazy_backward_lowering": (
        "torch._functorch.config", "force_non_lazy_backward_lowering"),
    "functorch.config.bundled_autograd_cache": ("torch._functorch.config", "bundled_autograd_cache"),
}

log = logging.getLogger("raycompile.graphs")

# Inductor settings the portable config leaves out that do not change the output code: where
# and how widely this process compiles, and debug tracing
_HARMLESS = ("compile_threads", "worker_start_method", "trace.", "cuda.cutlass_dir", "cutlass.cutlass_dir",
             "xpu.cutlass_dir", "autotune_local_cache", "autotune_remote_cache", "fx_graph_cache",
             "fx_graph_remote_cache", "bundled_autotune_remote_cache", "_raise_error_for_testing")


class Route(Protocol):
    """Where graphs go (``wrapper/graph_compiles.py``)."""

    wait_s: float
    forward: bool  # False: only backward graphs go; the others are compiled here (``kept``)

    def send(self, payload: bytes, device: str, backward: bool) -> concurrent.futures.Future[bytes]: ...

    def refused(self, why: str) -> None: ...

    def kept(self) -> None: ...

    def arrived(self, backward: bool, waited_s: float, early: bool) -> None: ...

    def failed(self, error: BaseException) -> None: ...


def refusal(gm: Any, graph_kwargs: dict[str, Any]) -> str:
    """Why this graph's compile must stay in this process ("" when it may go)."""
    import torch._inductor.config as config
    from torch._inductor.virtualized import V

    if V.aot_compilation:
        return "AOT compilation"
    if config.cpp_wrapper:
        return "cpp_wrapper"
    if graph_kwargs.get("extern_node_serializer") is not None:
        return "an extern node serializer"
    portable = config.save_config_portable()
    dropped = sorted(k for k, v in config._get_dict().items()
                     if k not in portable and not k.startswith(_HARMLESS) and not _default(config, k, v))
    if dropped:
        return "Inductor settings the portable config drops: " + ", ".join(dropped[:4])
    return ""


def _default(config: Any, name: str, value: Any) -> bool:
    """Whether setting ``name`` has its default value (set back to it by a patch counts)."""
    try:
        return bool(value == config._config[name].default)
    except Exception:  # noqa: BLE001 - a value that does not compare: not the default
        return False


def _device(example_inputs: Sequence[Any]) -> str:
    import torch

    for x in example_inputs:
        if isinstance(x, torch.Tensor) and x.device.type != "cpu":
            return x.device.type
    return "cpu"


def _scheme_class() -> type:
    from torch._inductor.compile_fx_ext import _OutOfProcessFxCompile

    class RoutedFxCompile(_OutOfProcessFxCompile):
        """One graph's compile sent along ``route``."""

        def __init__(self, route: Route) -> None:
            super().__init__()
            self.route = route

        def _send_to_child_async(self, pickled_input: Any) -> Any:  # torch's abstract method: unused here
            raise NotImplementedError

        def codegen_and_compile(self, gm: Any, example_inputs: Sequence[Any], inputs_to_check: Sequence[int],
                                graph_kwargs: dict[str, Any]) -> Any:
            import torch._guards
            from torch._inductor.compile_fx import _InProcessFxCompile
            from torch._inductor.compile_fx_ext import _SerializedFxCompile, _WireProtocolPickledOutput

            region = self.compile_region_name

            def in_process() -> Any:  # stock's compile of this graph, inside Inductor's compile
                compiler = _InProcessFxCompile()
                compiler.compile_region_name = region
                return compiler.codegen_and_compile(gm, example_inputs, inputs_to_check, graph_kwargs)

            with _pickling_failures() as failures:
                serialized = self.serialize_compile(gm, example_inputs, inputs_to_check, graph_kwargs)
            if not serialized:
                self.route.refused(_unserializable(gm, failures))
                return in_process()
            inputs, constants = serialized
            backward = bool(graph_kwargs.get("is_backward", False))

            def here() -> Any:
                """This graph compiled in this process (its remote compile failed): inside Inductor's
                compile, as stock; at a deferred backward's call, outside it, so from the pickled
                input, in the state a worker would have rebuilt (torch's serialize-only mode)."""
                if torch._guards.TracingContext.try_get() is not None:
                    return in_process()
                return load(_SerializedFxCompile._run_in_child(inputs).value)

            def load(raw: bytes) -> Any:
                output = _WireProtocolPickledOutput(raw).deserialize(constants)
                if hasattr(output.graph, "compile_region_name"):
                    output.graph.compile_region_name = region
                self._postprocess(output)
                return output.graph

            try:
                future = self.route.send(inputs.value, _device(example_inputs), backward)
            except Exception as e:  # noqa: BLE001 - Ray unreachable, no slot: compiled here, counted
                self.route.failed(e)
                return here()
            from .fx_cache import bundling

            if backward and not bundling():
                return PendingGraph(future, load, here, self.route)
            started = time.perf_counter()
            try:
                graph = load(_result(future, self.route.wait_s))
            except Exception as e:  # noqa: BLE001 - the task failed or timed out: compiled here, counted
                self.route.failed(e)
                return here()
            self.route.arrived(False, time.perf_counter() - started, early=False)
            return graph

    return RoutedFxCompile


def _failed_over() -> concurrent.futures.Future[bytes]:
    """What a pending graph waits on after its remote compile failed once: nothing (the graph is
    compiled here; a second attempt after an error there raises that error again)."""
    future: concurrent.futures.Future[bytes] = concurrent.futures.Future()
    future.set_exception(RuntimeError("compiled in this process after its compile on the cluster failed"))
    return future


def _result(future: concurrent.futures.Future[bytes], wait_s: float) -> bytes:
    try:
        return future.result(timeout=wait_s)
    except concurrent.futures.CancelledError:  # a BaseException: never let it unwind a compile
        raise RuntimeError("the graph compile on the cluster was cancelled") from None
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise TimeoutError(f"a graph compile sent to the cluster gave no result within {wait_s:.0f} s; raise "
                           "graph_timeout_s (RAYCOMPILE_GRAPH_TIMEOUT_S) or set graph_compiles='local'") from None


_OWN = ("_future", "_load", "_here", "_route", "_graph", "_lock", "_post", "_after")


class _Pending:
    """Marks a pending graph for the deferred FX-graph cache write (an OutputCode subclass is made
    at install, when Inductor is imported)."""


def _pending_class() -> type:
    from torch._inductor.output_code import OutputCode

    class PendingGraphCode(OutputCode, _Pending):
        """A backward graph compiling elsewhere: waits for it at its first call (or at the first
        attribute this class lacks), then is that graph."""

        def __init__(self, future: concurrent.futures.Future[bytes], load: Callable[[bytes], Any],
                     here: Callable[[], Any], route: Route) -> None:
            self._boxed_call = True  # an instance attribute, as a CompiledFxGraph's: wrappers copy __dict__
            self._future = future
            self._load = load
            self._here = here
            self._route = route
            self._graph: Any = None
            self._lock = threading.Lock()
            self._post: tuple[Any, ...] | None = None
            self._after: list[Callable[[Any], None]] = []

        def resolve(self, early: bool = False) -> Any:
            with self._lock:
                if self._graph is None:
                    started = time.perf_counter()
                    try:
                        raw = _result(self._future, self._route.wait_s)
                        graph = self._load(raw)
                    except Exception as e:  # noqa: BLE001 - the task failed or timed out: compiled here
                        self._route.failed(e)
                        self._future = _failed_over()
                        graph = self._here()
                    self._route.arrived(True, time.perf_counter() - started, early=early)
                    for name in ("_time_taken_ns", "_fx_graph_cache_key", "_fx_graph_cache_debug_lines"):
                        if name in self.__dict__:
                            setattr(graph, name, self.__dict__[name])
                    for after in self._after:
                        after(graph)
                    if self._post is not None:
                        graph.post_compile(*self._post)
                    self._graph = graph
                return self._graph

        def __call__(self, inputs: Sequence[Any]) -> Any:
            graph = self._graph if self._graph is not None else self.resolve()
            if getattr(graph, "_boxed_call", False):
                return graph(inputs)
            return graph(*inputs)

        def post_compile(self, example_inputs: Sequence[Any], constants: Any, graph_kwargs: Any) -> None:
            if self._graph is not None:
                self._graph.post_compile(example_inputs, constants, graph_kwargs)
            else:
                self._post = (example_inputs, constants, graph_kwargs)

        def set_triton_bundle(self, triton_bundle: Any) -> None:
            """Nothing was compiled here yet: the bundle is empty."""

        def then(self, after: Callable[[Any], None]) -> None:
            """Run ``after(graph)`` when the graph arrives (before its post_compile)."""
            with self._lock:
                if self._graph is None:
                    self._after.append(after)
                    return
            after(self._graph)

        def __getattr__(self, name: str) -> Any:
            # probes of what a callable is (Dynamo's ``innermost_fn`` asks for
            # ``_torchdynamo_orig_callable`` when AOTAutograd wraps the backward) are answered
            # without waiting; anything else waits for the graph (counted: the overlap is lost)
            if name.startswith(("__", "_torchdynamo")) or name in _OWN:
                raise AttributeError(name)
            return getattr(self.resolve(early=True), name)

    return PendingGraphCode


PendingGraph: Any = None


@contextlib.contextmanager
def graphs_routed(route: Route) -> Iterator[Callable[[], None]]:
    """Inside, every graph Inductor compiles (after its FX-graph cache missed) goes along
    ``route`` unless ``refusal`` names a reason; yields ``prepare_thread``, which the caller runs on
    each compiling thread before Dynamo calls AOTAutograd (torch's config overrides are per
    thread): the backward is compiled with the forward there. Restored on exit."""
    global PendingGraph
    import torch._functorch.config as functorch_config
    import torch._guards
    import torch._inductor.compile_fx as compile_fx
    from torch._inductor.codecache import FxGraphCache

    stock = compile_fx.fx_codegen_and_compile
    stock_save = FxGraphCache.__dict__["_save_graph"]
    scheme = _scheme_class()
    PendingGraph = _pending_class()

    def routed(gm: Any, example_inputs: Sequence[Any], inputs_to_check: Sequence[int],
               compile_region_name: str | None = None, **graph_kwargs: Any) -> Any:
        torch_mode = (compile_fx.fx_compile_mode != compile_fx.FxCompileMode.NORMAL
                      or getattr(compile_fx, "fx_compile_async", False)
                      or getattr(compile_fx, "fx_compile_progressive", False))
        if torch_mode:  # the user chose torch's own out-of-process mode (TORCHINDUCTOR_FX_COMPILE_MODE)
            return stock(gm, example_inputs, inputs_to_check, compile_region_name=compile_region_name,
                         **graph_kwargs)
        if not route.forward and not graph_kwargs.get("is_backward", False):
            route.kept()
            return stock(gm, example_inputs, inputs_to_check, compile_region_name=compile_region_name,
                         **graph_kwargs)
        why = refusal(gm, graph_kwargs)
        if why:
            route.refused(why)
            return stock(gm, example_inputs, inputs_to_check, compile_region_name=compile_region_name,
                         **graph_kwargs)
        compiler = scheme(route)
        compiler.compile_region_name = compile_region_name
        return compiler.codegen_and_compile(gm, example_inputs, inputs_to_check, graph_kwargs)

    def save_graph(key: str, compiled_graph: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(compiled_graph, _Pending):
            return stock_save.__func__(key, compiled_graph, *args, **kwargs)
        context = torch._guards.TracingContext.try_get()  # its shape env keys the entry's guards

        def deferred(graph: Any) -> None:
            try:
                with torch._guards.tracing(context) if context is not None else contextlib.nullcontext():
                    stock_save.__func__(key, graph, *args, **kwargs)
            except Exception as e:  # noqa: BLE001 - a cache write never fails the backward it serves
                log.warning("raycompile: a backward graph's FX-graph cache entry was not written: %s", e)

        compiled_graph.then(deferred)
        return None

    threads: dict[int, bool] = {}  # thread -> its setting before

    def prepare_thread() -> None:
        ident = threading.get_ident()
        if ident not in threads:
            threads[ident] = functorch_config.force_non_lazy_backward_lowering
            functorch_config.force_non_lazy_backward_lowering = True

    compile_fx.fx_codegen_and_compile = routed
    FxGraphCache._save_graph = staticmethod(save_graph)
    try:
        yield prepare_thread
    finally:
        compile_fx.fx_codegen_and_compile = stock
        FxGraphCache._save_graph = stock_save
        if threading.get_ident() in threads:  # other threads' overrides end with them
            functorch_config.force_non_lazy_backward_lowering = threads[threading.get_ident()]
