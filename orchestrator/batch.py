"""Batch compiles of kernel sources found on disk (``raycompile compile-kernels``)."""

from __future__ import annotations

import os
import time
from concurrent.futures import wait
from dataclasses import dataclass, field

from ..cache import publish
from ..kernels import Built, Failed, Result, TritonJob, Versions
from ..kernels.sources import KernelSource
from ..kernels.triton_compile import retarget
from .farm import Farm


@dataclass
class BatchReport:
    compiled: int = 0
    failed: list[Failed] = field(default_factory=list)
    seconds: float = 0.0
    workers: int = 0
    files_written: int = 0

    def line(self) -> str:
        return (f"compiled {self.compiled} kernels ({len(self.failed)} failed) in {self.seconds:.1f} s "
                f"on {self.workers} workers")


def compile_kernels(farm: Farm, sources: list[KernelSource], arch: int | None = None,
                    out_dir: str | None = None) -> BatchReport:
    """Compile every source on the farm, for ``arch`` when given, else for the arch recorded in
    each source. With ``out_dir``, write each kernel's Triton cache group there: a directory a GPU
    node can use as its TRITON_CACHE_DIR."""
    start = time.perf_counter()
    versions = Versions.here()
    jobs = [TritonJob(s.name, retarget(s.source, arch) if arch else s.source, versions) for s in sources]
    futures = [farm.submit(job) for job in jobs]
    # each job has its own time-out in the farm; this bound only guards against a lost dispatcher
    wait(futures, timeout=farm.settings.job_timeout_s * max(1, len(jobs)))
    report = BatchReport(workers=farm.workers())
    for job, future in zip(jobs, futures):
        result: Result = (future.result() if future.done()
                          else Failed(job.key, job.label, "no result", kind="timeout"))
        if isinstance(result, Built):
            report.compiled += 1
            if out_dir:
                report.files_written += publish({  # names are triton/GROUP/FILE
                    os.path.join(out_dir, name.removeprefix("triton/")): data
                    for name, data in result.files.items()
                })
        else:
            report.failed.append(result)
    report.compiled += len(report.failed)
    report.seconds = time.perf_counter() - start
    return report
