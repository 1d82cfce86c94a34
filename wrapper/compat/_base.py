"""What every seam family of the adapter shares: the error a moved seam raises, and how a seam
is resolved for ``check()``."""

from __future__ import annotations

import importlib
from typing import Any

# name -> (module, attribute path): an Inductor or Triton internal one family reaches
Seams = dict[str, tuple[str, str]]


class SeamMissing(RuntimeError):
    """The installed torch lacks an Inductor internal that raycompile relies on."""


def resolve(module: str, path: str) -> Any:
    obj: Any = importlib.import_module(module)
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj
