"""Everything that talks to Ray: the farm (jobs as tasks), its GPU actors, the cluster's services.
Its counters, progress bar and reports are in the base layer (``raycompile.observe.stats``,
``raycompile.observe.progress``, ``raycompile.observe.report``), where every layer may import them."""

from .farm import Farm

__all__ = ["Farm"]
