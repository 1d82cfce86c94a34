"""N ranks of one node compiling the same training step at once: stock, stock's distributed
max-autotune, and the farm.

    python benchmarks/ranks.py [--models gpt2] [--ranks 4 8] [--cases stock stock-dist farm]
        [--mode max-autotune-no-cudagraphs] [--timeout S] [--label NAME] [--sample PY_SPY]

Each rank is a new process started at the same moment (as torchrun starts a job's ranks; all on
one GPU here, ``cuda:0``; ``RANK`` and ``WORLD_SIZE`` set), building the step of ``overhead.py`` (a
transformers model, random weights) and calling it once, compiled with ``--mode`` (default:
torch.compile's default). The ranks of one run share the node's cache dirs (Inductor's, and for
the farm raycompile's), empty at the start. Cases:
- ``stock``: ``torch.compile``; ``stock-nonlazy`` with each training graph's backward lowered
  with its forward (``force_non_lazy_backward_lowering``, as the farm's ranks lower it);
- ``stock-dist``: stock with its own distributed max-autotune (``distributed_max_autotune_gemm``:
  each rank times 1/world of the GEMM decisions, the picks shared by an all-gather over a gloo
  process group of the ranks, as NCCL cannot share one GPU) and ``pipeline_max_autotune_gemm``
  (autotuning in a subprocess while lowering goes on), each where this torch has it;
  ``stock-dist-nopipe`` the distributed one alone;
- ``farm``: ``raycompile.enable()``, the ranks joining the node's `ray start` cluster with no
  address and no secret (defaults: compiled frames, single flight).

Reported per run: the slowest rank's first output (seconds from the common start; a job still
running at ``--timeout`` is killed and the row says ">=" that bound), the graphs each rank traced
(torch's own ``unique_graphs`` counter), who compiled and who waited, the job's CPU-seconds (the
whole machine's busy CPU time over the run, from /proc/stat: the ranks, their compile workers and
Ray alike, less the harness's own (``harness_cpu_s``: this script's samplers and its nvidia-smi
runs, left out since stop 50); ``cpu_s_by_kind`` splits it by who spent it, from each process's
/proc/PID/stat sampled every 0.2 s: the ranks, Inductor's compile workers, Ray's processes the job
started ("ray") and those of the cluster, older than the job ("ray cluster": its idle time, and
what the job asked of it), other (``other_top``: the largest, with their command lines), and what
no sample saw (short-lived processes: ptxas, compilers); the farm's cluster is started and left to
settle before the job (``overhead.start_ray``: until stop 62 its start's tail was charged to the
job); ``compile_cpu_s`` is
the job's CPU less each rank's own CPU up to its model's build, its imports and the build, which
stock's ranks pay alike; the table's "alone s" is one stock rank's compile CPU alone (a run of
``--ranks 1`` in the same invocation) plus ``waiters_cpu_s``: one compile and the loads; "goal s"
is issue 31's bound for it, 1/N of stock's plus
``waiters_cpu_s``, the waiters' own CPU from their build to their first output), the GPUs' busy
seconds (``nvidia-smi``'s utilization integrated over the run: candidates timed anywhere, and the
steps), its peak host memory (the machine's used memory above what it was before the run,
sampled), whether every rank's loss is bitwise stock's, and whether every rank made the same
max-autotune picks (``picks.py``: the ATen calls and Triton template configs in each rank's output
modules; ``picks_differ_from_rank0``, and ``picks_differ_from_stock_rank0`` against stock's).
Each rank's decision tables (``autotune_tables``: every choice of each max-autotune decision and
its time against the pick's, from the tables Inductor writes to stderr; every case runs with
``TORCHINDUCTOR_AUTOTUNE_NUM_CHOICES_DISPLAYED=all``) give ``decisions_vs_stock_rank0``: the
decisions rank 0 made as stock's rank 0 did, and each made differently with the gap each process
timed between the two picks (``picks.compare_decisions``). A case named twice runs twice
(``--cases stock farm stock``: the second is ``stock#2``, stock's own run-to-run noise).
Prints a table and the ratios to stock measured in the same run; writes JSON under
benchmarks/results/. Each rank's phases (``phases_s``: torch imported, enable() returned, model
built, first output; seconds from the common start) show where a slow rank lost its time;
``--sample PY_SPY`` runs every case's ranks under py-spy
(``ranks_LABEL_sampled_MODEL_N_CASE_rankI.json``, read with `python benchmarks/timeline.py`).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from overhead import build, busy_cpu_s, fresh, prefill_header, start_ray, stop_ray  # noqa: E402 - next to this script
from picks import compare_decisions, differ  # noqa: E402

CASES = ("stock", "stock-nonlazy", "stock-dist", "stock-dist-nopipe", "farm")


def rank(model: str, case: str, mode: str | None) -> None:
    """One rank (run as ``--rank``): prints RESULT json. ``case``: one of CASES."""
    phases = {"started": time.time()}
    import torch

    phases["torch imported"] = time.time()
    dist_autotune: dict[str, bool] = {}
    said: list[str] = []
    if case == "farm":
        import logging

        import raycompile

        class Said(logging.Handler):  # why a waiter traced a frame itself, in the farm's own words
            def emit(self, record: logging.LogRecord) -> None:
                if "tracing it here" in record.getMessage():
                    said.append(record.getMessage())

        logging.getLogger("raycompile.frames").addHandler(Said(logging.INFO))
        logging.getLogger("raycompile.frames").setLevel(logging.INFO)

        class Contenders(logging.Handler):  # the threads that ran Python through a timing of this process's
            def __init__(self) -> None:
                super().__init__(logging.DEBUG)
                self.names: collections.Counter[str] = collections.Counter()
                self.again: collections.Counter[str] = collections.Counter()
                self.ms: list[tuple[float, float]] = []  # (first, taken again) of each timing taken again

            def emit(self, record: logging.LogRecord) -> None:
                def kind(name: str) -> str:  # raycompile-io_3 -> raycompile-io
                    return name.rsplit("_", 1)[0] if name.rsplit("_", 1)[-1].isdigit() else name

                self.names.update(kind(n) for n in getattr(record, "contenders", ()))
                self.again.update(kind(n) for n in getattr(record, "again", ()))
                if getattr(record, "ms", None):
                    self.ms.append(record.ms)

        contenders = Contenders()
        quiet_log = logging.getLogger("raycompile.autotune.quiet")
        quiet_log.addHandler(contenders)
        quiet_log.setLevel(logging.DEBUG)
        quiet_log.propagate = False
        if os.environ.get("RANKS_LOG"):  # a diagnosis: each rank's raycompile log, at debug level
            handler = logging.FileHandler(f"{os.environ['RANKS_LOG']}.rank{os.environ['RANK']}")
            handler.setFormatter(logging.Formatter("%(relativeCreated)8.0f %(threadName)s %(name)s: %(message)s"))
            logging.getLogger("raycompile").addHandler(handler)
            logging.getLogger("raycompile").setLevel(logging.DEBUG)
            logging.getLogger("raycompile.frames").setLevel(logging.DEBUG)
        raycompile.enable()
    elif case == "stock-nonlazy":
        import torch._functorch.config as functorch_config

        functorch_config.force_non_lazy_backward_lowering = True
    elif case.startswith("stock-dist"):
        # stock's own distributed max-autotune: a process group over the ranks (gloo: these ranks
        # share one GPU, where NCCL cannot), each rank timing 1/world of the GEMM decisions and the
        # picks shared by an all-gather; and the pipelined autotuning, where this torch has it
        import datetime

        import torch._inductor.config as inductor_config
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=os.environ["RANKS_INIT"], rank=int(os.environ["RANK"]),
                                world_size=int(os.environ["WORLD_SIZE"]), timeout=datetime.timedelta(seconds=1800))
        knobs = ["distributed_max_autotune_gemm"]
        if case != "stock-dist-nopipe":
            knobs.append("pipeline_max_autotune_gemm")
        for knob in knobs:
            dist_autotune[knob] = hasattr(inductor_config, knob)
            if dist_autotune[knob]:
                setattr(inductor_config, knob, True)
    phases["enabled"] = time.time()
    step, args = build(model, "cuda" if torch.cuda.is_available() else "cpu")
    phases["built"] = time.time()
    cpu_built = time.process_time()  # this process's threads: its imports and the model's build
    loss = torch.compile(step, mode=mode)(*args)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    first_output = time.time()
    cpu_compile = time.process_time() - cpu_built
    cpu_picks = time.process_time()
    from picks import picks  # next to this script
    from torch._dynamo.utils import counters

    picked = picks()
    cpu_picks = time.process_time() - cpu_picks  # the harness's reading of the output modules
    out: dict[str, Any] = {"first_output_epoch": first_output, "loss": float(loss.float()),
                           "graphs_traced": int(counters["stats"]["unique_graphs"]), "phases_epoch": phases,
                           "picks": picked, "cpu_s_phases": {"to built": round(cpu_built, 2),
                                                             "built to first output": round(cpu_compile, 2),
                                                             "harness": round(cpu_picks, 2)}}
    if dist_autotune:
        out["stock_knobs"] = dist_autotune
    if case == "farm":
        import raycompile

        raycompile.disable()
        s = raycompile.stats()
        roles = {fn: row.get("role") for fn, row in s["dynamo_functions"].items()}
        out.update({"roles": roles, "served": s["dynamo_frames_served"], "loaded": s["dynamo_frames_loaded"],
                    "traced": s["dynamo_frames_traced"], "jobs": s["jobs"] + s["jobs_local"],
                    "waited_s": s["dynamo_flight_wait_seconds"], "gave_up": s["dynamo_flight_gave_up"],
                    "published": s.get("dynamo_flight_published", 0),
                    "publish_s": round(s.get("dynamo_flight_publish_seconds", 0.0), 2),
                    "ray_begun": (s.get("ray_start_seconds") or {}).get("begun"),
                    "ray_wait_s": s.get("ray_wait_seconds", 0.0), "probe_wait_s": s.get("probe_wait_seconds", 0.0),
                    "benchmarks": s["benchmarks"], "benchmark_seconds": s["benchmark_seconds"], "gave_up_why": said,
                    "tunings_adopted": s.get("tunings_adopted", 0),
                    "tunings_reserved": s.get("tunings_reserved", 0),
                    "tunings_wait_s": s.get("tunings_adopted_wait_seconds", 0.0),
                    "coordesc": [s.get("coordesc_prefetched", 0), s.get("coordesc_in_workers", 0),
                                 s.get("coordesc_at_load", 0), s.get("coordesc_speculated", 0),
                                 s.get("coordesc_speculated_used", 0)],
                    "configs_spread": s.get("configs_spread", 0),
                    # this process's own GPU timings: all, another thread ran Python through (contended),
                    # taken again, contended again; and the threads that did (raycompile/observe/quiet.py)
                    "driver_timings": [s.get("driver_timings", 0), s.get("driver_timings_contended", 0),
                                       s.get("driver_timings_retaken", 0), s.get("driver_timings_contended_again", 0)],
                    "contenders": dict(contenders.names.most_common(20)),
                    "contenders_again": dict(contenders.again.most_common(20)),
                    "retaken_ms": [[round(a, 5), round(b, 5)] for a, b in contenders.ms],
                    "decisions": {how: s[f"autotune_decisions_{how}"] for how in ("timed", "shared", "adopted")}})
    elif case.startswith("stock-dist"):
        import torch.distributed as dist

        dist.destroy_process_group()
    print("RESULT " + json.dumps(out), flush=True)


# what a process is, by its command line: the job's CPU-seconds split by who spent them
KINDS = (("compile workers", ("compile_worker",)), ("ray", ("ray::", "raylet", "gcs_server", "default_worker",
                                                          "ray/_private", "ray.scripts", "ray/dashboard")))


def _command(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _kind(pid: int, ranks: set[int], cluster: dict[int, float], cmd: str) -> str:
    """``cluster``: processes older than the job (a `ray start` head's): their Ray CPU during the
    job is the cluster's ("ray cluster"), Ray processes the job started are "ray"."""
    if pid in ranks or "ranks.py --rank" in cmd:  # a rank (under py-spy, its child)
        return "ranks"
    kind = next((kind for kind, marks in KINDS if any(m in cmd for m in marks)), "other")
    return "ray cluster" if kind == "ray" and pid in cluster else kind


def _cpu_by_pid() -> dict[int, float]:
    """Every live process's CPU-seconds so far (utime + stime, /proc/PID/stat)."""
    out, tick = {}, os.sysconf("SC_CLK_TCK")
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fields = open(f"/proc/{name}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(name)] = (int(fields[11]) + int(fields[12])) / tick
    return out


def _used_memory_b() -> int:
    info = dict(line.split(":", 1) for line in open("/proc/meminfo"))
    return (int(info["MemTotal"].split()[0]) - int(info["MemAvailable"].split()[0])) * 1024


def run_job(model: str, n: int, case: str, env: dict[str, str], timeout: float,
            spy: tuple[str, str] | None = None, mode: str | None = None) -> dict[str, Any]:
    """``n`` ranks of ``case`` started together; the job's numbers. ``spy``: (py-spy, output
    prefix). Ranks that have not reached their first output ``timeout`` seconds after the start
    are killed (with their compile workers): the job's ``slowest_s`` is then that lower bound and
    ``timed_out`` the ranks that did not finish."""
    import signal
    import socket

    from picks import GPUBusy, decisions_of, differ  # next to this script

    peak = [0]
    base = _used_memory_b()
    done = threading.Event()
    before = _cpu_by_pid()  # processes older than the job (a `ray start` head's idle ones): their CPU from here
    seen: dict[int, tuple[str, float, str]] = {}  # pid -> (kind, CPU-seconds it spent in the job so far, command)
    rank_pids: set[int] = set()

    def sample() -> None:
        while not done.wait(0.2):
            peak[0] = max(peak[0], _used_memory_b() - base)
            for pid, cpu in _cpu_by_pid().items():
                if pid in seen:
                    kind, _, cmd = seen[pid]
                else:
                    cmd = _command(pid)
                    kind = _kind(pid, rank_pids, before, cmd)
                seen[pid] = (kind, cpu - before.get(pid, 0.0), cmd)

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    gpu = GPUBusy()
    cpu0, t0, own0 = busy_cpu_s(), time.time(), time.process_time()
    cmd = [sys.executable, __file__, "--rank", model, "--case", case] + (["--mode", mode] if mode else [])

    def command(i: int) -> list[str]:
        if not spy:
            return cmd
        from timeline import sampled  # next to this script

        return sampled(spy[0], f"{spy[1]}_rank{i}.json", cmd)

    # RANK, not LOCAL_RANK: these ranks share one GPU, while torchrun's LOCAL_RANK names a rank's own
    # GPU, and single flight is shared only by the ranks of one device (wrapper/flights.py)
    # every choice of each max-autotune decision in Inductor's tables (stderr), not only the ten
    # fastest: where two processes picked differently, how far apart each timed the two picks
    common = {**{k: v for k, v in os.environ.items() if k != "LOCAL_RANK"},
              "TORCHINDUCTOR_AUTOTUNE_NUM_CHOICES_DISPLAYED": "all", **env,
              "WORLD_SIZE": str(n), "RANKS_INIT": f"tcp://127.0.0.1:{port}"}
    procs = [subprocess.Popen(command(i), env={**common, "RANK": str(i)}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True) for i in range(n)]
    rank_pids.update(p.pid for p in procs)
    ranks: list[dict[str, Any]] = []
    timed_out: list[int] = []
    deadline = t0 + timeout

    def kill(rest: list[subprocess.Popen[str]]) -> None:  # its process group: its compile workers too
        for q in rest:
            if q.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(q.pid, signal.SIGKILL)

    for i, p in enumerate(procs):
        try:
            out, err = p.communicate(timeout=max(deadline - time.time(), 1.0))
        except subprocess.TimeoutExpired:
            kill(procs)
            out, err = p.communicate(timeout=60)
        lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
        if p.returncode != 0 or not lines:
            if time.time() >= deadline:
                timed_out.append(i)
                continue
            kill(procs)
            # the exception's own line is what says why: the last lines that name an error, then the tail
            named = [ln for ln in err.splitlines() if "Error" in ln or "Exception" in ln][-6:]
            raise RuntimeError(f"rank {i} failed ({p.returncode}):\n" + "\n".join(named)
                               + f"\n{out[-2000:]}\n{err[:3000]}\n...\n{err[-3000:]}")
        r = json.loads(lines[-1][7:])
        r["first_output_s"] = r.pop("first_output_epoch") - t0
        r["phases_s"] = {k: round(v - t0, 2) for k, v in r.pop("phases_epoch").items()}
        r["autotune_tables"] = decisions_of(err)
        ranks.append(r)
    cpu = busy_cpu_s() - cpu0
    gpu_s = gpu.stop()
    done.set()
    sampler.join()
    # the harness's own CPU (this process: the samplers of /proc and nvidia-smi, and nvidia-smi's
    # runs) is not the job's: left out of every figure, reported apart
    in_ranks = sum(r["cpu_s_phases"].get("harness", 0.0) for r in ranks)  # the ranks' reading of their picks
    harness = time.process_time() - own0 + gpu.cpu_s + in_ranks
    cpu -= harness
    seen.pop(os.getpid(), None)
    by_kind: dict[str, float] = {}
    for kind, spent, _ in seen.values():
        by_kind[kind] = round(by_kind.get(kind, 0.0) + max(spent, 0.0), 1)
    # who spent "other" (compilers, a probe process, whatever else ran on the machine)
    other = sorted(((spent, cmd) for kind, spent, cmd in seen.values() if kind == "other" and spent >= 0.5),
                   reverse=True)
    other_top = [[round(spent, 1), cmd[:120]] for spent, cmd in other[:8]]
    if "ranks" in by_kind:
        by_kind["ranks"] = round(by_kind["ranks"] - in_ranks, 1)
    # what no sample saw: processes that lived less than a sampling period (ptxas, compilers)
    by_kind["short-lived"] = round(max(cpu - sum(by_kind.values()), 0.0), 1)
    slowest = timeout if timed_out else max(r["first_output_s"] for r in ranks)
    first = ranks[0]["picks"] if ranks else {}
    # the job's CPU less each rank's imports and model build (what stock's ranks pay alike)
    compile_cpu = cpu - sum(r["cpu_s_phases"]["to built"] for r in ranks)
    # a waiter's own CPU from its build to its first output: what it spent loading and running
    loads = sum(r["cpu_s_phases"]["built to first output"] for r in ranks
                if "owner" not in (r.get("roles") or {}).values())
    return {"ranks": ranks, "slowest_s": slowest, "timed_out": timed_out, "cpu_s": cpu, "cpu_s_by_kind": by_kind,
            "other_top": other_top,
            "compile_cpu_s": round(compile_cpu, 1), "waiters_cpu_s": round(loads, 1),
            "harness_cpu_s": round(harness, 1),
            "gpu_busy_s": gpu_s, "peak_memory_gib": peak[0] / 2**30,
            "graphs_traced": [r["graphs_traced"] for r in ranks], "losses": sorted({r["loss"] for r in ranks}),
            "picks_rank0": first, "picks_differ_from_rank0": [differ(first, r["picks"]) for r in ranks]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rank")
    p.add_argument("--case", default="stock", choices=CASES)
    p.add_argument("--cases", nargs="+", default=["stock", "farm"], choices=CASES)
    p.add_argument("--mode", default=None, help="torch.compile's mode (e.g. max-autotune-no-cudagraphs)")
    p.add_argument("--models", nargs="+", default=["gpt2"])
    p.add_argument("--ranks", nargs="+", type=int, default=[4, 8])
    p.add_argument("--timeout", type=float, default=900, help="seconds a job may take (its ranks are then killed)")
    p.add_argument("--label", default="local")
    p.add_argument("--out", type=pathlib.Path, default=HERE / "results")
    p.add_argument("--sample", default="", metavar="PY_SPY", help="run every case's ranks under this py-spy")
    args = p.parse_args()
    if args.rank:
        rank(args.rank, args.case, args.mode)
        return 0
    import torch

    where = torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU ({os.cpu_count()} cores)"
    mode = args.mode or "default"
    print(f"ranks: {where}, {os.cpu_count()} CPUs, torch {torch.__version__}, mode {mode}", flush=True)
    work = pathlib.Path(tempfile.mkdtemp(prefix="ranks-"))
    # the precompiled C++ header every job's kernels include (CPU), and the libraries the first job
    # alone would read from disk
    prefill_header(work, args.models, "cuda" if torch.cuda.is_available() else "cpu")
    doc: dict[str, Any] = {"device": where, "cpus": os.cpu_count(), "torch": torch.__version__, "mode": args.mode,
                           "runs": []}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"ranks_{args.label}.json"
    rows = []
    for model in args.models:
        for n in args.ranks:
            jobs: dict[str, dict[str, Any]] = {}
            written: dict[str, dict[str, Any]] = {}  # case -> its row in doc["runs"]
            for case in args.cases:
                # a case named twice runs twice (stock twice: its own picks' run-to-run noise)
                name = case if case not in jobs else f"{case}#{sum(k.split('#')[0] == case for k in jobs) + 1}"
                env = fresh(work, f"{model}-{n}-{name}")
                print(f"{model} x{n} {case} ...", flush=True)
                prefix = str(args.out / f"ranks_{args.label}_sampled_{model}_{n}_{name.replace('#', '_')}")
                sample = (args.sample, prefix) if args.sample else None
                try:
                    if case != "farm":
                        jobs[name] = run_job(model, n, case, env, args.timeout, sample, mode=args.mode)
                    else:
                        ray_proc, ray_env = start_ray(work / f"{model}-{n}-ray")  # a new cluster: nothing warm in it
                        try:
                            jobs[name] = run_job(model, n, case, {**env, **ray_env}, args.timeout, sample,
                                                 mode=args.mode)
                        finally:
                            stop_ray(ray_proc)
                    # written as each case ends: a run cut short keeps the cases it finished
                    written[name] = {"model": model, "ranks": n, "case": name, **jobs[name]}  # "ranks": each rank's
                    doc["runs"].append(written[name])
                    path.write_text(json.dumps(doc, indent=1))
                except RuntimeError as e:  # a case that fails is reported; the others still run
                    print(f"  {model} x{n} {name} FAILED: {e}", flush=True)
                    doc["runs"].append({"model": model, "ranks": n, "case": name, "failed": str(e)[-6000:]})
                    path.write_text(json.dumps(doc, indent=1))
            if not jobs:
                continue
            base = jobs.get("stock") or next(iter(jobs.values()))
            for name, job in jobs.items():
                job["picks_differ_from_stock_rank0"] = differ(job["picks_rank0"], base["picks_rank0"])
                # rank 0's decisions against stock's rank 0's, each decided differently with its gap
                vs = compare_decisions(job["ranks"][0]["autotune_tables"], base["ranks"][0]["autotune_tables"]) \
                    if job["ranks"] and base["ranks"] else None
                job["decisions_vs_stock_rank0"] = vs
                rows.append((model, n, name, job, base))
                written[name]["picks_differ_from_stock_rank0"] = job["picks_differ_from_stock_rank0"]
                written[name]["decisions_vs_stock_rank0"] = vs
                path.write_text(json.dumps(doc, indent=1))
                late = f", TIMED OUT ranks {job['timed_out']}" if job["timed_out"] else ""
                print(f"  {model} x{n} {name}: slowest {job['slowest_s']:.2f} s{late}, cpu {job['cpu_s']:.1f} s "
                      f"({job['cpu_s_by_kind']}), GPU busy {job['gpu_busy_s']} s, peak {job['peak_memory_gib']:.2f} "
                      f"GiB, graphs per rank {job['graphs_traced']}, losses {job['losses']}, picks "
                      f"{sum(job['picks_rank0'].values())} (rank 0), differing from rank 0 "
                      f"{job['picks_differ_from_rank0']}, from stock's rank 0 {job['picks_differ_from_stock_rank0']}",
                      flush=True)
                if vs and vs["compared"]:
                    print(f"    decisions against stock's rank 0: {vs['same']} of {vs['compared']} alike, the others "
                          f"by the gap each timed between the two picks {vs['by_gap']}", flush=True)
                for i, r in enumerate(job["ranks"]):
                    shown = ("benchmarks", "benchmark_seconds", "decisions", "stock_knobs", "gave_up_why", "ray_begun",
                             "ray_wait_s", "probe_wait_s", "tunings_adopted", "tunings_reserved", "tunings_wait_s",
                             "coordesc", "configs_spread")
                    extra = {k: r[k] for k in shown if r.get(k)}
                    print(f"    rank {i}: {r.get('roles') or ''} {extra or ''} phases {r['phases_s']} first output "
                          f"{r['first_output_s']:.2f}, CPU {r['cpu_s_phases']}", flush=True)
    print(f"\n{'model':<8}{'ranks':>6}{'case':>11}{'slowest s':>11}{'x stock':>9}{'CPU s':>9}{'x stock':>9}"
          f"{'compile CPU s':>15}{'x stock':>9}{'goal s':>8}{'alone s':>9}"
          f"{'GPU busy s':>12}{'peak GiB':>10}{'graphs/rank':>16}  loss = stock's  picks agree")
    # one stock rank's compile CPU alone (where --ranks has 1): N stock ranks of one node share its
    # Inductor and Triton caches, so 1/N of their job is less than one rank alone pays
    alone = {(model, name): job["compile_cpu_s"] for model, n, name, job, _ in rows if n == 1}
    for model, n, name, job, stock in rows:
        same = job["losses"] == stock["losses"] and len(job["losses"]) == 1
        ge = ">=" if job["timed_out"] else ""
        # the bounds are the farm's (one compile, the rest loads): "-" on stock's own rows
        ours = not name.startswith("stock")
        goal = f"{stock['compile_cpu_s'] / n + job['waiters_cpu_s']:.1f}" if ours else "-"
        bound = f"{alone[model, 'stock'] + job['waiters_cpu_s']:.1f}" if ours and (model, "stock") in alone else "-"
        busy = "-" if job["gpu_busy_s"] is None else f"{sum(job['gpu_busy_s'].values()):.1f}"
        agree = not any(job["picks_differ_from_rank0"]) and not job["timed_out"]
        print(f"{model:<8}{n:>6}{name:>11}{ge + format(job['slowest_s'], '.2f'):>11}"
              f"{job['slowest_s'] / stock['slowest_s']:>9.2f}{job['cpu_s']:>9.1f}{job['cpu_s'] / stock['cpu_s']:>9.2f}"
              f"{job['compile_cpu_s']:>15.1f}{job['compile_cpu_s'] / stock['compile_cpu_s']:>9.2f}"
              f"{goal:>8}"
              f"{bound:>9}"
              f"{busy:>12}{job['peak_memory_gib']:>10.2f}"
              f"{str(job['graphs_traced']):>16}  {str(same):<14} {agree}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
