"""What a process's max-autotune picked, and how long the GPUs were busy: probes for ranks.py.

``picks()``: the kernels a process's compiled graphs chose, read from their output modules (every
module Inductor loaded, ``PyCodeCache.modules``: compiled here or loaded from a cache). Each GEMM
call site leaves either an ATen call (``extern_kernels.mm(...)``) or a launch
(``KERNEL.run(...)``) of a Triton template kernel (``triton_tem_*``) whose configuration is in its
source (its ``tl.constexpr`` block sizes, ``num_stages``, ``num_warps``). A pick is one such string
per call site; the picks of a process are their multiset. Two processes that decided the same way
have equal multisets; ranks that decided differently (another template config, ATen against a
template) do not, and ``differ`` counts each call site decided differently twice (a pick on each
side). A template kernel launched at several call sites (Inductor defines a kernel of one source
once) counts once per launch. Until stop 62 it counted once per definition while ATen calls
counted per call, so a process that picked a reused template where another called ATen seemed to
differ in more picks than it did, and its pick total was smaller. Kernel names are left out
(their indices depend on the order of compilation), so stock's and the farm's output modules,
which differ in how they define kernels but not in what they chose, compare too.

``GPUBusy``: the GPUs' busy seconds over a job, from ``nvidia-smi``'s utilization (the share of
each sampling period in which a kernel ran), integrated over the job: the timing of candidates,
in whichever process or actor it ran (stock's autotune subprocesses included), and the steps.
None where there is no ``nvidia-smi``.
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
import threading
import time

# a template kernel's definition, as stock's and the farm's output modules write it:
# ``NAME = async_compile.triton('NAME', '''SOURCE''', ...)``
_DEFINITION = re.compile(r"^(\w+) = async_compile\.triton\(\s*'(triton_tem_\w+?)(?:_\d+)?',\s*'''(.*?)'''", re.S | re.M)
_CONSTEXPR = re.compile(r"^\s*(\w+)\s*:\s*tl\.constexpr\s*=\s*(\S+)", re.M)
_STAGES_WARPS = re.compile(r"num_stages=(\d+),\s*num_warps=(\d+)")
_EXTERN = re.compile(r"\bextern_kernels\.(\w+)\(")


def picks_of(source: str) -> list[str]:
    """The GEMM picks in one output module's source: one per call site."""
    templates, rest = [], source
    for variable, name, body in _DEFINITION.findall(source):
        consts = ",".join(f"{k}={v}" for k, v in _CONSTEXPR.findall(body))
        sw = _STAGES_WARPS.search(body)
        templates.append((variable, f"template {name}[{consts}] stages={sw.group(1) if sw else '?'} "
                                    f"warps={sw.group(2) if sw else '?'}"))
        rest = rest.replace(body, "")
    out = []
    for variable, pick in templates:  # launched in the module's call(), outside every kernel's source
        launches = len(re.findall(rf"\b{re.escape(variable)}\.run\(", rest))
        out += [pick] * max(1, launches)  # a definition whose launch this does not read: once
    out += [f"aten {op}" for op in _EXTERN.findall(rest)]
    return out


def picks() -> dict[str, int]:
    """This process's picks (a multiset: pick -> count), over every output module it loaded."""
    from torch._inductor.codecache import PyCodeCache

    seen: set[str] = set()
    counts: collections.Counter[str] = collections.Counter()
    for module in list(PyCodeCache.modules):
        path = getattr(module, "__file__", None)
        if not path or path in seen:
            continue
        seen.add(path)
        try:
            source = open(path).read()
        except OSError:
            continue
        counts.update(picks_of(source))
    return dict(sorted(counts.items()))


def differ(a: dict[str, int], b: dict[str, int]) -> int:
    """How many picks two processes did not share (the multisets' symmetric difference)."""
    ca, cb = collections.Counter(a), collections.Counter(b)
    return sum(((ca - cb) + (cb - ca)).values())


class GPUBusy:
    """Samples ``nvidia-smi`` every ``period_s`` until ``stop()``; ``seconds``: each GPU's busy
    seconds (utilization x period, summed), or None without ``nvidia-smi``."""

    def __init__(self, period_s: float = 0.2) -> None:
        self.seconds: dict[str, float] | None = None
        self.cpu_s = 0.0  # what the nvidia-smi runs cost: the harness's, not the job's
        self._period = period_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if shutil.which("nvidia-smi"):
            self.seconds = {}
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(self._period):
            query = ["nvidia-smi", "--query-gpu=index,utilization.gpu", "--format=csv,noheader,nounits"]
            try:
                out = self._query(query)
            except (OSError, subprocess.TimeoutExpired):
                continue
            now = time.monotonic()
            dt, last = now - last, now
            for line in out.splitlines():
                index, _, util = line.partition(",")
                try:
                    busy = float(util) / 100 * dt
                except ValueError:
                    continue
                assert self.seconds is not None
                self.seconds[index.strip()] = self.seconds.get(index.strip(), 0.0) + busy

    def _query(self, query: list[str]) -> str:
        """``query``'s output; its CPU-seconds added to ``cpu_s`` (reaped here with ``wait4``:
        the harness's own sampling is not the job's CPU). Killed after 10 s."""
        proc = subprocess.Popen(query, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        timer = threading.Timer(10.0, proc.kill)
        timer.start()
        try:
            assert proc.stdout is not None
            out = proc.stdout.read()
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
        finally:
            timer.cancel()
            if proc.stdout is not None:
                proc.stdout.close()
        self.cpu_s += usage.ru_utime + usage.ru_stime
        return out

    def stop(self) -> dict[str, float] | None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
        return None if self.seconds is None else {k: round(v, 1) for k, v in self.seconds.items()}
