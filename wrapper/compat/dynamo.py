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
import importlib
import inspect
import logging
import pickle
import re
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from ._base import Seams

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
    "package.PrecompileCacheEntry": ("torch._dynamo.package", "PrecompileCacheEntry"),
    "package.SystemInfo.current": ("torch._dynamo.package", "SystemInfo.current"),
    "package.CompilePackage.source_id_from_fn": ("torch._dynamo.package", "CompilePackage.source_id_from_fn"),
    "package._hash_sourcelines": ("torch._dynamo.package", "_hash_sourcelines"),
    "package.load_guards_state": ("torch._dynamo.package", "load_guards_state"),
    "precompile_context.PrecompileContext.save_to_dynamo_cache": (
        "torch._dynamo.precompile_context", "PrecompileContext.save_to_dynamo_cache"),
    "precompile_context.PrecompileContext.record_artifact": (
        "torch._dynamo.precompile_context", "PrecompileContext.record_artifact"),
    "precompile_context.PrecompileContext._dynamo_cache_entries": (
        "torch._dynamo.precompile_context", "PrecompileContext._dynamo_cache_entries"),
    "precompile_context.PrecompileContext._backend_artifacts_by_key": (
        "torch._dynamo.precompile_context", "PrecompileContext._backend_artifacts_by_key"),
    "precompile_context.DynamoCache": ("torch._dynamo.precompile_context", "DynamoCache"),
    "bytecode_transformation.unique_id": ("torch._dynamo.bytecode_transformation", "unique_id"),
    "eval_frame._TorchDynamoContext": ("torch._dynamo.eval_frame", "_TorchDynamoContext"),
    "eval_frame.innermost_fn": ("torch._dynamo.eval_frame", "innermost_fn"),
    "convert_frame.compile_lock": ("torch._dynamo.convert_frame", "compile_lock"),
    "utils.counters": ("torch._dynamo.utils", "counters"),
    "package.CompilePackage.code_context": ("torch._dynamo.package", "CompilePackage.code_context"),
    "package.CompilePackage._add_user_function": ("torch._dynamo.package", "CompilePackage._add_user_function"),
    "package.CompilePackage._add_function": ("torch._dynamo.package", "CompilePackage._add_function"),
    "exc.PackageError": ("torch._dynamo.exc", "PackageError"),
    "guards.CheckFunctionManager.serialize_guards": ("torch._dynamo.guards", "CheckFunctionManager.serialize_guards"),
    "guards.CheckFunctionManager.__init__": ("torch._dynamo.guards", "CheckFunctionManager.__init__"),
    "dynamo.config.get_config_copy": ("torch._dynamo.config", "get_config_copy"),
    "functorch.config.get_config_copy": ("torch._functorch.config", "get_config_copy"),
}

log = logging.getLogger("raycompile.frames")

# config values that name this machine, not the compile (Inductor's own cache key leaves them out)
_CONFIG_MACHINE_KEYS = ("_save_config_ignore", "_cache_config_ignore_prefix", "_cache_config_factory_keys")
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_BY_ID = re.compile(r"^_\d+_c\d+$")  # install_global_by_id("", value): "_<id>_c<compile id>"
_NON_LEAF_GRAD = r"The \.grad attribute of a Tensor that is not a leaf Tensor is being accessed"


class FrameStore(Protocol):
    """What ``frames_stored`` hands the cache's three calls to (``wrapper/frames.py``)."""

    def load(self, fn: Callable[..., Any], options: dict[str, Any] | None) -> Any | None: ...

    def traced(self, source_id: str) -> None: ...

    def unsaveable(self, source_id: str, why: str) -> None: ...

    def write(self, entry: Any, source_id: str) -> None: ...


@contextlib.contextmanager
def frames_stored(store: FrameStore) -> Iterator[None]:
    """While inside, Dynamo's precompile cache is on and ``store`` is its storage:

    - ``torch._dynamo.config.caching_precompile``, with ``bundled_autograd_cache`` (the
      forward and backward travel whole in the entry: torch 2.11 cannot otherwise serialize a
      graph the FX cache served) and ``force_non_lazy_backward_lowering`` (the backward exists
      when the frame is recorded, so the entry is complete then, not at the first backward);
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

    class FarmDynamoCache(stock_class):  # type: ignore[misc, valid-type]
        def load(self, fn: Callable[..., Any]) -> Any | None:
            return store.load(fn, _caller_options())

        def record_package(self, pkg: Any) -> None:
            super().record_package(pkg)
            store.traced(pkg.source_id)

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
                found = _resolve_code(code)
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

    # A guard torch cannot serialize makes the whole compile fail: a CLASS_MATCH guard (PackageError:
    # torch bypasses the frame's entry, then asserts that the guards were serialized; 2.11, 2.13),
    # an object of a class defined in a function (TypeError). Here the frame is bypassed (compiled
    # as usual, never saved; a warm process traces it).
    from torch._dynamo.guards import CheckFunctionManager

    stock_serialize = CheckFunctionManager.__dict__["serialize_guards"]

    def serialize_guards(self: Any, *args: Any, **kwargs: Any) -> bytes:
        try:
            return stock_serialize(self, *args, **kwargs)
        except Exception as e:  # noqa: BLE001 - any reason the guards do not pickle: the frame is not saved
            if dconfig.strict_precompile:
                raise
            self.output_graph.bypass_package(f"Guard evaluation failed: {type(e).__name__}: {e}")
            # bypass_package's warning tells the store (_DroppedGuardNotes); the bypassed entry
            # ignores these guards (CompilePackage.add_guarded_code)
            return b""

    # torch drops the ID_MATCH-like guards it cannot save (ID_MATCH, CLOSURE_MATCH, DICT_VERSION), but
    # not their kin CLASS_MATCH, MODULE_MATCH, FUNCTION_MATCH and NN_MODULE, which it cannot save
    # either: a frame with one (Mixtral's, GPT-2's on 2.11) is then never saved. raycompile's key
    # (module sources, the model's classes and functions) stands in for them as for the others.
    stock_init = CheckFunctionManager.__dict__["__init__"]
    init_signature = inspect.signature(stock_init)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        bound = init_signature.bind(self, *args, **kwargs)
        theirs = bound.arguments.get("guard_filter_fn")

        def keep(entries: Any) -> list[bool]:
            kept = theirs(entries) if theirs is not None else [True] * len(entries)
            return [k and not ({e.guard_type, *(e.derived_guard_types or ())} & _ALSO_DROPPED)
                    for k, e in zip(kept, entries)]

        bound.arguments["guard_filter_fn"] = keep
        stock_init(*bound.args, **bound.kwargs)

    saved = (dconfig.caching_precompile, fconfig.bundled_autograd_cache, fconfig.force_non_lazy_backward_lowering)
    quiet = _DroppedGuardNotes(lambda why: store.unsaveable("", why))
    noted = [logging.getLogger(name) for name in _NOTED_LOGGERS]
    cache.__class__ = FarmDynamoCache
    compile_package.code_context = code_context
    CheckFunctionManager.serialize_guards = serialize_guards
    CheckFunctionManager.__init__ = __init__
    dconfig.caching_precompile = True
    fconfig.bundled_autograd_cache = True
    fconfig.force_non_lazy_backward_lowering = True
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
        compile_package.code_context = stock_code_context
        CheckFunctionManager.serialize_guards = stock_serialize
        CheckFunctionManager.__init__ = stock_init
        dconfig.caching_precompile, fconfig.bundled_autograd_cache, fconfig.force_non_lazy_backward_lowering = saved


_ALSO_DROPPED = frozenset({"CLASS_MATCH", "MODULE_MATCH", "FUNCTION_MATCH", "NN_MODULE"})
_NOTES = ("is dropped with caching_precompile", "Detected a package bypass")
_NOTED_LOGGERS = ("torch._dynamo.guards", "torch._dynamo.output_graph")


def _resolve_code(code: Any) -> tuple[str, str, str] | None:
    """(module, qualified name, path to the code from it) for a code object torch cannot name
    (``_get_code_source`` knows module-level functions, methods, closures and nested functions):
    a property's getter (``Model.loss_function`` -> ``fget.__code__``) or a function whose code has
    no source file (a dataclass's generated ``__init__``), found through the function that holds
    it. The path is checked to lead back to ``code`` in this process. None if there is none."""
    import gc
    import types

    for fn in gc.get_referrers(code):
        if not isinstance(fn, types.FunctionType) or fn.__code__ is not code or "<locals>" in fn.__qualname__:
            continue
        obj: Any = sys.modules.get(fn.__module__ or "")
        for part in fn.__qualname__.split("."):
            obj = inspect.getattr_static(obj, part, None) if obj is not None else None
        if isinstance(obj, property) and obj.fget is fn:
            return fn.__module__, fn.__qualname__, "fget.__code__"
        if isinstance(obj, (staticmethod, classmethod)):
            obj = obj.__func__
        if obj is fn:
            return fn.__module__, fn.__qualname__, "__code__"
    return None


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


def _caller_options() -> dict[str, Any] | None:
    """The compile options of the ``torch.compile`` context that is loading (its caller's ``self``):
    the backend, its compiler config (Inductor's config with mode and options applied), dynamic,
    fullgraph. None when the caller is not such a context."""
    from torch._dynamo.eval_frame import _TorchDynamoContext

    frame = sys._getframe(2)  # FarmDynamoCache.load <- _TorchDynamoContext.__call__
    for _ in range(3):
        if frame is None:
            return None
        ctx = frame.f_locals.get("self")
        if isinstance(ctx, _TorchDynamoContext):
            return {"backend": _backend_name(getattr(ctx, "callback", None)),
                    "compiler_config": _portable(getattr(ctx, "compiler_config", None)),
                    "dynamic": repr(getattr(ctx, "_dynamic", None)),
                    "fullgraph": repr(getattr(ctx, "fullgraph", None))}
        frame = frame.f_back
    return None


def _backend_name(callback: Any) -> str:
    """The backend under Dynamo's wrappers (``_torchdynamo_orig_backend`` links)."""
    seen = 0
    while hasattr(callback, "_torchdynamo_orig_backend") and seen < 8:
        callback, seen = callback._torchdynamo_orig_backend, seen + 1
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
        uuid = getattr(value, "uuid", None)  # a custom pass names itself (CustomGraphPass.uuid)
        out[name] = str(uuid()) if callable(uuid) else _text(value)
    return out


def global_config() -> dict[str, Any]:
    """Dynamo's and AOTAutograd's configs, portable (a compiled frame depends on both)."""
    import torch._dynamo.config as dconfig
    import torch._functorch.config as fconfig

    return {"dynamo": _portable(dconfig.get_config_copy()), "functorch": _portable(fconfig.get_config_copy())}


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


def source_id(fn: Callable[..., Any]) -> str:
    """torch's own id of a compiled function (its packages are recorded under it)."""
    from torch._dynamo.package import CompilePackage

    return CompilePackage.source_id_from_fn(fn)


# -- entries --------------------------------------------------------------------------------------


def dumps(entry: Any) -> bytes:
    return pickle.dumps(entry)


def loads(data: bytes) -> Any:
    """Unpickle an entry (call only on bytes from a verified, signed cache entry) and check it
    installs here: a PrecompileCacheEntry for these versions, whose inlined sources are unchanged,
    whose every frame has its backends, and whose guards unpickle. Raises what is wrong (torch
    itself would only survive a RuntimeError, and its retry after a failed install crashes)."""
    from torch._dynamo import package

    entry = pickle.loads(data)
    if not isinstance(entry, package.PrecompileCacheEntry):
        raise TypeError(f"not a precompile entry: {type(entry).__name__}")
    entry.dynamo.check_versions()
    for src in entry.dynamo.source_info.inlined_sources:
        module = importlib.import_module(src.module)
        if package._hash_sourcelines(module, src.firstlineno, src.lastlineno) != src.checksum:
            raise RuntimeError(f"the source of {src.module} (lines {src.firstlineno}-{src.lastlineno}) changed")
    for code in entry.dynamo.codes:
        if code.bypassed:
            continue
        for backend in code.backend_ids:
            if backend not in entry.backends:
                raise RuntimeError(f"frame {code.function_names} lacks its backend {backend}")
        for guarded in code.guarded_codes:
            package.load_guards_state(guarded.guards_state)  # e.g. TypeError: grad of type _Missing
    missing = _unprovided(entry)
    if missing:
        names = sorted(set().union(*missing.values()))[:5]
        raise RuntimeError(f"compiled frames name globals the entry does not install: {names}")
    return entry


def _is_installed_name(name: str) -> bool:
    """Whether a global a compiled frame's bytecode names is one Dynamo installed in the cold
    process (``__import_*``, ``__compiled_fn_*``, ``__resume_at_*``, ``___module_*_<id>_c<N>``,
    ``_<id>_c<N>``...), not one of the user's module (whose names never start with two underscores
    unless they are dunders)."""
    return (name.startswith("__") and not name.endswith("__")) or bool(_BY_ID.match(name))


def _code_names(code: Any) -> set[str]:
    names = set(getattr(code, "co_names", ()))
    for const in getattr(code, "co_consts", ()):
        if hasattr(const, "co_names"):
            names |= _code_names(const)
    return names


def _unprovided(entry: Any) -> dict[int, set[str]]:
    """code index -> the Dynamo-installed globals its compiled bytecode names that loading the
    entry does not install (torch saves import sources, resume functions, backends and builtins
    dicts; an object installed by id, such as ``___module_collections_<id>_c5``, it does not)."""
    from torch._dynamo import package

    provided: dict[str, set[str]] = {}  # module -> names install() puts there
    for code in entry.dynamo.codes:
        names = provided.setdefault(code.python_module, set())
        names |= set(code.import_sources) | set(code.function_names) | set(code.backend_ids)
    out = {}
    for i, code in enumerate(entry.dynamo.codes):
        if code.bypassed:
            continue
        wanted = set()
        for guarded in code.guarded_codes:
            wanted |= {n for n in _code_names(guarded.dynamo_code) if _is_installed_name(n)}
            state = package.load_guards_state(guarded.guards_state)
            builtins = getattr(getattr(state, "output_graph", None), "name_of_builtins_dict_key_in_fglobals", None)
            wanted.discard(builtins)
        missing = wanted - provided.get(code.python_module, set())
        if missing:
            out[i] = missing
    return out


def portable(entry: Any) -> tuple[Any, int]:
    """``entry`` as another process can install it, and how many frames were left out. A module
    Dynamo installed by id (``___module_collections_<id>_c5``) becomes an import source, which the
    loader installs; a frame naming any other object installed by id is marked bypassed (compiled
    as usual in this process; traced in the next). The live package is not touched."""
    import dataclasses
    import types

    missing = _unprovided(entry)
    if not missing:
        return entry, 0
    codes, dropped = list(entry.dynamo.codes), 0
    for i, names in missing.items():
        code = codes[i]
        module = sys.modules.get(code.python_module)
        imports = dict(code.import_sources)
        for name in names:
            value = getattr(module, name, None) if module is not None else None
            if isinstance(value, types.ModuleType) and value.__name__ in sys.modules:
                imports[name] = value.__name__
        if set(names) <= set(imports):
            codes[i] = dataclasses.replace(code, import_sources=imports)
        else:
            codes[i] = dataclasses.replace(code, bypassed=True)
            dropped += 1
    return dataclasses.replace(entry, dynamo=dataclasses.replace(entry.dynamo, codes=codes)), dropped


def frames_in(entry: Any) -> int:
    """Compiled frame variants an entry installs (each guarded code of each frame)."""
    return sum(len(code.guarded_codes) for code in entry.dynamo.codes if not code.bypassed)


def loaded(entry: Any) -> None:
    """After deciding to return ``entry`` from ``load``: let a later save include its backends (as
    torch's own load does), and move Dynamo's name counter past the names its frames install (a
    frame traced later, after a guard miss, would otherwise make ``__builtins_dict___1`` or
    ``__resume_at_72_3`` again and fail, "already exists in scope")."""
    from torch._dynamo import package
    from torch._dynamo.bytecode_transformation import unique_id
    from torch._dynamo.precompile_context import PrecompileContext

    for backend in entry.backends.values():
        PrecompileContext.record_artifact(backend)
    top = -1
    for code in entry.dynamo.codes:
        names = list(code.function_names)
        for guarded in code.guarded_codes:
            state = package.load_guards_state(guarded.guards_state)
            names.append(getattr(getattr(state, "output_graph", None), "name_of_builtins_dict_key_in_fglobals", ""))
        for name in names:
            m = re.search(r"_(\d+)$", name or "")
            if m:
                top = max(top, int(m.group(1)))
    while int(unique_id("__raycompile_reserved").rsplit("_", 1)[1]) < top:
        pass


def pending() -> dict[str, int]:
    """source id -> compiled frames Dynamo recorded in this process, for packages that are complete
    (every frame that is not bypassed has its backends). Side-effect free: torch's own entry builder
    marks an incomplete frame bypassed for good."""
    from torch._dynamo.precompile_context import PrecompileContext

    have = PrecompileContext._backend_artifacts_by_key
    out = {}
    for key, entry in list(PrecompileContext._dynamo_cache_entries.items()):
        codes = [c for c in entry.codes if not c.bypassed]
        if all(b in have for c in codes for b in c.backend_ids):
            out[key] = sum(len(c.guarded_codes) for c in codes)
    return out


def incomplete() -> list[str]:
    """Source ids of recorded packages that lack a backend (not written yet)."""
    from torch._dynamo.precompile_context import PrecompileContext

    have = PrecompileContext._backend_artifacts_by_key
    return [key for key, entry in list(PrecompileContext._dynamo_cache_entries.items())
            if any(b not in have for c in entry.codes if not c.bypassed for b in c.backend_ids)]


def save(source_ids: set[str]) -> None:
    """Write the complete packages in ``source_ids`` through the cache's ``write`` (under Dynamo's
    compile lock, so no frame is being traced meanwhile). Others are left as they are."""
    from torch._dynamo.convert_frame import compile_lock
    from torch._dynamo.precompile_context import PrecompileContext

    with compile_lock:
        entries = PrecompileContext._dynamo_cache_entries
        held = {k: v for k, v in entries.items() if k not in source_ids}
        try:
            for k in held:
                del entries[k]
            PrecompileContext.save_to_dynamo_cache()
        finally:
            entries.update(held)


def compiling() -> bool:
    """Whether Dynamo is compiling a frame now (on any thread)."""
    from torch._dynamo.convert_frame import compile_lock

    if compile_lock.acquire(blocking=False):
        compile_lock.release()
        return False
    return True


def traced_frames() -> int:
    """Frames Dynamo traced in this process (its own counter)."""
    from torch._dynamo.utils import counters

    return int(counters["frames"]["ok"])

