"""Batch compiles of kernel sources found on disk (``raycompile compile-kernels``): the jobs are
made, keyed and retargeted by the caller (``wrapper.job_keys.triton_job``), and run here."""

from __future__ import annotations

import time
from concurrent.futures import wait
from dataclasses import dataclass, field

from ..cache import keys, publish
from ..kernels import Built, Failed, Result, TritonJob
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


def compile_kernels(farm: Farm, jobs: list[TritonJob], out_dir: str | None = None) -> BatchReport:
    """Compile every job on the farm. With ``out_dir``, write each kernel's Triton cache group
    there: a directory a GPU node can use as its TRITON_CACHE_DIR."""
    start = time.perf_counter()
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
                report.files_written += publish(keys.triton_paths(result.files, out_dir))
        else:
            report.failed.append(result)
    report.compiled += len(report.failed)
    report.seconds = time.perf_counter() - start
    return report
