"""Inductor integration: the hooks that route kernel compiles to the farm, and the compat
module that holds every touch point with Inductor's private API."""

from .hooks import Hooks, Router, stock_pools

__all__ = ["Hooks", "Router", "stock_pools"]
