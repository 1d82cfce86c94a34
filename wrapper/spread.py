"""A max-autotune kernel's configs compiled at once by the node's compile workers.

Under max-autotune a pointwise or reduction kernel is compiled for several configs (a reduction
for eight or more), which stock compiles one after another in one compile worker, and a module
whose kernels are otherwise compiled waits for the slowest of those jobs. Here the kernel's job
goes to the node's compile workers as in stock, and each of its other configs goes beside it, a
job of its own (``kernels.triton_compile.run_triton_config``), so the configs compile at once on
several workers. The kernel's job compiles each config under a lock of the config's own in a
directory of this session (``TritonJob.config_locks``): a config another worker is compiling is
waited for, then found in Triton's cache, and one not begun yet is compiled by the job itself
(its job then finds the job's ``done`` mark, or the binary in Triton's cache). The binaries, the
job's result and so the kernel are the ones the job alone makes.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import tempfile
import threading
from typing import Any

from ..kernels import TritonJob
from ..kernels.triton_compile import run_triton_config
from ..observe.stats import Stats
from . import compat

log = logging.getLogger("raycompile.compile")


class ConfigSpread:
    """``prepare(job)`` before the job is submitted to the node's compile workers, ``send(job,
    pool)`` after: its other configs, each a job of its own. ``close()`` removes the locks."""

    def __init__(self, stats: Stats, enabled: bool = True) -> None:
        self.stats = stats
        self.enabled = enabled
        self._dir: str | None = None
        self._lock = threading.Lock()
        self._configs: dict[str, int] = {}  # a prepared job's key -> its kernel's configs

    def prepare(self, job: TritonJob) -> TritonJob:
        """``job`` with its configs' locks where its kernel's configs are to be spread, else ``job``."""
        if not self.enabled or job.config_locks or not compat.spreads(job.source):
            return job
        n = compat.config_count(job.kernel_name, job.source)
        if n < 2:
            return job
        locks = self._locks()
        if locks is None:
            return job
        with self._lock:
            self._configs[job.key] = n
        return dataclasses.replace(job, config_locks=locks)

    def send(self, job: TritonJob, pool: Any) -> int:
        """Send each config of ``job``'s kernel after its first to ``pool`` (the job compiles its
        first at once); how many were sent."""
        with self._lock:
            n = self._configs.pop(job.key, 0)
        if not job.config_locks or n < 2:
            return 0
        sent = 0
        for index in range(1, n):
            try:
                pool.submit(run_triton_config, job, index, compat.TOOLCHAIN)
            except RuntimeError:  # the pool is shut down: the job compiles them itself
                break
            sent += 1
        if sent:
            self.stats.add(configs_spread=sent)
        return sent

    def _locks(self) -> str | None:
        with self._lock:
            if self._dir is None:
                try:
                    self._dir = tempfile.mkdtemp(prefix="raycompile-configs-")
                except OSError as e:
                    log.debug("raycompile: no directory for the configs' locks, configs not spread: %s", e)
                    self.enabled = False
                    return None
            return self._dir

    def close(self) -> None:
        with self._lock:
            path, self._dir = self._dir, None
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)
