"""How the objects a compiled frame's guards name travel between processes (``guards.py``): by name,
with a fingerprint of their code, resolved in the loading process to its own object of that name
when it is the same code, else to a sentinel no runtime value is (``STALE``), or rebuilt where
nothing else can be found (a decorator's wrapped function, a closure). The functions here are what
the pickled guard state names: its unpicklers, and ``by_reference``, whether an object comes back
as the loading process's own. Checked on torch 2.11.0 (its guard pickler) and 2.13.0."""

from __future__ import annotations

import builtins
import enum
import hashlib
import importlib
import inspect
import re
import sys
import types
from typing import Any


class _Stale:
    """What a function or code object of an entry resolves to where the loading process's object
    of that name is another one (rebound, edited): no runtime value is ever this object."""

    def __init__(self, what: str) -> None:
        self.what = what

    def __repr__(self) -> str:
        return f"<raycompile: {self.what} differs in this process>"


STALE = _Stale("a function")  # module level: alive for good, so its address is never reused


# -- fingerprints ------------------------------------------------------------------------------------


def code_fingerprint(code: types.CodeType) -> str:
    """A code object's content (bytecode, constants, names, signature), the same in every process
    for the same source: not its address, file name or line numbers."""
    h = hashlib.sha256()
    _feed(h, code)
    return h.hexdigest()[:32]


def _feed(h: Any, code: types.CodeType) -> None:
    h.update(code.co_code)
    for part in (code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars):
        h.update(repr(part).encode())
    h.update(repr((code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount, code.co_flags,
                   getattr(code, "co_qualname", code.co_name))).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _feed(h, const)
        else:
            h.update(_const_text(const).encode())


def _const_text(value: Any) -> str:
    if isinstance(value, frozenset):  # its order follows the hash seed
        return "frozenset(" + ",".join(sorted(_const_text(v) for v in value)) + ")"
    if isinstance(value, tuple):
        return "(" + ",".join(_const_text(v) for v in value) + ")"
    return f"{type(value).__name__}:{value!r}"


# -- what the pickled scopes resolve to in the loading process ----------------------------------------


def _function(module: str, qualname: str, fingerprint: str) -> Any:
    """The loading process's function ``module.qualname`` if its code is the one compiled, else STALE."""
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except Exception:  # noqa: BLE001 - gone here: nothing at runtime is the compiled one
        return STALE
    code = getattr(obj, "__code__", None)
    if isinstance(obj, types.FunctionType) and code is not None and code_fingerprint(code) == fingerprint:
        return obj
    return STALE


_SLOT_DESCRIPTORS = (types.WrapperDescriptorType, types.MethodDescriptorType, types.MemberDescriptorType,
                     types.GetSetDescriptorType, types.ClassMethodDescriptorType)


def _class_attr(cls: type, name: str) -> Any:
    """A slot descriptor (``object.__init__``, ``dict.__getitem__``), the class's own."""
    return vars(cls)[name]


def _function_at(module: str, qualname: str, firstlineno: int, fingerprint: str, code: types.CodeType,
                 defaults: Any, closure: Any) -> Any:
    """A function with no name of its own to be found by (a decorator's wrapped function, a closure):
    the loading process's one at that place (through wrappers and closures) if its code is the one
    compiled; else one made from the entry's code, as torch makes nested functions (its identity
    guards fail here, its other guards hold)."""
    found = _find(module, qualname, firstlineno)[0]
    if found is not None and code_fingerprint(found.__code__) == fingerprint:
        return found
    f_globals = importlib.import_module(module).__dict__
    return types.FunctionType(code, f_globals, qualname.rsplit(".", 1)[-1], defaults, closure)


def _code(module: str, qualname: str, firstlineno: int, fingerprint: str, serialized: Any) -> Any:
    """The loading process's own code object of that name (the one its functions run, so an
    identity guard on ``fn.__code__`` holds), if it is the code compiled; else the pickled code,
    rebuilt (a new object no function runs: such a guard fails and the frame is traced)."""
    found = _find(module, qualname, firstlineno)[1]
    if found is not None and code_fingerprint(found) == fingerprint:
        return found
    from torch._dynamo.package import SerializedCode

    return SerializedCode.to_code_object(serialized)


def _find(module: str, qualname: str, firstlineno: int) -> tuple[types.FunctionType | None, types.CodeType | None]:
    """Walk ``qualname`` from ``module`` (decorators' wrappers, ``<locals>``, closures, properties,
    static and class methods) to (the function whose code has that qualified name and first line,
    if one is reachable; that code object)."""
    try:
        obj: Any = importlib.import_module(module)
    except Exception:  # noqa: BLE001 - a module that does not import here
        return None, None
    for part in qualname.split("."):
        if part == "<locals>":
            break
        nxt = inspect.getattr_static(obj, part, None)
        if nxt is None:
            break
        obj = nxt
    pending, seen, code = [obj], set(), None
    while pending and len(seen) < 64:
        obj = pending.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, (staticmethod, classmethod)):
            pending.append(obj.__func__)
        elif isinstance(obj, property):
            pending.extend(f for f in (obj.fget, obj.fset, obj.fdel) if f is not None)
        elif isinstance(obj, types.FunctionType):
            if _code_in(obj.__code__, qualname, firstlineno) is obj.__code__:
                return obj, obj.__code__
            code = code or _code_in(obj.__code__, qualname, firstlineno)
            pending.extend(c.cell_contents for c in (obj.__closure__ or ()) if _filled(c))
            wrapped = getattr(obj, "__wrapped__", None)
            if wrapped is not None:
                pending.append(wrapped)
        elif isinstance(obj, type):
            pending.extend(vars(obj).values())
    if code is None and "<locals>" in qualname:
        return _held_by_instance(module, qualname, firstlineno)
    return None, code


def _held_by_instance(module: str, qualname: str, firstlineno: int) -> tuple[types.FunctionType | None,
                                                                             types.CodeType | None]:
    """A nested function that a module-level instance holds as an attribute, its maker gone
    (``os.environ.encodekey``: ``os._createenviron``'s ``encode``, ``_createenviron`` deleted):
    the function, found among the attributes of the module's instances."""
    mod = sys.modules.get(module)
    for value in list(vars(mod).values()) if mod is not None else ():
        if isinstance(value, (types.ModuleType, type, types.FunctionType)):
            continue
        attrs = getattr(value, "__dict__", None)
        if not isinstance(attrs, dict):
            continue
        for attr in list(attrs.values()):
            if isinstance(attr, types.FunctionType) and _code_in(attr.__code__, qualname, firstlineno) is attr.__code__:
                return attr, attr.__code__
    return None, None


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def _code_in(code: types.CodeType, qualname: str, firstlineno: int) -> types.CodeType | None:
    if getattr(code, "co_qualname", None) == qualname and code.co_firstlineno == firstlineno:
        return code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found = _code_in(const, qualname, firstlineno)
            if found is not None:
                return found
    return None


def _module_of(code: types.CodeType) -> str | None:
    frozen = re.fullmatch(r"<frozen (.+)>", code.co_filename)  # _collections_abc and the like
    if frozen is not None:
        return frozen.group(1) if frozen.group(1) in sys.modules else None
    module = inspect.getmodule(code)
    return module.__name__ if module is not None else None


def by_reference(value: Any) -> bool:
    """Whether ``value`` is the loading process's own object after the entry's scopes unpickle (an
    identity guard on it is re-created there), not a copy."""
    if isinstance(value, (types.ModuleType, type, types.BuiltinFunctionType, enum.Enum)):
        return True
    if isinstance(value, types.CodeType):  # found again by its qualified name (not code made by exec)
        return _code_resolves(value)
    if value is None or value is Ellipsis or value is NotImplemented or isinstance(value, bool):
        return True  # singletons (another int or str unpickles as another object)
    if isinstance(value, types.FunctionType):
        if "<locals>" not in value.__qualname__:
            return _resolves(value)
        code = value.__code__  # found again where _function_at looks for it
        return bool(value.__module__) and _find(value.__module__, code.co_qualname, code.co_firstlineno)[0] is value
    if isinstance(value, types.MethodType):  # a class's or a module's bound method
        return isinstance(value.__self__, (type, types.ModuleType)) and by_reference(value.__func__)
    import torch

    return isinstance(value, (torch._ops.OpOverload, torch._ops.OpOverloadPacket))


def _resolves(fn: types.FunctionType) -> bool:
    obj: Any = importlib.import_module(fn.__module__) if fn.__module__ else None
    try:
        for part in fn.__qualname__.split("."):
            obj = getattr(obj, part)
    except AttributeError:
        return False
    return obj is fn


_RESOLVED: dict[types.CodeType, bool] = {}  # code objects live as long as their functions: few, cached


def _code_resolves(code: types.CodeType) -> bool:
    if code not in _RESOLVED:
        module, qualname = _module_of(code), getattr(code, "co_qualname", None)
        _RESOLVED[code] = bool(module and qualname) and _find(module, qualname, code.co_firstlineno)[1] is code
    return _RESOLVED[code]


# classes of the types module that pickle cannot find by name (builtins has no ``function``)
_TYPES_BY_NAME = {v: k for k, v in vars(types).items()
                  if isinstance(v, type) and getattr(builtins, v.__name__, None) is not v}
