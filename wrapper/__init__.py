"""Inductor integration: the hooks that route kernel compiles to the farm, the output module's
codegen (codegen.py) and the runtime such modules import (runtime.py), and the compat module
that holds every touch point with Inductor's private API."""

from __future__ import annotations

from typing import Any

__all__ = ["Hooks", "Router", "stock_pools"]


def __getattr__(name: str) -> Any:
    # lazy: kernels/ imports wrapper.compat, and hooks imports kernels/
    if name in __all__:
        from . import hooks

        return getattr(hooks, name)
    raise AttributeError(name)
