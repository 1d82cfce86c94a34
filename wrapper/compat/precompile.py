"""Seam family "precompile": Dynamo's precompile entries themselves (``PrecompileCacheEntry``), as
``wrapper/frames.py`` writes, checks and loads them: what makes an entry installable in another
process (``portable``), the checks before torch installs one and what loading must do beside
torch's install (``loads``), and which recorded packages are complete (``recorded``).
``dynamo.py`` redirects Dynamo's cache to raycompile; this module reads what goes through it.
Checked on torch 2.11.0, 2.13.0 and 2.15.0."""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import pickle
import re
import struct
import sys
import types
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from . import devices
from ._base import Seams

CHECKED_ON = ("2.11.0", "2.13.0", "2.15.0")

SEAMS: Seams = {
    "functorch.config.force_non_lazy_backward_lowering": (
        "torch._functorch.config", "force_non_lazy_backward_lowering"),
    "package.PrecompileCacheEntry": ("torch._dynamo.package", "PrecompileCacheEntry"),
    "package._hash_sourcelines": ("torch._dynamo.package", "_hash_sourcelines"),
    "package.SourceInfo.add_code": ("torch._dynamo.package", "SourceInfo.add_code"),
    "package.load_guards_state": ("torch._dynamo.package", "load_guards_state"),
    "precompile_context.PrecompileContext.save_to_dynamo_cache": (
        "torch._dynamo.precompile_context", "PrecompileContext.save_to_dynamo_cache"),
    "precompile_context.PrecompileContext.record_artifact": (
        "torch._dynamo.precompile_context", "PrecompileContext.record_artifact"),
    "precompile_context.PrecompileContext._dynamo_cache_entries": (
        "torch._dynamo.precompile_context", "PrecompileContext._dynamo_cache_entries"),
    "precompile_context.PrecompileContext._backend_artifacts_by_key": (
        "torch._dynamo.precompile_context", "PrecompileContext._backend_artifacts_by_key"),
    "bytecode_transformation.unique_id": ("torch._dynamo.bytecode_transformation", "unique_id"),
    "convert_frame.compile_lock": ("torch._dynamo.convert_frame", "compile_lock"),
    "callback.callback_handler": ("torch._dynamo.callback", "callback_handler"),
    "callback.CompilationCallbackHandler.__pending_callbacks_counter": (
        "torch._dynamo.callback", "CompilationCallbackHandler._CompilationCallbackHandler__pending_callbacks_counter"),
    "utils.counters": ("torch._dynamo.utils", "counters"),
    "eval_frame._load_precompile_entry": ("torch._C._dynamo.eval_frame", "_load_precompile_entry"),
    "package.CompilePackage.initialize": ("torch._dynamo.package", "CompilePackage.initialize"),
    "package.CompilePackage.install": ("torch._dynamo.package", "CompilePackage.install"),
    "types.GuardedCode": ("torch._dynamo.types", "GuardedCode"),
    "types.wrap_guarded_code": ("torch._dynamo.types", "wrap_guarded_code"),
    "types.ConvertFrameReturn": ("torch._dynamo.types", "ConvertFrameReturn"),
    "eval_frame.skip_code": ("torch._dynamo.eval_frame", "skip_code"),
    "convert_frame.input_codes": ("torch._dynamo.convert_frame", "input_codes"),
    "codegen.PyCodegen.pop_null": ("torch._dynamo.codegen", "PyCodegen.pop_null"),
}

log = logging.getLogger("raycompile.frames")

_BY_ID = re.compile(r"^_\d+_c\d+$")  # install_global_by_id("", value): "_<id>_c<compile id>"


# an entry's bytes: MAGIC, then the CUDA index it was made for and the rank it is bound to (each
# -1 for none: ``devices``), then its pickle
MAGIC = b"raycompile-frames-2\n"
_HEADER = struct.Struct(">hi")


def dumps(entry: Any) -> bytes:
    """``entry``'s bytes, with the one CUDA index it names (so that a process on another index
    moves it there) and the rank whose collectives it calls. Constants of Dynamo's bytecode that
    pickle cannot name are pickled as the equal functions below (``_picklable_constant``)."""
    data, index = devices.dumps(entry, _picklable_constant)
    rank = devices.collective_rank(entry)
    return MAGIC + _HEADER.pack(-1 if index is None else index, -1 if rank is None else rank) + data


def _null_popped() -> None:
    """What the function Dynamo's ``PyCodegen.pop_null`` puts in its bytecode does: called with no
    argument (which pops the NULL below it), it returns None."""
    return None


def _null_popper() -> Callable[[], None]:
    return _null_popped


@functools.cache
def _null_popper_codes() -> frozenset[types.CodeType]:
    """The code of the ``lambda: None`` that ``PyCodegen.pop_null`` (torch 2.11 on Python 3.12: the
    resume code after a graph break; later torch: a graph break in an inlined comprehension) loads
    as a constant of the frame's bytecode. pickle cannot name a local function, so every frame
    holding one failed its write ("Can't pickle local object 'PyCodegen.pop_null.<locals>.<lambda>'")
    and each new process traced the model again."""
    from torch._dynamo.codegen import PyCodegen

    code = getattr(getattr(PyCodegen, "pop_null", None), "__code__", None)
    return frozenset(c for c in (code.co_consts if code is not None else ())
                     if isinstance(c, types.CodeType) and c.co_name == "<lambda>")


def _picklable_constant(obj: Any) -> Any:
    """A ``__reduce__`` value for a function Dynamo put in a frame's bytecode that pickle cannot
    name, and that does exactly what a function here does; None for anything else."""
    if type(obj) is types.FunctionType and obj.__code__ in _null_popper_codes():
        return _null_popper, ()
    return None


def _unpickled(data: bytes) -> Any:
    """The entry in ``data`` (``dumps``), moved to this process's CUDA device when it was made on
    another; raises when it is bound to another rank."""
    if not data.startswith(MAGIC):
        raise ValueError("not an entry of this raycompile version (no header)")
    index, rank = _HEADER.unpack_from(data, len(MAGIC))
    body = data[len(MAGIC) + _HEADER.size:]
    if rank >= 0 and rank != devices.this_rank():
        raise RuntimeError(f"its code calls collectives and was compiled by rank {rank}: rank "
                           f"{devices.this_rank()} compiles its own")
    here = devices.current_index()
    if index >= 0 and here is not None and here != index and not devices.uses(index):
        log.debug("raycompile: compiled frames made on cuda:%d moved to cuda:%d", index, here)
        entry = devices.loads(body, index, here)
        entry._raycompile_moved_from = index
        return entry
    return pickle.loads(body)


def loads(data: bytes) -> Any:
    """Unpickle an entry (call only on bytes from a verified, signed cache entry; moved to this
    process's CUDA device when it was made on another: ``devices``), check it installs here, and
    prepare this process for it; return it for torch to install.

    Checked: a PrecompileCacheEntry for these versions, whose inlined sources are unchanged, whose
    every frame has its backends, whose guards unpickle (each once), and whose bytecode names only
    globals the entry installs. Raises what is wrong (torch itself would only survive a
    RuntimeError, and its retry after a failed install crashes). Then, as torch's own load does, a
    later save is let include its backends; and Dynamo's name counter is moved past the names its
    frames install (a frame traced later, after a guard miss, would otherwise make
    ``__builtins_dict___1`` or ``__resume_at_72_3`` again and fail, "already exists in scope")."""
    from torch._dynamo import package
    from torch._dynamo.bytecode_transformation import unique_id
    from torch._dynamo.precompile_context import PrecompileContext

    entry = _unpickled(data)
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
    builtins = _builtins_names(entry)  # e.g. TypeError: grad of type _Missing
    missing = _unprovided(entry, builtins)
    if missing:
        names = sorted(set().union(*missing.values()))[:5]
        raise RuntimeError(f"compiled frames name globals the entry does not install: {names}")

    for backend in entry.backends.values():
        PrecompileContext.record_artifact(backend)
    top = -1
    for i, code in enumerate(entry.dynamo.codes):
        for name in [*code.function_names, *builtins.get(i, [])]:
            m = re.search(r"_(\d+)$", name or "")
            if m:
                top = max(top, int(m.group(1)))
    while int(unique_id("__raycompile_reserved").rsplit("_", 1)[1]) < top:
        pass
    return entry


def _builtins_names(entry: Any) -> dict[int, list[str]]:
    """code index -> the builtins-dict globals its guarded codes install (from their guards, each
    unpickled once; a guard that does not unpickle here raises)."""
    from torch._dynamo import package

    out: dict[int, list[str]] = {}
    for i, code in enumerate(entry.dynamo.codes):
        if code.bypassed:
            continue
        for guarded in code.guarded_codes:
            state = package.load_guards_state(guarded.guards_state)
            name = getattr(getattr(state, "output_graph", None), "name_of_builtins_dict_key_in_fglobals", None)
            out.setdefault(i, []).append(name or "")
    return out


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


def _unprovided(entry: Any, builtins: dict[int, list[str]]) -> dict[int, set[str]]:
    """code index -> the Dynamo-installed globals its compiled bytecode names that loading the
    entry does not install (torch saves import sources, resume functions, backends and builtins
    dicts, ``builtins``; an object installed by id, such as ``___module_collections_<id>_c5``, it
    does not)."""
    provided: dict[str, set[str]] = {}  # module -> names install() puts there
    for code in entry.dynamo.codes:
        names = provided.setdefault(code.python_module, set())
        names |= set(code.import_sources) | set(code.function_names) | set(code.backend_ids)
    out = {}
    for i, code in enumerate(entry.dynamo.codes):
        if code.bypassed:
            continue
        wanted = {n for guarded in code.guarded_codes for n in _code_names(guarded.dynamo_code)
                  if _is_installed_name(n)}
        missing = wanted - provided.get(code.python_module, set()) - set(builtins.get(i, ()))
        if missing:
            out[i] = missing
    return out


def portable(entry: Any) -> tuple[Any, int]:
    """``entry`` as another process can install it, and how many frames were left out. A module
    Dynamo installed by id (``___module_collections_<id>_c5``) becomes an import source, which the
    loader installs; a frame naming any other object installed by id is marked bypassed (compiled
    as usual in this process; traced in the next). The live package is not touched."""
    import dataclasses

    missing = _unprovided(entry, _builtins_names(entry))
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


def moved_from(entry: Any) -> int | None:
    """The CUDA index an entry ``loads`` moved to this process's device was made on, else None."""
    return getattr(entry, "_raycompile_moved_from", None)


def code_key(code: Any) -> tuple[Any, ...]:
    """What names a frame's code across processes (``flight_names``)."""
    return (getattr(code, "co_filename", None), getattr(code, "co_firstlineno", None),
            getattr(code, "co_name", None), getattr(code, "co_code", None))


_converted: dict[str, list[Any]] = {}  # source id -> the frames Dynamo converted here: code objects, in order


def note_converted(package: Any, code: Any, raised: BaseException | None = None) -> None:
    """Dynamo converted a frame of ``package`` here: returned (its guarded codes are in the
    package), or ``raised`` (not noted: a process served the flight waits for it, and traces it
    once the flight is over)."""
    log.debug("raycompile: frame %s converted%s", getattr(code, "co_name", code),
              "" if raised is None else f" (raised {type(raised).__name__}: {raised})")
    if raised is None:
        _converted.setdefault(package.source_id, []).append(code)


def converted_count(source_id: str) -> int:
    return len(_converted.get(source_id, ()))


def flight_names(source_id: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """(unsaveable, trivial): the ``code_key``s of the frames of ``source_id`` converted here that
    no entry will hold code for: those torch could not save (bypassed, or absent from its package;
    a process served this flight traces them, as stock does), and those compiled to nothing (it
    skips them, as torch's own load skips them). Read from what Dynamo recorded of the package
    (its frames' entries, each holding its guarded codes once converted: recorded after each
    conversion); called while the compiling thread may convert more (each read is one C call)."""
    from torch._dynamo.precompile_context import PrecompileContext

    recorded = PrecompileContext._dynamo_cache_entries.get(source_id)
    live = {code_key(c.python_code): c for c in list(getattr(recorded, "codes", ()))}
    unsaveable, trivial = [], []
    for code in list(_converted.get(source_id, ())):
        key = code_key(code)
        entry = live.get(key)
        if entry is None or entry.bypassed:
            unsaveable.append(key)
        elif not entry.guarded_codes:
            trivial.append(key)
    return unsaveable, trivial


def with_trivial(entry: Any, source_id: str) -> Any:
    """``entry``, naming the frames this process compiled to nothing (``flight_names``): a
    process served the flight that finds it over reads this entry, and skips them."""
    entry._raycompile_trivial = flight_names(source_id)[1]
    return entry


def trivial_in(entry: Any) -> set[tuple[Any, ...]]:
    """The frames ``entry``'s maker compiled to nothing (``with_trivial``)."""
    return {tuple(key) for key in getattr(entry, "_raycompile_trivial", ())}


def unsaveable_in(entry: Any) -> set[tuple[Any, ...]]:
    """The ``code_key``s of the frames ``entry`` marks bypassed (never saved: traced where loaded)."""
    out = set()
    for code in entry.dynamo.codes:
        serialized = getattr(code, "python_code", None)
        if serialized is not None and code.bypassed:
            out.add(code_key(serialized))
    return out


SKIP = object()  # a served frame to run as it is, never compiled here (``flight_names``' trivial)


def skipped() -> Any:
    """What Dynamo's frame conversion returns for a frame it compiled to nothing: run it as it is,
    and this code from now on."""
    from torch._dynamo.types import ConvertFrameReturn

    return ConvertFrameReturn()


def frames_in(entry: Any) -> int:
    """Compiled frame variants an entry installs (each guarded code of each frame)."""
    return sum(len(code.guarded_codes) for code in entry.dynamo.codes if not code.bypassed)


def recorded() -> tuple[dict[str, int], list[str]]:
    """The packages Dynamo recorded in this process: (source id -> compiled frames, for those that
    are complete: every frame that is not bypassed has its backends; the source ids of the others).
    Side-effect free: torch's own entry builder marks an incomplete frame bypassed for good."""
    from torch._dynamo.precompile_context import PrecompileContext

    have = PrecompileContext._backend_artifacts_by_key
    complete, incomplete = {}, []
    for key, entry in list(PrecompileContext._dynamo_cache_entries.items()):
        codes = [c for c in entry.codes if not c.bypassed]
        if all(b in have for c in codes for b in c.backend_ids):
            complete[key] = sum(len(c.guarded_codes) for c in codes)
        else:
            incomplete.append(key)
    return complete, incomplete


def missing_backends(source_ids: list[str]) -> set[str]:
    """The backend ids the packages of ``source_ids`` lack: their training graphs' AOTAutograd
    entries, which a backward lowered lazily writes (``autograd.lower_backwards``)."""
    from torch._dynamo.precompile_context import PrecompileContext

    have = PrecompileContext._backend_artifacts_by_key
    entries = PrecompileContext._dynamo_cache_entries
    return {b for sid in source_ids if sid in entries for c in entries[sid].codes if not c.bypassed
            for b in c.backend_ids if b not in have}


def save(source_ids: set[str], wait: float | None = None) -> bool:
    """Write the complete packages in ``source_ids`` through the cache's ``write`` (under Dynamo's
    compile lock, so no frame is being traced meanwhile). Others are left as they are. ``wait``:
    how long to wait for that lock (None: as long as it takes); False when it was not had."""
    from torch._dynamo.convert_frame import compile_lock
    from torch._dynamo.precompile_context import PrecompileContext

    if not compile_lock.acquire(timeout=-1 if wait is None else wait):
        return False
    try:
        entries = PrecompileContext._dynamo_cache_entries
        held = {k: v for k, v in entries.items() if k not in source_ids}
        try:
            for k in held:
                del entries[k]
            PrecompileContext.save_to_dynamo_cache()
        finally:
            entries.update(held)
    finally:
        compile_lock.release()
    return True


def compiling() -> bool:
    """Whether Dynamo is compiling a frame, or AOTAutograd lowering a training graph's backward at
    its first backward (outside Dynamo's lock), now (on any thread)."""
    from torch._dynamo.callback import callback_handler
    from torch._dynamo.convert_frame import compile_lock

    if compile_lock.acquire(blocking=False):
        compile_lock.release()
        # both run inside the compile callbacks' bracket, which counts those in progress
        return int(getattr(callback_handler, "_CompilationCallbackHandler__pending_callbacks_counter", 0)) > 0
    return True


def backward_with_forward() -> bool:
    """Whether AOTAutograd lowers a training graph's backward with its forward
    (``force_non_lazy_backward_lowering``: compiled frames turn it on in a job of ranks), so that
    the graph's AOTAutograd cache entry is written when its compile ends, not at its first
    backward."""
    from torch._functorch import config

    return bool(config.force_non_lazy_backward_lowering)


def lower_backward_with_forward() -> None:
    """From now on in this process, AOTAutograd lowers a training graph's backward with its
    forward (the graphs compiled so far keep theirs lazy). Restored when ``frames_stored`` exits."""
    from torch._functorch import config

    config.force_non_lazy_backward_lowering = True


def torch_cache_counters() -> dict[str, int]:
    """torch's own counters of its FX-graph and AOTAutograd caches in this process (hits from its
    local dir and from raycompile's tiers alike, which it asks after its dir), since its start."""
    from torch._dynamo.utils import counters

    return {"torch_fxgraph_hits": int(counters["inductor"]["fxgraph_cache_hit"]),
            "torch_fxgraph_misses": int(counters["inductor"]["fxgraph_cache_miss"]),
            "torch_autograd_hits": int(counters["aot_autograd"]["autograd_cache_hit"]),
            "torch_autograd_misses": int(counters["aot_autograd"]["autograd_cache_miss"])}


def traced_frames() -> int:
    """Graphs Dynamo traced in this process (its own counter, ``unique_graphs``): a frame loaded
    from an entry, or served from another process's compile, traces none."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


@contextlib.contextmanager
def resettable() -> Iterator[None]:
    """While inside, every code object an entry installs compiled code on (or marks to skip) is
    one ``torch._dynamo.reset()`` clears, as it clears the codes Dynamo traced.

    torch's ``CompilePackage.install`` puts loaded frames straight on the code objects, past the
    tracker that ``reset`` walks (``convert_frame.input_codes``): a frame loaded once kept
    answering every later ``torch.compile`` of that function, another backend's or other options'
    included, even after ``reset``, even with raycompile off."""
    import torch._C._dynamo.eval_frame as eval_frame
    import torch._dynamo.eval_frame as dynamo_eval_frame
    from torch._dynamo import convert_frame

    stock_load, stock_skip = eval_frame._load_precompile_entry, dynamo_eval_frame.skip_code

    def load(target_code: Any, guard_manager: Any, dynamo_code: Any) -> Any:
        convert_frame.input_codes.add(target_code)
        return stock_load(target_code, guard_manager, dynamo_code)

    def skip(code: Any, *args: Any, **kwargs: Any) -> Any:
        convert_frame.input_codes.add(code)
        return stock_skip(code, *args, **kwargs)

    eval_frame._load_precompile_entry, dynamo_eval_frame.skip_code = load, skip
    try:
        yield
    finally:
        eval_frame._load_precompile_entry, dynamo_eval_frame.skip_code = stock_load, stock_skip


@contextlib.contextmanager
def sources_recorded_once() -> Iterator[None]:
    """While inside, each code object Dynamo inlines has its source recorded once per process.

    torch records the source of every function a frame inlines (``SourceInfo.add_code``: its
    lines found with ``inspect``, checked against its module's, hashed; the module's whole text
    kept), and does it again each time the function is inlined: once per layer of a model, each
    call reading and tokenizing the file anew. What it records for one code object never changes
    within a process (the module's text is cached by torch for the process already), so the
    first record is reused. A code object whose record fails fails every time, as in stock."""
    from torch._dynamo import package

    stock = package.SourceInfo.__dict__["add_code"]
    known: dict[int, tuple[Any, Any]] = {}  # id(code) -> (code, its record or None); the code kept alive

    def add_code(self: Any, code: Any) -> None:
        got = known.get(id(code))
        if got is None or got[0] is not code:
            once = package.SourceInfo(inlined_sources=set())
            stock(once, code)
            got = known[id(code)] = (code, next(iter(once.inlined_sources), None))
        if got[1] is not None:
            self.inlined_sources.add(got[1])

    package.SourceInfo.add_code = add_code
    try:
        yield
    finally:
        package.SourceInfo.add_code = stock


class _LoadedOnce:
    """A backend of an entry in flight whose ``after_deserialization`` (loading its output modules
    and their kernels) runs once per package: each later publish of the same flight holds it again,
    and is installed whole."""

    def __init__(self, backend: Any, loaded: dict[str, Any], backend_id: str) -> None:
        self._backend, self._loaded, self._id = backend, loaded, backend_id

    def after_deserialization(self) -> Any:
        if self._id not in self._loaded:
            self._loaded[self._id] = self._backend.after_deserialization()
        return self._loaded[self._id]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)


_loaded_backends: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def install_into(package: Any, entry: Any) -> list[tuple[Any, Any, Any]]:
    """Install ``entry`` (checked by ``loads``) into ``package``, the live package of a
    ``torch.compile`` whose frames another process is compiling (single flight), in place of what
    it held: torch's own initialize and install, the package marked fresh first; a backend that an
    earlier install into ``package`` loaded is not loaded again (``_LoadedOnce``: a backend id names
    one compiled graph of the owner's). Returns what was installed, frame by frame: (the frame's
    code object, its guard manager, its compiled code)."""
    import torch._C._dynamo.eval_frame as eval_frame
    import torch._dynamo.eval_frame as dynamo_eval_frame

    stock = eval_frame._load_precompile_entry
    stock_skip = dynamo_eval_frame.skip_code
    installed: list[tuple[Any, Any, Any]] = []

    def capture(target_code: Any, guard_manager: Any, dynamo_code: Any) -> Any:
        installed.append((target_code, guard_manager, dynamo_code))
        return stock(target_code, guard_manager, dynamo_code)

    eval_frame._load_precompile_entry = capture
    # torch marks a frame with no compiled code as one never to compile (a trivial frame, in a
    # finished entry); in frames still in flight it may be one not compiled yet (a resume function
    # the owner has not reached): it must come back to Dynamo, to be served once it is (or skipped:
    # ``SKIP``, where the owner says it converted it)
    dynamo_eval_frame.skip_code = lambda code, *a, **k: None
    # torch's install first removes the globals the last install added (the resume functions and
    # backends that the frames running now call next). It lists a name once per frame that added
    # it (two frames of one module importing torch both add ``__import_torch``) and removes it as
    # often: the second removal raises KeyError halfway. So each name is listed once; and one
    # that fails halfway all the same would leave them removed: those not added again are put back.
    added = getattr(package, "_installed_globals", {})
    for names in added.values():
        names[:] = list(dict.fromkeys(names))
    before = {module: {name: module.__dict__[name] for name in names if name in module.__dict__}
              for module, names in added.items()}
    try:
        fn = package._innermost_fn
        package._initialized = False
        package.initialize(fn, entry.dynamo, ignore_inlined_sources=False)
        loaded = _loaded_backends.setdefault(package, {})
        package.install({bid: _LoadedOnce(backend, loaded, bid) for bid, backend in entry.backends.items()})
    except BaseException:
        for module, values in before.items():
            for name, value in values.items():
                module.__dict__.setdefault(name, value)
        raise
    finally:
        eval_frame._load_precompile_entry = stock
        dynamo_eval_frame.skip_code = stock_skip
    return installed


def passes(guard_manager: Any, f_locals: Any) -> bool:
    """Whether a frame's locals pass a loaded guard manager."""
    return bool(guard_manager.check(f_locals))


def served(dynamo_code: Any, guard_manager: Any, compile_id: Any) -> Any:
    """What Dynamo's frame conversion returns for a frame run with ``dynamo_code`` under
    ``guard_manager`` (compiled by another process), as if it had compiled it."""
    from torch._dynamo.types import GuardedCode, wrap_guarded_code

    return wrap_guarded_code(GuardedCode(dynamo_code, guard_manager, compile_id))
