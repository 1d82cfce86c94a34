"""Build an Inductor C++ kernel library from the command lines the driver resolved.

Inductor compiles with ``-march=native`` on x86. A worker on another CPU would build for ITS
CPU, so the driver expands ``-march=native`` once into the exact flags its own compiler derives
for its own CPU (``native_march_flags``) and the job carries those.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
import shutil
import subprocess
import time

from filelock import FileLock, Timeout

from ..cache.files import write_atomic
from .jobs import Built, CppJob, Failed, Result


@functools.lru_cache(maxsize=8)  # a pure function of (compiler, this machine's CPU)
def native_march_flags(compiler: str) -> tuple[str, ...]:
    """The flags ``compiler -march=native`` expands to on this machine (gcc and clang).

    Returns ("-march=native",) when the compiler does not report an expansion, so the command
    keeps its stock meaning on the machine that runs it.
    """
    try:
        out = subprocess.run(
            [compiler, "-march=native", "-E", "-v", "-x", "c++", os.devnull],
            capture_output=True, text=True, timeout=60, check=False,
        ).stderr
    except (OSError, subprocess.TimeoutExpired):
        return ("-march=native",)
    for line in out.splitlines():
        if "cc1plus" in line and "-march=" in line:
            toks = shlex.split(line)
            flags = []
            for i, t in enumerate(toks):
                if t.startswith(("-m", "--param=")):
                    flags.append(t)
                elif t == "--param" and i + 1 < len(toks):
                    flags += [t, toks[i + 1]]
            if any(f.startswith("-march=") and f != "-march=native" for f in flags):
                return tuple(flags)
    return ("-march=native",)


def resolve_command(command: str) -> list[str]:
    """Split a build command and replace ``-march=native`` with this machine's expansion."""
    toks = shlex.split(command)
    if "-march=native" not in toks:
        return toks
    out: list[str] = []
    for t in toks:
        out.extend(native_march_flags(toks[0]) if t == "-march=native" else [t])
    return out


def run_cpp_job(job: CppJob) -> Result:
    """Run each step whose target is missing; return every step's target bytes. Each step, and the
    wait for another worker building the same library, is bounded by the job's ``timeout_s``."""
    start = time.perf_counter()
    try:
        for path, data in job.inputs.items():
            if not os.path.exists(path):
                write_atomic(path, data)
        lock_path = job.lock_path or os.path.join(os.path.dirname(job.steps[-1].target), ".lock")
        os.makedirs(os.path.dirname(lock_path), exist_ok=True)
        with FileLock(lock_path, timeout=job.timeout_s):
            for step in job.steps:
                if os.path.exists(step.target):
                    continue
                os.makedirs(step.build_dir, exist_ok=True)
                os.makedirs(os.path.dirname(step.target), exist_ok=True)
                # Build into a private name, renamed into place when complete: a worker killed
                # mid-build leaves its compiler running, and the retry must never take that
                # compiler's half-written output for a finished target.
                partial = f"{step.target}.{os.getpid()}.partial"
                command = [partial if arg == step.target else arg for arg in step.command]
                try:
                    proc = subprocess.run(
                        command, cwd=step.build_dir, capture_output=True, text=True,
                        timeout=job.timeout_s, check=False,
                    )
                finally:
                    shutil.rmtree(step.build_dir, ignore_errors=True)
                if proc.returncode != 0:
                    with contextlib.suppress(OSError):
                        os.unlink(partial)
                    msg = (proc.stderr or proc.stdout).strip()[-4000:]
                    return Failed(job.key, job.label, f"{step.command[0]} exited {proc.returncode}:\n{msg}",
                                  seconds=time.perf_counter() - start)
                if os.path.exists(partial):
                    os.replace(partial, step.target)
            files = {}
            for step in job.steps:
                with open(step.target, "rb") as f:
                    files[step.target] = f.read()
    except (subprocess.TimeoutExpired, Timeout) as e:  # the farm sends it once more, as at its own deadline
        return Failed(job.key, job.label, f"{type(e).__name__}: {e}", seconds=time.perf_counter() - start,
                      kind="timeout")
    except Exception as e:  # noqa: BLE001 - a lock held too long, a full disk: the job's result
        return Failed(job.key, job.label, f"{type(e).__name__}: {e}", seconds=time.perf_counter() - start)
    return Built(job.key, job.label, time.perf_counter() - start, files=files)


@functools.lru_cache(maxsize=8)
def compiler_version(compiler: str) -> str:
    """``compiler --version``'s first line (part of the cache key)."""
    try:
        out = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60, check=False)
        return out.stdout.splitlines()[0] if out.stdout else "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
