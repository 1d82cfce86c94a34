"""A progress bar while compiles are in flight: done/total, failures, ETA (rich).

Quiet unless stdout is a terminal and this is not a Ray job (Ray Data's users complain of bar
spam in job logs: ray#44267, #46644); ``progress=True`` (RAYCOMPILE_PROGRESS=1) forces it on.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

from .stats import Outcome


def wanted(setting: bool | None) -> bool:
    """Whether to show progress: the setting when given, else only on a terminal outside Ray jobs."""
    if setting is not None:
        return setting
    in_ray_job = any(v in os.environ for v in ("RAY_JOB_SUBMISSION_ID", "RAY_JOB_ID"))
    return sys.stdout.isatty() and not in_ray_job


class Progress:
    """Counts jobs in flight and draws one bar while any are; the bar disappears when all are done."""

    def __init__(self, force_terminal: bool = False) -> None:
        self._lock = threading.Lock()
        self._force_terminal = force_terminal
        self._bar: Any = None
        self._task: Any = None
        self.total = self.done = self.failed = 0

    def submitted(self) -> None:
        with self._lock:
            if self._bar is None:
                from rich.console import Console
                from rich.progress import (
                    BarColumn,
                    MofNCompleteColumn,
                    TextColumn,
                    TimeElapsedColumn,
                    TimeRemainingColumn,
                )

                self.total = self.done = self.failed = 0
                console = Console(file=sys.stdout, force_terminal=self._force_terminal or None)
                self._bar = _RichProgress(
                    TextColumn("raycompile: compiling kernels"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[failed]} failed"), TimeElapsedColumn(), TextColumn("ETA"),
                    TimeRemainingColumn(), console=console, transient=True,
                )
                self._task = self._bar.add_task("compile", total=0, failed=0)
                self._bar.start()
            self.total += 1
            self._bar.update(self._task, total=self.total)

    def finished(self, result: Outcome) -> None:
        with self._lock:
            if self._bar is None:
                return
            self.done += 1
            self.failed += int(result.failed)
            self._bar.update(self._task, completed=self.done, failed=self.failed)
            if self.done >= self.total:
                self._stop()

    def _stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def close(self) -> None:
        with self._lock:
            self._stop()


def _RichProgress(*args: Any, **kwargs: Any) -> Any:  # noqa: N802 - a deferred import of rich's class
    from rich.progress import Progress as RichProgress

    return RichProgress(*args, **kwargs)
