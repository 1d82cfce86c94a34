"""Seam family "guards": a compiled frame's guards, kept whole in the process that compiles and
re-created against the loading process's own objects in every process that loads the entry.

Stock ``caching_precompile`` drops every guard on an object's identity (ID_MATCH, CLASS_MATCH,
MODULE_MATCH, FUNCTION_MATCH, CLOSURE_MATCH, NN_MODULE, DICT_VERSION), in the process that
compiles too: a rebound global function, a type passed as an argument, a replaced ``__call__`` or
closure cell is then never noticed (torch's own docs warn of it, guards.py). Here none is dropped:

- the compiling process builds its guards exactly as stock does without the cache;
- the entry holds every guard. torch rebuilds them at load against the scopes it pickled, and an
  object that pickles by reference (a module, a class, a function, an enum member, a code object)
  is then the loading process's own: each function and code object is pickled with a fingerprint of
  its code and resolved by name, so an identity guard binds to the object of the same name only if
  it is the same code (``_function``, ``_code``); a rebound or edited one binds to a sentinel that no
  runtime value is, and the frame is traced, as stock traces it in a new process;
- an object that pickles by value (an instance) is a copy in the loading process: its identity
  guard never holds there, so the frame would be loaded and then traced every time. Such a frame is
  not saved (``local_identities`` names them; ``wrapper/frames.py`` counts it with its reason);
- everything the rebuilt guards name is kept alive with the guard manager, so no identity guard can
  match an object that came later at a freed address.

WEAKREF_ALIVE stays unsupported (a frame with one is not saved, as in stock). Checked on torch
2.13.0.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import re
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

from ._base import Seams
from .guard_refs import (
    _SLOT_DESCRIPTORS,
    _TYPES_BY_NAME,
    _class_attr,
    _code,
    _function,
    _function_at,
    _module_of,
    _resolves,
    by_reference,
    code_fingerprint,
)

CHECKED_ON = ("2.11.0", "2.13.0")

log = logging.getLogger("raycompile.frames")

SEAMS: Seams = {
    "guards.GuardsStatePickler": ("torch._dynamo.guards", "GuardsStatePickler"),
    "guards.GuardsStatePickler.reducer_override": ("torch._dynamo.guards", "GuardsStatePickler.reducer_override"),
    "guards.CheckFunctionManager.UNSUPPORTED_SERIALIZATION_GUARD_TYPES": (
        "torch._dynamo.guards", "CheckFunctionManager.UNSUPPORTED_SERIALIZATION_GUARD_TYPES"),
    "guards.GuardBuilder.get": ("torch._dynamo.guards", "GuardBuilder.get"),
    "package.load_guard_manager": ("torch._dynamo.package", "load_guard_manager"),
    "package.SerializedCode": ("torch._dynamo.package", "SerializedCode"),
    "guards.pickle_guards_state": ("torch._dynamo.guards", "pickle_guards_state"),
    "guards.GuardManagerWrapper": ("torch._dynamo.guards", "GuardManagerWrapper"),
    "guards.CheckFunctionManager": ("torch._dynamo.guards", "CheckFunctionManager"),
    "guards.exc.PackageError": ("torch._dynamo.exc", "PackageError"),
    "ops.OpOverload": ("torch._ops", "OpOverload"),
    "ops.OpOverloadPacket": ("torch._ops", "OpOverloadPacket"),
    "ops._OpNamespace": ("torch._ops", "_OpNamespace"),
    "guards.GuardBuilder.src_get_value_cache": ("torch._dynamo.guards", "GuardBuilder.__init__"),
}

# guards on an object's identity: torch will not save them; here they travel (see above)
IDENTITY = frozenset({"ID_MATCH", "CLASS_MATCH", "MODULE_MATCH", "FUNCTION_MATCH", "CLOSURE_MATCH", "NN_MODULE",
                      "DICT_VERSION"})
STILL_UNSUPPORTED = ("WEAKREF_ALIVE",)


# -- the seam -------------------------------------------------------------------------------------------


def local_identities(builder: Any, guards: Any) -> list[str]:
    """The identity guards among ``guards`` whose object would be a copy in another process, as
    "GUARD on SOURCE (TYPE)": a frame with one is traced in every process that loads it."""
    out = []
    for guard in guards:
        kinds = {guard.create_fn_name(), *(guard.guard_types or ())}
        if not kinds & IDENTITY:
            continue
        try:
            value = builder.get(guard)
        except Exception:  # noqa: BLE001 - a value torch cannot read back: not portable
            out.append(f"{guard.create_fn_name()} on {guard.name}")
            continue
        if "CLOSURE_MATCH" in kinds and type(value) is types.FunctionType:
            value = value.__code__  # a function's closure guard is an identity guard on its code
        if "DICT_VERSION" in kinds or not by_reference(value):
            out.append(f"{guard.create_fn_name()} on {guard.name} ({type(value).__qualname__})")
    return out


_BUILTIN_ITEM = re.compile(r"^G\['([^']+)'\]\['([^']+)'\]$")


def keep_builtins(manager: Any, guards: Any, output_graph: Any) -> None:
    """torch saves the items of a frame's builtins dict that its BUILTIN_MATCH guards read; the
    identity guards on its items (``G['__builtins_dict___9']['all']``, once dropped) read theirs
    too: keep those, or the guards do not build where the entry loads."""
    name = getattr(output_graph, "name_of_builtins_dict_key_in_fglobals", None)
    if not name:
        return
    for guard in guards:
        m = _BUILTIN_ITEM.match(guard.name or "")
        if m and m.group(1) == name:
            manager.used_builtin_vars.add(m.group(2))


# a loading builder's compile-time values (below), while torch rebuilds that frame's guards
_LOADING: contextvars.ContextVar[dict[Any, Any] | None] = contextvars.ContextVar("raycompile_loading", default=None)


# guards whose expectation is read off their source's value when torch builds them
_STASHED = IDENTITY | {"CONSTANT_MATCH", "EQUALS_MATCH", "BOOL_MATCH", "NONE_MATCH", "TYPE_MATCH"}
_EXPECT_VALUE = IDENTITY | {"CONSTANT_MATCH", "EQUALS_MATCH", "BOOL_MATCH", "NONE_MATCH"}
_PLAIN = (type(None), bool, int, float, complex, str, bytes)  # pickle as themselves, always


def compile_time_values(builder: Any, guards: Any) -> dict[Any, Any]:
    """What each guard's source evaluated to when the frame was compiled ({source: value}). torch
    rebuilds a loaded frame's guards by evaluating their sources again, and a path through an
    object that is the loading process's own (a class, a module) then reads that object as it is at
    load, not as it was compiled: a guard on ``type(G['op']).__call__.__code__`` would expect
    whatever ``__call__`` is now and pass for it. The loading builder reads these instead
    (``identities_saved``), so every guard expects the compile-time value: by reference (the
    loading process's equal object, else a sentinel) or a copy.

    Left out: tensors and modules (the pickled scope holds them as they were compiled); a value
    that does not pickle, where its guard reads only its type, or where it is an attribute of a
    class or module (whose identity its own guard holds: ``ABC._abc_impl``). Any other guard whose
    expected value does not pickle raises PackageError: that frame is not saved."""
    import io

    import torch
    from torch._dynamo.exc import PackageError
    from torch._dynamo.guards import GuardsStatePickler

    out: dict[Any, Any] = {}
    tried: dict[int, Exception | None] = {}  # id of a value -> what its trial pickle raised (each value once)
    for guard in guards:
        kinds = {guard.create_fn_name(), *(guard.guard_types or ())}
        if not kinds & _STASHED:
            continue
        source = guard.originating_source
        try:
            value = builder.get(source)  # the build's own cache: what it read at compile time
        except Exception:  # noqa: BLE001 - a value torch does not read back (hasattr guards): none to keep
            continue
        if isinstance(value, (torch.Tensor, torch.nn.Module)):
            continue
        if type(value) in _PLAIN:
            out[source] = value
            continue
        if id(value) not in tried:  # the values live in the builder's cache meanwhile: ids stay theirs
            try:
                buffer = io.BytesIO()
                GuardsStatePickler(builder.guard_tree_values, {}, {}, buffer).dump(value)
                tried[id(value)] = _lossy(value, buffer.getvalue())
            except Exception as e:  # noqa: BLE001 - whatever pickle raises
                tried[id(value)] = e
        if (e := tried[id(value)]) is not None:
            base = getattr(source, "base", None)
            owner = _value_or_none(builder, base) if base is not None else None
            if kinds & _EXPECT_VALUE and not isinstance(owner, (type, types.ModuleType)):
                raise PackageError(f"the value its guard on {guard.name} expects does not pickle "
                                   f"({type(e).__name__}: {e})") from e
            continue
        out[source] = value
    return out


def _lossy(value: Any, pickled: bytes) -> Exception | None:
    """Why a container of a subclass (a dict, list or set type of a library's) does not come back
    as it was from ``pickled``, else None. Unpickling fills a dict through its ``__setitem__``:
    transformers' ``_CanRecordRegistry`` stores ``str(key.__class__)`` there, so every key comes
    back as ``"<class 'str'>"`` and a guard on its second key finds none."""
    import pickle

    if type(value) in (dict, list, set) or not isinstance(value, (dict, list, set)):
        return None
    try:
        copy = pickle.loads(pickled)
    except Exception as e:  # noqa: BLE001 - whatever unpickling raises
        return e
    same = list(dict.items(copy)) == list(dict.items(value)) if isinstance(value, dict) else copy == value
    return None if type(copy) is type(value) and same else ValueError(
        f"a {type(value).__qualname__} does not come back from pickle as it was")


def _value_or_none(builder: Any, source: Any) -> Any:
    try:
        return builder.get(source)
    except Exception:  # noqa: BLE001
        return None


def never(reason: str) -> Any:
    """A guard manager that no call passes: a loaded frame whose guards do not build here is
    installed with it, so every call traces as stock would (torch's install has no way back)."""
    from torch._dynamo.guards import GuardManagerWrapper

    manager = GuardManagerWrapper()
    manager.root.add_lambda_guard(lambda _: False, [reason], None)
    return manager


@contextlib.contextmanager
def identities_saved(unbuilt: Callable[[str], None]) -> Iterator[None]:
    """While inside, identity guards are serialized (not refused) and pickled so that they are
    re-created against the loading process's objects; rebuilt guard managers keep what they name
    alive; a loaded frame whose guards do not build here never passes them (``unbuilt`` is told
    why). Restored exactly on exit."""
    from torch._dynamo import guards, package

    pickler = guards.GuardsStatePickler
    stock_reduce = pickler.__dict__["reducer_override"]
    stock_unsupported = guards.CheckFunctionManager.UNSUPPORTED_SERIALIZATION_GUARD_TYPES
    stock_load = package.load_guard_manager
    stock_pickle_state = guards.pickle_guards_state
    stock_get = guards.GuardBuilder.__dict__["get"]
    import torch

    torch_ops, op_namespace = torch.ops, torch._ops._OpNamespace

    def pickle_guards_state(state: Any, builder: Any) -> bytes:
        state._raycompile_values = compile_time_values(builder, state.output_graph._guards)
        return stock_pickle_state(state, builder)

    def get(self: Any, guard_or_source: Any, closure_vars: Any = None) -> Any:
        values = _LOADING.get()
        if values and not getattr(self, "_raycompile_filled", False):
            self.src_get_value_cache.update(values)
            self._raycompile_filled = True
        return stock_get(self, guard_or_source, closure_vars)

    def reducer_override(self: Any, obj: Any) -> Any:
        if obj is _function or obj is _code or obj is _function_at or obj is _class_attr:  # by reference
            return NotImplemented
        # descriptors a guard's source passes through (``G['Act'].__dict__['apply']``, ``type(x).__init__``)
        if isinstance(obj, (staticmethod, classmethod)):
            return type(obj), (obj.__func__,)
        if isinstance(obj, property):
            return property, (obj.fget, obj.fset, obj.fdel, obj.__doc__)
        if isinstance(obj, _SLOT_DESCRIPTORS):
            return _class_attr, (obj.__objclass__, obj.__name__)
        if isinstance(obj, types.MethodWrapperType):
            return getattr, (obj.__self__, obj.__name__)
        if isinstance(obj, op_namespace):  # torch.ops.<library>: a module importlib cannot import
            return getattr, (torch_ops, obj.name)
        if isinstance(obj, type) and obj in _TYPES_BY_NAME:  # types.FunctionType and kin
            return getattr, (types, _TYPES_BY_NAME[obj])
        if isinstance(obj, types.CodeType) and getattr(obj, "co_qualname", None):
            module = _module_of(obj)
            if module is not None:
                from torch._dynamo.package import SerializedCode

                return _code, (module, obj.co_qualname, obj.co_firstlineno, code_fingerprint(obj),
                               SerializedCode.from_code_object(obj))
        if (isinstance(obj, types.FunctionType) and id(obj) not in self.empty_values
                and id(obj) not in self.missing_values and "<locals>" not in obj.__qualname__
                and _resolves(obj)):
            return _function, (obj.__module__, obj.__qualname__, code_fingerprint(obj.__code__))
        if (isinstance(obj, types.FunctionType) and id(obj) not in self.empty_values
                and id(obj) not in self.missing_values and getattr(obj.__code__, "co_qualname", None)
                and obj.__module__ in sys.modules):
            code = obj.__code__
            return _function_at, (obj.__module__, code.co_qualname, code.co_firstlineno, code_fingerprint(code),
                                  code, obj.__defaults__, obj.__closure__)
        return stock_reduce(self, obj)

    def load_guard_manager(guards_state: Any, target_code: Any, runtime_global_scope: Any) -> Any:
        token = _LOADING.set(getattr(guards_state, "_raycompile_values", None))
        try:
            manager = stock_load(guards_state, target_code, runtime_global_scope)
        except Exception as e:  # noqa: BLE001 - torch's install would raise out of torch.compile: trace instead
            why = f"its guards do not build here: {type(e).__name__}: {str(e)[:200]}"
            log.debug("raycompile: %s", why, exc_info=True)
            unbuilt(why)
            manager = never(f"raycompile: {why}")
        finally:
            _LOADING.reset(token)
        # what its identity guards name (copies, rebuilt code objects) lives as long as they do
        manager._raycompile_scopes = guards_state
        return manager

    pickler.reducer_override = reducer_override
    guards.CheckFunctionManager.UNSUPPORTED_SERIALIZATION_GUARD_TYPES = STILL_UNSUPPORTED
    package.load_guard_manager = load_guard_manager
    guards.pickle_guards_state = pickle_guards_state
    guards.GuardBuilder.get = get
    try:
        yield
    finally:
        guards.pickle_guards_state = stock_pickle_state
        guards.GuardBuilder.get = stock_get
        pickler.reducer_override = stock_reduce
        guards.CheckFunctionManager.UNSUPPORTED_SERIALIZATION_GUARD_TYPES = stock_unsupported
        package.load_guard_manager = stock_load
