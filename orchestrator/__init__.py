"""Everything that talks to Ray: the farm (jobs as tasks), its stats."""

from .farm import Farm
from .stats import Stats

__all__ = ["Farm", "Stats"]
