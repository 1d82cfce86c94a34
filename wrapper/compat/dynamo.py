"""Seam family "dynamo": Dynamo's precompile cache (``torch._dynamo.config.caching_precompile``),
whose entries (guards, bytecode, the bundled AOTAutograd forward and backward with their output
modules) let a warm process skip Dynamo tracing, AOTAutograd and Inductor's lowering.

torch stores those entries in one object, the ``torch._dynamo.package.DynamoCache`` singleton (a
``DiskDynamoCache``): ``_TorchDynamoContext.__call__`` (that is, ``torch.compile(model)``) calls its
``load(fn)``, each traced frame its ``record_package``, and ``PrecompileContext.save_to_dynamo_cache``
its ``write``. ``frames_stored`` swaps that object's class for one that hands all three to a
raycompile store, so entries live in the signed tiers, never in torch's unsigned
``$TORCHINDUCTOR_CACHE_DIR/dynamo`` files. The rest of this module works around what the stock
feature gets wrong (docs/caching-precompile.md): its key (qualname and line) names neither the
file, the versions nor the compile options; it drops ID/CLOSURE guards; a guard miss after a load
crashes on a name clash; an entry that fails to install escapes ``torch.compile``; saving before the
backward exists marks frames bypassed for good. Checked on torch 2.11.0, 2.13.0 and 2.15.0.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import logging
import re
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from ._base import Seams
from .code_names import resolve_code
from .fx_cache import fx_cache_kept

CHECKED_ON = ("2.11.0", "2.13.0", "2.15.0")

SEAMS: Seams = {
    "dynamo.config.caching_precompile": ("torch._dynamo.config", "caching_precompile"),
    "dynamo.config.strict_precompile": ("torch._dynamo.config", "strict_precompile"),
    "functorch.config.bundled_autograd_cache": ("torch._functorch.config", "bundled_autograd_cache"),
    "functorch.config.force_non_lazy_backward_lowering": (
        "torch._functorch.config", "force_non_lazy_backward_lowering"),
    "package.DynamoCache": ("torch._dynamo.package", "DynamoCache"),
    "package.DiskDynamoCache.load": ("torch._dynamo.package", "DiskDynamoCache.load"),
    "package.DiskDynamoCache.write": ("torch._dynamo.package", "DiskDynamoCache.write"),
    "package.DiskDynamoCache.record_package": ("torch._dynamo.package", "DiskDynamoCache.record_package"),
    "package.DiskDynamoCache._write_to_local_cache": (
        "torch._dynamo.package", "DiskDynamoCache._write_to_local_cache"),
    "package.SystemInfo.current": ("torch._dynamo.package", "SystemInfo.current"),
    "package.CompilePackage.source_id_from_fn": ("torch._dynamo.package", "CompilePackage.source_id_from_fn"),
    "precompile_context.DynamoCache": ("torch._dynamo.precompile_context", "DynamoCache"),
    "eval_frame._TorchDynamoContext": ("torch._dynamo.eval_frame", "_TorchDynamoContext"),
    "eval_frame.innermost_fn": ("torch._dynamo.eval_frame", "innermost_fn"),
    "eval_frame.__file__": ("torch._dynamo.eval_frame", "__file__"),
    "package.CompilePackage.code_context": ("torch._dynamo.package", "CompilePackage.code_context"),
    "package.CompilePackage._add_user_function": ("torch._dynamo.package", "CompilePackage._add_user_function"),
    "package.CompilePackage._add_function": ("torch._dynamo.package", "CompilePackage._add_function"),
    "exc.PackageError": ("torch._dynamo.exc", "PackageError"),
    "convert_frame._compile": ("torch._dynamo.convert_frame", "_compile"),
    "guards.CheckFunctionManager.serialize_guards": ("torch._dynamo.guards", "CheckFunctionManager.serialize_guards"),
    "guards.CheckFunctionManager.__init__": ("torch._dynamo.guards", "CheckFunctionManager.__init__"),
    "dynamo.config.get_config_copy": ("torch._dynamo.config", "get_config_copy"),
    "guards.Source": ("torch._guards", "Source"),
    "functorch.config.get_config_copy": ("torch._functorch.config", "get_config_copy"),
    "inductor.config.get_config_copy": ("torch._inductor.config", "get_config_copy"),
    "TorchCompileInductorWrapper.get_compiler_config": ("torch", "_TorchCompileInductorWrapper.get_compiler_config"),
    "compile_fx.get_patched_config_dict": ("torch._inductor.compile_fx", "get_patched_config_dict"),
    "inductor.config.patch": ("torch._inductor.config", "patch"),
}

log = logging.getLogger("raycompile.frames")

# config values that name this machine, not the compile (Inductor's own cache key leaves them out)
_CONFIG_MACHINE_KEYS = ("_save_config_ignore", "_cache_config_ignore_prefix", "_cache_config_factory_keys")
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_NON_LEAF_GRAD = r"The \.grad attribute of a Tensor that is not a leaf Tensor is being accessed"


class FrameStore(Protocol):
    """What ``frames_stored`` hands the cache's three calls to (``wrapper/frames.py``)."""

    def load(self, fn: Callable[..., Any], options: dict[str, Any] | None, package: Any = None) -> Any | None: ...

    def serve(self, package: Any, code: Any, f_locals: Any) -> tuple[Any, Any] | None: ...

    def saves(self, options: dict[str, Any]) -> bool: ...

    def traced(self, source_id: str) -> None: ...

    def unsaveable(self, source_id: str, why: str) -> None: ...

    def write(self, entry: Any, source_id: str) -> None: ...

    def unbuilt(self, why: str) -> None: ...


# what runs when Inductor's backend is about to compile a graph (``inductor_compiling``)
_INDUCTOR_COMPILING: list[Callable[[], None]] = []


def inductor_compiling() -> None:
    """Inductor's backend is about to compile a graph (the session's gate on it calls this): what
    ``frames_stored`` patches in Inductor goes in now, as Inductor is imported anyway."""
    for hook in list(_INDUCTOR_COMPILING):
        hook()


@contextlib.contextmanager
def frames_stored(store: FrameStore, backward_with_forward: bool = False) -> Iterator[None]:
    """While inside, Dynamo's precompile cache is on and ``store`` is its storage:

    - ``torch._dynamo.config.caching_precompile``, with ``bundled_autograd_cache`` (the
      forward and backward travel whole in the entry: torch 2.11 cannot otherwise serialize a
      graph the FX cache served); with ``backward_with_forward``, also
      ``force_non_lazy_backward_lowering`` (the backward exists when the frame is recorded, so the
      entry is complete then; else, as in stock, at the frame's first backward:
      ``precompile.lower_backward_with_forward`` turns it on later). torch skips its FX-graph
      cache whenever ``bundled_autograd_cache`` is on, so each graph's own compile
      (``_compile_fx_inner``) runs with it off (``fx_cache_kept``): a graph equal to one compiled
      before (the blocks of a model with a graph break in each) is served from the FX-graph cache
      as in stock, and the entry still bundles it whole;
    - ``load(fn, options)`` answers ``torch.compile(fn)``, with the caller's compile options
      (None where the caller is not a ``torch.compile`` context: then nothing is loaded);
    - ``traced(source_id)`` is told of every frame Dynamo traced;
    - ``unsaveable(source_id, why)`` of a frame torch cannot save (it cannot name its code: a
      function reached through a property, say). torch raises out of the compile there; here the
      frame is compiled as usual and left out of the entry (a warm process traces it);
    - ``write(entry, source_id)`` gets what ``save_to_dynamo_cache`` writes; torch's own unsigned
      file is never written.

    Dynamo's "guard dropped with caching_precompile" warnings (one per guard) go to debug.
    Everything is restored exactly on exit."""
    import torch._dynamo.config as dconfig
    import torch._functorch.config as fconfig
    from torch._dynamo import package
    from torch._dynamo.exc import PackageError

    cache = package.DynamoCache
    stock_class = type(cache)

    # the packages of torch.compile calls whose frames are saved; torch records every package under
    # its function's id alone, so another compile of the same function (another backend, say) would
    # otherwise replace the saved one's package with its own
    saved_packages: weakref.WeakSet[Any] = weakref.WeakSet()

    class FarmDynamoCache(stock_class):  # type: ignore[misc, valid-type]
        def load(self, fn: Callable[..., Any]) -> Any | None:
            ctx = _caller_context()
            options = _options(ctx) if ctx is not None else None
            package = getattr(ctx, "_package", None)
            if options is not None and store.saves(options) and package is not None:
                saved_packages.add(package)
            return store.load(fn, options, package)

        def record_package(self, pkg: Any) -> None:
            if pkg in saved_packages:
                super().record_package(pkg)
                if not getattr(serving, "served", False):  # a frame served (below) was not traced
                    store.traced(pkg.source_id)
                serving.served = False

        def write(self, entry: Any, path: str) -> None:
            store.write(entry, path)

        def _write_to_local_cache(self, pickled_content: bytes, path: str) -> None:
            """A Mega-Cache's "precompile" artifact would land here: raycompile's tiers hold them."""

    compile_package = package.CompilePackage
    stock_code_context = compile_package.__dict__["code_context"]

    @contextlib.contextmanager
    def code_context(self: Any, code: Any) -> Iterator[None]:
        if code not in self._codes:
            try:
                self._add_user_function(code)
            except PackageError as e:
                found = resolve_code(code)
                if found is not None:  # a property's getter, a dataclass's generated __init__
                    module_name, function_name, code_source = found
                    self._add_function(code, module_name, function_name=function_name, code_source=code_source)
                else:
                    module = inspect.getmodule(code)
                    self._add_function(code, module.__name__ if module is not None else "builtins")
                    self._codes[code].bypassed = True  # compiled, never saved: its guards and backends are skipped
                    store.unsaveable(self.source_id, str(e))
        with stock_code_context(self, code):
            yield

    # Guards are kept whole (``guards.py``): the compiling process builds every guard, as stock does
    # without the cache (torch's caching_precompile filter would drop the identity guards here too),
    # and the entry holds them all, re-created against the loading process's objects.
    from torch._dynamo.guards import CheckFunctionManager

    from . import guards

    stock_init = CheckFunctionManager.__dict__["__init__"]

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        with dconfig.patch(caching_precompile=False):  # its only reader here is that filter
            stock_init(self, *args, **kwargs)

    # A guard torch cannot serialize makes the whole compile fail: a CLASS_MATCH guard on a class
    # defined in a function (PackageError: torch bypasses the frame's entry, then asserts that the
    # guards were serialized; 2.11, 2.13), an object of such a class (TypeError). An identity guard
    # on an object that another process would get a copy of (an instance) could never hold there.
    # Such a frame is bypassed: compiled as usual, never saved; a warm process traces it.
    stock_serialize = CheckFunctionManager.__dict__["serialize_guards"]

    def serialize_guards(self: Any, builder: Any, sorted_guards: Any, output_graph: Any) -> bytes:
        try:
            local = guards.local_identities(builder, sorted_guards)
            if local:
                raise PackageError(f"its guards name objects another process only has copies of: "
                                   f"{'; '.join(local[:3])}{' ...' if len(local) > 3 else ''}")
            guards.keep_builtins(self, sorted_guards, output_graph)
            return stock_serialize(self, builder, sorted_guards, output_graph)
        except Exception as e:  # noqa: BLE001 - any reason the guards do not travel: the frame is not saved
            if dconfig.strict_precompile:
                raise
            self.output_graph.bypass_package(f"Guard evaluation failed: {type(e).__name__}: {e}")
            # bypass_package's warning tells the store (_DroppedGuardNotes); the bypassed entry
            # ignores these guards (CompilePackage.add_guarded_code)
            return b""

    # Single flight: a frame of a function another process is compiling is served from what that
    # process compiled (``store.serve``) instead of being traced; else Dynamo compiles it.
    from torch._dynamo import convert_frame

    from . import light, precompile

    stock_compile = convert_frame._compile
    serving = threading.local()  # .served: the frame being converted on this thread was served

    def _compile(*args: Any, **kwargs: Any) -> Any:
        inner_kept()  # where compile_fx is imported already: a trace may reach it
        package = kwargs.get("package")
        if package is not None and package in saved_packages and len(args) >= 3:
            found = store.serve(package, args[0], args[2])  # code, f_locals
            if found is precompile.SKIP:
                serving.served = True
                return precompile.skipped()
            if found is not None:
                serving.served = True
                return precompile.served(found[1], found[0], kwargs.get("compile_id"))
            try:
                result = stock_compile(*args, **kwargs)
            except BaseException as e:
                precompile.note_converted(package, args[0], raised=e)
                raise
            precompile.note_converted(package, args[0])  # under Dynamo's lock, with its guarded codes
            return result
        return stock_compile(*args, **kwargs)

    # Inductor's compile_fx is patched when Inductor is about to compile a graph (``inductor_compiling``,
    # from the session's gate on Inductor's backend; or at a frame's trace, where it is imported
    # already), never here: importing it costs a warm process that only loads frames a second of
    # its first call (stop 52: GPT-2's warm start from 0.40x to 0.60x of stock's), and a frame
    # traced without a graph (a dataclass's __init__) does not need it.
    inner_lock = threading.Lock()
    patched_inner: list[Any] = []  # [the module, stock's _compile_fx_inner], once patched

    def inner_kept(import_now: bool = False) -> None:
        if patched_inner:
            return
        compile_fx = sys.modules.get("torch._inductor.compile_fx")
        if compile_fx is None:
            if not import_now:
                return
            import torch._inductor.compile_fx as compile_fx
        with inner_lock:
            if not patched_inner and not closed:
                patched_inner[:] = [compile_fx, compile_fx._compile_fx_inner]
                compile_fx._compile_fx_inner = fx_cache_kept(compile_fx._compile_fx_inner)

    # torch.compile asks its Inductor backend for the compiler config at once (Dynamo keeps it on the
    # compiled function; the frames' key reads it: ``_options``), and stock's method imports
    # compile_fx for it: a second of a warm process's torch.compile on the CPU box, 0.9 s on an
    # H200, for a process that only loads frames. Asked here, it is the same dict, made as stock's
    # ``get_patched_config_dict`` makes it (``Inductor config.patch`` + ``get_config_copy``), and
    # compile_fx is imported where a graph is compiled (``TorchCompileInductorWrapper.__call__``).
    import torch

    wrapper_class = torch._TorchCompileInductorWrapper
    stock_compiler_config = wrapper_class.__dict__["get_compiler_config"]

    def get_compiler_config(self: Any) -> Any:
        light.register_compile_fx_ops()  # as stock's import of compile_fx registers them
        return patched_config_dict(self.config)

    closed = False
    compiling_hook = functools.partial(inner_kept, True)
    _INDUCTOR_COMPILING.append(compiling_hook)

    saved = (dconfig.caching_precompile, fconfig.bundled_autograd_cache, fconfig.force_non_lazy_backward_lowering)
    reducers = _init_field_reducers()
    quiet = _DroppedGuardNotes(lambda why: store.unsaveable("", why))
    noted = [logging.getLogger(name) for name in _NOTED_LOGGERS]
    identities = guards.identities_saved(store.unbuilt)
    identities.__enter__()
    reset_clears = precompile.resettable()  # loaded frames go with torch._dynamo.reset(), as traced ones do
    reset_clears.__enter__()
    sources_once = precompile.sources_recorded_once()
    sources_once.__enter__()
    loads_light = light.light_loads()  # a loaded entry imports no lowering, scheduler or codegen
    loads_light.__enter__()
    cache.__class__ = FarmDynamoCache
    convert_frame._compile = _compile
    wrapper_class.get_compiler_config = get_compiler_config
    compile_package.code_context = code_context
    CheckFunctionManager.serialize_guards = serialize_guards
    CheckFunctionManager.__init__ = __init__
    for source_class, (_, fixed) in reducers.items():
        source_class.__reduce__ = fixed
    dconfig.caching_precompile = True
    fconfig.bundled_autograd_cache = True
    fconfig.force_non_lazy_backward_lowering = saved[2] or backward_with_forward
    for logger in noted:
        logger.addFilter(quiet)
    # serializing guards reads .grad of every tensor source, non-leaf ones too (torch's warning, not the user's)
    warnings.filterwarnings("ignore", message=_NON_LEAF_GRAD, category=UserWarning)
    added = warnings.filters[0]
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            warnings.filters.remove(added)
        getattr(warnings, "_filters_mutated", lambda: None)()  # the filter caches see the removal
        for logger in noted:
            logger.removeFilter(quiet)
        cache.__class__ = stock_class
        convert_frame._compile = stock_compile
        wrapper_class.get_compiler_config = stock_compiler_config
        with contextlib.suppress(ValueError):
            _INDUCTOR_COMPILING.remove(compiling_hook)
        with inner_lock:
            closed = True
            if patched_inner:
                patched_inner[0]._compile_fx_inner = patched_inner[1]
                patched_inner.clear()
        compile_package.code_context = stock_code_context
        CheckFunctionManager.serialize_guards = stock_serialize
        CheckFunctionManager.__init__ = stock_init
        for source_class, (stock_reduce, _) in reducers.items():
            source_class.__reduce__ = stock_reduce
        dconfig.caching_precompile, fconfig.bundled_autograd_cache, fconfig.force_non_lazy_backward_lowering = saved
        identities.__exit__(None, None, None)
        reset_clears.__exit__(None, None, None)
        sources_once.__exit__(None, None, None)
        loads_light.__exit__(None, None, None)


def _init_field_reducers() -> dict[type, tuple[Any, Any]]:
    """Guard sources whose pickling is broken, with a ``__reduce__`` that is not: {class: (torch's,
    fixed)}. torch 2.11's ``dataclass_with_cached_hash`` pickles a source as its class called with
    every field, also those the constructor does not take (``DefaultsSource.field``, ``_name``), so
    the guards of a frame that reads a function's defaults (Mixtral's) pickle but never unpickle,
    and that frame's entry could neither be written nor loaded. Fixed in later torch (only the
    constructor's fields), where this finds nothing to mend."""

    from torch._guards import Source

    def reduce(self: Any) -> tuple[Any, tuple[Any, ...]]:
        return type(self), tuple(getattr(self, f.name) for f in dataclasses.fields(self) if f.init)

    out: dict[type, tuple[Any, Any]] = {}
    pending, seen = [Source], set()
    while pending:
        cls = pending.pop()
        if cls in seen:
            continue
        seen.add(cls)
        pending.extend(cls.__subclasses__())
        stock = cls.__dict__.get("__reduce__")
        if (stock is None or getattr(stock, "__module__", "") != "torch._guards"
                or not dataclasses.is_dataclass(cls) or all(f.init for f in dataclasses.fields(cls))):
            continue
        if _reduces_every_field(stock):
            out[cls] = (stock, reduce)
    return out


def _reduces_every_field(stock: Any) -> bool:
    """Whether torch's source ``__reduce__`` ``stock`` hands its constructor the fields it does not take
    (read from the function's code: it names ``f.init`` where it filters them)."""
    from .precompile import _code_names

    code = getattr(stock, "__code__", None)
    return code is not None and "init" not in _code_names(code)


_NOTES = ("is dropped with caching_precompile", "Detected a package bypass")
_NOTED_LOGGERS = ("torch._dynamo.guards", "torch._dynamo.output_graph")


class _DroppedGuardNotes(logging.Filter):
    """torch warns once per guard it drops under caching_precompile (hundreds of lines for a
    model), and once per frame it cannot save ("Detected a package bypass: REASON"). raycompile's
    key stands in for those guards (``wrapper/frames.py``); a bypass is handed to ``bypassed``
    (counted, its reason kept for ``stats()``). Both go to the raycompile.frames debug log."""

    def __init__(self, bypassed: Callable[[str], None]) -> None:
        super().__init__()
        self.bypassed = bypassed

    def filter(self, record: logging.LogRecord) -> bool:
        text = str(record.msg)
        if not any(note in text for note in _NOTES):
            return True
        message = text % record.args if record.args else text
        log.debug("torch: %s", message)
        if "Detected a package bypass" in text:
            self.bypassed(message.split("Detected a package bypass:", 1)[-1].strip())
        return False


def _caller_context() -> Any | None:
    """The ``torch.compile`` context that is loading (its caller's ``self``), or None."""
    from torch._dynamo.eval_frame import _TorchDynamoContext

    frame = sys._getframe(2)  # FarmDynamoCache.load <- _TorchDynamoContext.__call__
    for _ in range(3):
        if frame is None:
            return None
        ctx = frame.f_locals.get("self")
        if isinstance(ctx, _TorchDynamoContext):
            return ctx
        frame = frame.f_back
    return None


def patched_config_dict(config_patches: str | dict[str, Any] | None) -> dict[str, Any]:
    """Inductor's config with ``config_patches`` applied, as a dict: what stock's
    ``compile_fx.get_patched_config_dict`` returns (the same two calls), without importing
    compile_fx (lowering, select_algorithm: about a second)."""
    from torch._inductor import config

    with config.patch(config_patches):
        return config.get_config_copy()


class Unkeyable(Exception):
    """A compile option or config value that no key can stand for across processes (a custom
    pass with no ``uuid()``): the frames it compiles are traced as stock traces them, never saved."""


def _options(ctx: Any) -> dict[str, Any] | None:
    """A ``torch.compile`` context's compile options: the backend, its compiler config (Inductor's
    config patches of ``mode`` and ``options``, for ``backend="inductor"`` and for
    ``backend="raycompile"``, whose mode and options torch hands to the backend instead), dynamic,
    fullgraph. None when they cannot be keyed (an unknown option: the backend raises it when it
    compiles, as stock's does; a pass with no uuid): then nothing is loaded or saved."""
    callback = getattr(ctx, "callback", None)
    backend = _backend_name(callback)
    config = getattr(ctx, "compiler_config", None)
    try:
        if config is None and backend == "raycompile":
            kwargs = getattr(_unwrapped(callback), "kwargs", None) or {}
            import torch

            # what the backend compiles with (raycompile/backend.py): Inductor's config as the
            # wrapper of backend="inductor" states it, its mode's and options' patches applied
            wrapper = torch._TorchCompileInductorWrapper(kwargs.get("mode"), kwargs.get("options"), None)
            config = wrapper.get_compiler_config()
        compiler_config = _portable(config)
    except (Unkeyable, RuntimeError) as e:
        log.debug("raycompile: compile options of %s not keyed (%s); traced as stock traces them", backend, e)
        return None
    return {"backend": backend, "compiler_config": compiler_config,
            "dynamic": repr(getattr(ctx, "_dynamic", None)),
            "fullgraph": repr(getattr(ctx, "fullgraph", None))}


def _unwrapped(callback: Any) -> Any:
    seen = 0
    while hasattr(callback, "_torchdynamo_orig_backend") and seen < 8:
        callback, seen = callback._torchdynamo_orig_backend, seen + 1
    return callback


def _backend_name(callback: Any) -> str:
    """The backend under Dynamo's wrappers (``_torchdynamo_orig_backend`` links)."""
    callback = _unwrapped(callback)
    name = getattr(callback, "compiler_name", None)  # torch.compile(backend="name")
    if isinstance(name, str):
        return name
    cls = type(callback)
    if cls.__name__ == "_TorchCompileInductorWrapper":
        return "inductor"
    target = callback if callable(callback) and hasattr(callback, "__qualname__") else cls
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', repr(target))}"


def _text(value: Any) -> str:
    """A config value as text that is the same in every process: sets sorted (their order follows
    the hash seed), containers item by item, no object addresses."""
    if isinstance(value, (set, frozenset)):
        return "{" + ", ".join(sorted(_text(v) for v in value)) + "}"
    if isinstance(value, (list, tuple)):
        return type(value).__name__ + "(" + ", ".join(_text(v) for v in value) + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(sorted(f"{_text(k)}: {_text(v)}" for k, v in value.items())) + "}"
    return _ADDRESS.sub("", repr(value))


def _portable(config: Any) -> Any:
    """A config dict without what names this machine (paths, thread counts) and without object
    addresses, as text; anything else as its text."""
    if not isinstance(config, dict):
        return _text(config)
    ignore = tuple(config.get("_cache_config_ignore_prefix", ())) + tuple(config.get("_save_config_ignore", ()))
    out = {}
    for name, value in sorted(config.items()):
        if name in _CONFIG_MACHINE_KEYS or (ignore and name.startswith(ignore)):
            continue
        out[name] = _pass_text(name, value)
    return out


def _pass_text(name: str, value: Any) -> Any:
    """A config value's text; a custom pass by its ``uuid()`` (CustomGraphPass), as Inductor's
    FX-graph cache keys it. A function or object with no uuid has no text that differs when its
    code does: Unkeyable (Inductor's cache bypasses such a pass too)."""
    uuid = getattr(value, "uuid", None)
    if callable(uuid):
        got = uuid()
        if got is None:
            raise Unkeyable(f"{name}: its uuid() is None")
        return str(got)
    if callable(value) and not isinstance(value, type):
        raise Unkeyable(f"{name} is {value!r}, a pass with no uuid() (make it a CustomGraphPass)")
    if isinstance(value, (list, tuple)) and any(callable(v) and not isinstance(v, (str, type)) for v in value):
        return _text([_pass_text(name, v) for v in value])
    return _text(value)


# Inductor's config entries its own cache key leaves to a pass's uuid() (codecache's
# _check_custom_passes) or takes as they are; _cache_config_ignore_prefix names them too
_INDUCTOR_PASSES = ("pre_grad_custom_pass", "post_grad_custom_pre_pass", "post_grad_custom_post_pass",
                    "joint_custom_pre_pass", "joint_custom_post_pass", "_pre_fusion_custom_pass",
                    "_post_fusion_custom_pass", "_fuse_ddp_communication_passes", "custom_partitioner_fn")


def global_config() -> dict[str, Any]:
    """Dynamo's, AOTAutograd's and Inductor's configs, portable: a compiled frame depends on all
    three, and a loaded one skips Inductor (its FX-graph key, which holds Inductor's config, is
    never computed). Inductor's as its cache key takes it: without machine entries (compile
    threads, trace dirs), with each custom pass as its uuid(). Raises Unkeyable for a pass with
    none."""
    import torch._dynamo.config as dconfig
    import torch._functorch.config as fconfig
    import torch._inductor.config as iconfig

    inductor = _portable(iconfig.get_config_copy())
    for name in _INDUCTOR_PASSES:
        value = getattr(iconfig, name, None)
        if value is not None:
            inductor[name] = _pass_text(name, value)
    return {"dynamo": _portable(dconfig.get_config_copy()), "functorch": _portable(fconfig.get_config_copy()),
            "inductor": inductor}


def system() -> dict[str, Any]:
    """What torch checks an entry against (python, torch, CUDA toolkit, triton, GPU name)."""
    from torch._dynamo.package import SystemInfo

    info = SystemInfo.current()
    return {"python": info.python_version, "torch": info.torch_version, "toolkit": info.toolkit_version,
            "triton": list(info.triton_version) if info.triton_version else None, "gpu": info.gpu_name}


def compiled_function(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The user's function under ``torch.compile``'s wrappers."""
    from torch._dynamo.eval_frame import innermost_fn

    return innermost_fn(fn)


def compiled_call() -> Any | None:
    """The frame of the outermost call through ``torch.compile``'s wrappers on this thread's stack
    (``OptimizedModule.__call__``, the compiled function's wrapper: code of
    ``torch/_dynamo/eval_frame.py``), or None. While that frame object is on its thread's stack,
    the call that is compiling now has not returned (``wrapper/frames.py``)."""
    import torch._dynamo.eval_frame as eval_frame

    where = eval_frame.__file__
    outermost = None
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename == where:
            outermost = frame
        frame = frame.f_back
    return outermost


def source_id(fn: Callable[..., Any]) -> str:
    """torch's own id of a compiled function (its packages are recorded under it)."""
    from torch._dynamo.package import CompilePackage

    return CompilePackage.source_id_from_fn(fn)
