"""Pure job code: compile Triton and C++ kernels, time benchmark candidates. Nothing here imports
Ray (the orchestrator runs these functions on workers) or the Inductor adapter (what a job calls in
Inductor is the ``Toolchain`` passed in); the layering test keeps it so."""

from __future__ import annotations

from .jobs import Built, CppJob, CppStep, Failed, Job, Result, TritonJob, Versions
from .toolchain import Toolchain


def run_job(job: Job, toolchain: Toolchain) -> Result:
    """Run one job here. Refuses (as a ``Failed`` of kind "version") a job made by a driver with
    another torch or triton: its binary would not match what the driver expects."""
    here = Versions.here()
    if job.versions != here:
        return Failed(
            job.key, job.label,
            f"this worker runs torch {here.torch} / triton {here.triton}, the driver runs "
            f"torch {job.versions.torch} / triton {job.versions.triton}",
            kind="version",
        )
    if isinstance(job, TritonJob):
        from .triton_compile import run_triton_job

        return run_triton_job(job, toolchain)
    from .cpp_compile import run_cpp_job

    return run_cpp_job(job)


__all__ = ["Built", "CppJob", "CppStep", "Failed", "Job", "Result", "Toolchain", "TritonJob", "Versions", "run_job"]
