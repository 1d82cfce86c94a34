"""Where a code object torch cannot name lives (no torch internals here): ``resolve_code`` serves
``dynamo``'s ``code_context``, which records each code a saved frame runs by module and path."""

from __future__ import annotations

import inspect
import sys
import types
from typing import Any

# id(code) -> (code, its path): a code found is looked up once per process
_RESOLVED: dict[int, tuple[Any, tuple[str, str, str]]] = {}
# co_filename -> module name, for the modules loaded so far (rebuilt when a file is not in it)
_MODULES_BY_FILE: dict[str, str] = {}


def resolve_code(code: Any) -> tuple[str, str, str] | None:
    """(module, qualified name, path to the code from it) for a code object torch cannot name
    (``_get_code_source`` knows module-level functions, methods, closures and nested functions):
    a property's getter (``Model.loss_function`` -> ``fget.__code__``) or a function whose code has
    no source file (a dataclass's generated ``__init__``), found through the function that holds
    it. The path is checked to lead back to ``code`` in this process. None if there is none.

    First by the code's own file and qualified name (a getter, a static method: no scan); then,
    where those name no reachable function (a generated ``__init__``: file ``<string>``), through
    the functions that refer to the code (``gc.get_referrers``: a scan of every object, a tenth of
    a second in a process with torch loaded). Each path found is kept for the process."""
    kept = _RESOLVED.get(id(code))
    if kept is not None and kept[0] is code:
        return kept[1]
    found = _by_name(code)
    if found is None:
        found = _by_referrers(code)
    if found is not None:  # none found is asked again: the function may be reachable later
        _RESOLVED[id(code)] = (code, found)
    return found


def _checked(fn: Any, code: Any) -> tuple[str, str, str] | None:
    """The path to ``fn`` (a function whose code is ``code``) from its module, where following
    its ``__module__`` and ``__qualname__`` leads back to it."""
    if not isinstance(fn, types.FunctionType) or fn.__code__ is not code or "<locals>" in fn.__qualname__:
        return None
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


def _module_of(filename: str) -> str | None:
    name = _MODULES_BY_FILE.get(filename)
    if name is None:
        for module_name, module in list(sys.modules.items()):
            path = getattr(module, "__file__", None)
            if isinstance(path, str):
                _MODULES_BY_FILE.setdefault(path, module_name)
        name = _MODULES_BY_FILE.get(filename)
    return name


def _by_name(code: Any) -> tuple[str, str, str] | None:
    qualname = getattr(code, "co_qualname", "")  # Python 3.11+
    if not qualname or "<locals>" in qualname or code.co_filename.startswith("<"):
        return None
    module_name = _module_of(code.co_filename)
    if module_name is None:
        return None
    obj: Any = sys.modules.get(module_name)
    for part in qualname.split("."):
        obj = inspect.getattr_static(obj, part, None) if obj is not None else None
    if isinstance(obj, property):
        obj = obj.fget
    elif isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    return _checked(obj, code)


def _by_referrers(code: Any) -> tuple[str, str, str] | None:
    import gc

    for fn in gc.get_referrers(code):
        found = _checked(fn, code)
        if found is not None:
            return found
    return None
