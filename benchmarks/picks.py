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

``decisions_of()``: the timings a process's max-autotune decisions were made on, from the tables
Inductor writes to stderr for each (``AUTOTUNE mm(2048x768, 768x3072)``, its strides and dtypes,
then each choice's name, milliseconds, the fastest's time as a share of it, and its configuration;
all choices with ``TORCHINDUCTOR_AUTOTUNE_NUM_CHOICES_DISPLAYED=all``, the 10 fastest by default).
``compare_decisions()`` matches two processes' decisions and, where they picked differently, says
by how much each one's own timings put the other's pick behind its own: a near-tie (a gap within the
timings' run-to-run noise) is a pick either could have made, while a pick that the other process
timed far slower is one made on different timings. Stock against stock gives the noise.

``aten_against_templates()``: each decision's fastest ATen choice over the median of its Triton
templates, from one process's table. It does not depend on what was picked, and on the GEMMs
whose timings are steady it moves little from one process to the next (stop 64's four processes:
within 4% on 5 of 15 decisions, and on 3 more but for one process). A process whose ATen timings
were inflated (its driver busy, the GPU shared) stands out against the others' median for that
decision.

``GPUBusy``: the GPUs' busy seconds over a job, from ``nvidia-smi``'s utilization (the share of
each sampling period in which a kernel ran), integrated over the job: the timing of candidates,
in whichever process or actor it ran (stock's autotune subprocesses included), and the steps.
None where there is no ``nvidia-smi``.
"""

from __future__ import annotations

import collections
import math
import os
import re
import shutil
import statistics
import subprocess
import threading
import time
from typing import Any

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


# one decision's table, as select_algorithm's log_results writes it (torch 2.11 and 2.13)
_TABLE = re.compile(r"^AUTOTUNE (\w+)\((.*)\)\nstrides: (.*)\ndtypes: (.*)\n((?:  .*\n?)*)", re.M)
_ROW = re.compile(r"^  (\S+) ([0-9.]+|inf) ms ([0-9.]+)%(?: (.*))?$")


def choice_id(name: str, description: str) -> str:
    """A choice, named as two processes both name it: Inductor numbers its template choices in the
    order it makes them (``triton_mm_12``), so the number is dropped and the configuration kept."""
    return f"{re.sub(r'_[0-9]+$', '', name)} {description.strip()}".strip()


def decisions_of(stderr: str) -> dict[str, dict[str, float]]:
    """Each max-autotune decision in a process's stderr: its key (op, sizes, strides, dtypes) ->
    {choice: its time as a share of the fastest's, 1.0 the pick} in the table's order (fastest
    first). The share is Inductor's own (``best / time``, printed to 0.1%), finer than the
    milliseconds it prints to 0.1 us. A decision tabled twice (a graph compiled again) keeps the
    last table."""
    out: dict[str, dict[str, float]] = {}
    for op, sizes, strides, dtypes, rows in _TABLE.findall(stderr):
        table: dict[str, float] = {}
        for line in rows.splitlines():
            m = _ROW.match(line)
            if m is None:
                continue
            name, _ms, share, description = m.groups()
            table.setdefault(choice_id(name, description or ""), 100.0 / float(share) if float(share) else math.inf)
        if table:
            out[f"{op}({sizes}) strides {strides} dtypes {dtypes}"] = table
    return out


def compare_decisions(a: dict[str, dict[str, float]], b: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Two processes' decisions (``decisions_of``) matched by key: how many both made, how many they
    decided alike, and for each decided differently the gap: how much slower each process timed the
    other's pick than its own (``gap_a``: in ``a``'s table, ``b``'s pick over ``a``'s, less 1;
    None where ``a``'s table does not list it). ``gap`` is the larger of the two known, the
    disagreement's size; ``by_gap`` counts them under 1%, 3%, 10% and over."""
    both = sorted(set(a) & set(b))
    differing = []
    for key in both:
        pick_a, pick_b = next(iter(a[key])), next(iter(b[key]))
        if pick_a == pick_b:
            continue
        gap_a = a[key].get(pick_b)
        gap_b = b[key].get(pick_a)
        gaps = [g - 1.0 for g in (gap_a, gap_b) if g is not None]
        differing.append({"decision": key, "pick_a": pick_a, "pick_b": pick_b,
                          "gap_a": None if gap_a is None else round(gap_a - 1.0, 4),
                          "gap_b": None if gap_b is None else round(gap_b - 1.0, 4),
                          "gap": round(max(gaps), 4) if gaps else None})
    bins = {"<1%": 0, "<3%": 0, "<10%": 0, ">=10% or unlisted": 0}
    for d in differing:
        g = d["gap"]
        bins["<1%" if g is not None and g < 0.01 else "<3%" if g is not None and g < 0.03
             else "<10%" if g is not None and g < 0.10 else ">=10% or unlisted"] += 1
    return {"compared": len(both), "same": len(both) - len(differing), "only_a": len(set(a) - set(b)),
            "only_b": len(set(b) - set(a)), "by_gap": bins, "differing": differing}


def aten_against_templates(tables: dict[str, dict[str, float]]) -> dict[str, float]:
    """Each decision of ``tables`` (``decisions_of``) that has both: its fastest ATen choice's time
    over the median time of its Triton templates (failed ones left out). ATen choices are the rows
    without a configuration (``mm``, ``addmm``, ``bias_addmm``); the shares are relative to the
    table's fastest, which cancels out."""
    out: dict[str, float] = {}
    for key, table in tables.items():
        aten = [v for name, v in table.items() if "=" not in name]
        templates = [v for name, v in table.items() if name.startswith("triton_") and "=" in name and math.isfinite(v)]
        if aten and templates:
            out[key] = min(aten) / statistics.median(templates)
    return out


def aten_outliers(processes: dict[str, dict[str, float]], factor: float = 1.25) -> list[tuple[str, str, float]]:
    """(process, decision, its ratio over the processes' median for that decision) for each ratio of
    ``aten_against_templates`` at least ``factor`` away from that median, either way; a decision
    needs three processes or more to have a median worth the name."""
    found = []
    for key in sorted(set().union(*(set(p) for p in processes.values()))):
        values = {name: p[key] for name, p in processes.items() if key in p}
        if len(values) < 3:
            continue
        median = statistics.median(values.values())
        for name, v in values.items():
            if v >= median * factor or v <= median / factor:
                found.append((name, key, round(v / median, 3)))
    return found


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


def _rank0_decisions(spec: str) -> dict[str, dict[str, float]]:
    """``FILE.json:CASE`` (a ranks.py result; CASE as its table names it, e.g. ``stock#2``)."""
    import json

    path, _, case = spec.rpartition(":")
    runs = [r for r in json.load(open(path))["runs"] if r.get("case") == case and r.get("ranks")]
    if not runs:
        raise SystemExit(f"{path} has no finished run of case {case!r}")
    return runs[0]["ranks"][0].get("autotune_tables") or {}


def main() -> int:
    """Compare two processes' max-autotune decisions across ranks.py results (two runs of one case
    in separate invocations: the noise), printing each decision decided differently with its gaps."""
    import argparse

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("specs", nargs="+", metavar="FILE.json:CASE", help="two runs; with --aten, any number")
    p.add_argument("--aten", action="store_true",
                   help="each decision's fastest ATen choice over its templates' median, per run, and "
                        "the runs 25%% or more away from the runs' median")
    args = p.parse_args()
    if args.aten:
        ratios = {spec: aten_against_templates(_rank0_decisions(spec)) for spec in args.specs}
        keys = sorted(set().union(*ratios.values()))
        print("ATen over the templates' median, per decision, for " + "; ".join(args.specs))
        for key in keys:
            print(f"  {key[:70]:70s} " + " ".join(f"{ratios[s].get(key, math.nan):6.3f}" for s in args.specs))
        for spec, key, off in aten_outliers(ratios):
            print(f"  off the runs' median x{off}: {spec}: {key}")
        return 0
    if len(args.specs) != 2:
        p.error("compare two runs (A.json:CASE B.json:CASE), or give --aten")
    vs = compare_decisions(_rank0_decisions(args.specs[0]), _rank0_decisions(args.specs[1]))
    print(f"{vs['same']} of {vs['compared']} decisions alike (only in a: {vs['only_a']}, only in b: {vs['only_b']}); "
          f"decided differently, by gap: {vs['by_gap']}")
    for d in sorted(vs["differing"], key=lambda d: -1 if d["gap"] is None else d["gap"]):
        print(f"  {d['gap'] if d['gap'] is not None else 'unlisted'}: {d['decision']}\n"
              f"      a picked {d['pick_a']} (b timed it +{d['gap_b']})\n"
              f"      b picked {d['pick_b']} (a timed it +{d['gap_a']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
