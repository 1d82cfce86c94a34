"""Everything that talks to Ray: the farm (jobs as tasks), its stats, progress and reports."""

from .farm import Farm
from .progress import Progress
from .progress import wanted as progress_wanted
from .stats import JobRecord, Stats

__all__ = ["Farm", "JobRecord", "Progress", "Stats", "progress_wanted"]
