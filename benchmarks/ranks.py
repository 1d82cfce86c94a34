"""N ranks of one node compiling the same training step at once, stock against the farm.

    python benchmarks/ranks.py [--models gpt2] [--ranks 4 8] [--label NAME] [--sample PY_SPY]

Each rank is a new process started at the same moment (as torchrun starts a job's ranks; all on
one GPU here, ``cuda:0``), building the step of ``overhead.py`` (a transformers model, random
weights) and calling it once. The ranks of one run share the node's cache dirs (Inductor's, and
for the farm raycompile's), empty at the start. The farm's ranks join the node's `ray start`
cluster with no address and no secret (defaults: compiled frames, single flight).

Reported per run: the slowest rank's first output (seconds from the common start), the graphs each
rank traced (torch's own ``unique_graphs`` counter), who compiled and who waited, the job's
CPU-seconds (the whole machine's busy CPU time over the run, from /proc/stat: the ranks, their
compile workers and Ray alike; ``cpu_s_by_kind`` splits it by who spent it, from each process's
/proc/PID/stat sampled every 0.2 s: the ranks, Inductor's compile workers, Ray's processes, other)
and its peak host memory (the machine's used memory above what it
was before the run, sampled), and whether every rank's loss is bitwise stock's. Prints a table and
the ratios to stock measured in the same run; writes JSON under benchmarks/results/. Each rank's
phases (``phases_s``: torch imported, enable() returned, model built, first output; seconds from
the common start) show where a slow rank lost its time; ``--sample PY_SPY`` runs the farm's ranks
under py-spy (``ranks_LABEL_sampled_MODEL_N_rankI.json``, read with `python benchmarks/timeline.py`).
"""

from __future__ import annotations

import argparse
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

from overhead import build, fresh, start_ray, stop_ray  # noqa: E402 - next to this script


def rank(model: str, farm: bool) -> None:
    """One rank (run as ``--rank``): prints RESULT json."""
    phases = {"started": time.time()}
    import torch

    phases["torch imported"] = time.time()
    if farm:
        import raycompile

        raycompile.enable()
    phases["enabled"] = time.time()
    step, args = build(model, "cuda" if torch.cuda.is_available() else "cpu")
    phases["built"] = time.time()
    loss = torch.compile(step)(*args)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    first_output = time.time()
    from torch._dynamo.utils import counters

    out: dict[str, Any] = {"first_output_epoch": first_output, "loss": float(loss.float()),
                           "graphs_traced": int(counters["stats"]["unique_graphs"]), "phases_epoch": phases}
    if farm:
        import raycompile

        raycompile.disable()
        s = raycompile.stats()
        roles = {fn: row.get("role") for fn, row in s["dynamo_functions"].items()}
        out.update({"roles": roles, "served": s["dynamo_frames_served"], "loaded": s["dynamo_frames_loaded"],
                    "traced": s["dynamo_frames_traced"], "jobs": s["jobs"] + s["jobs_local"],
                    "waited_s": s["dynamo_flight_wait_seconds"], "gave_up": s["dynamo_flight_gave_up"],
                    "ray_begun": (s.get("ray_start_seconds") or {}).get("begun")})
    print("RESULT " + json.dumps(out), flush=True)


def _busy_cpu_s() -> float:
    """The machine's busy CPU time so far (all CPUs, /proc/stat), in seconds."""
    fields = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


# what a process is, by its command line: the job's CPU-seconds split by who spent them
KINDS = (("compile workers", ("compile_worker",)), ("ray", ("ray::", "raylet", "gcs_server", "default_worker",
                                                          "ray/_private", "ray.scripts", "ray/dashboard")))


def _kind(pid: int, ranks: set[int]) -> str:
    if pid in ranks:
        return "ranks"
    try:
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "other"
    if "ranks.py --rank" in cmd:  # a rank under py-spy
        return "ranks"
    return next((kind for kind, marks in KINDS if any(m in cmd for m in marks)), "other")


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


def run_job(model: str, n: int, farm: bool, env: dict[str, str], timeout: float,
            spy: tuple[str, str] | None = None) -> dict[str, Any]:
    """``n`` ranks started together; the job's numbers. ``spy``: (py-spy, output prefix)."""
    peak = [0]
    base = _used_memory_b()
    done = threading.Event()
    before = _cpu_by_pid()  # processes older than the job (a `ray start` head's idle ones): their CPU from here
    seen: dict[int, tuple[str, float]] = {}  # pid -> (kind, CPU-seconds it spent in the job so far)
    rank_pids: set[int] = set()

    def sample() -> None:
        while not done.wait(0.2):
            peak[0] = max(peak[0], _used_memory_b() - base)
            for pid, cpu in _cpu_by_pid().items():
                kind = seen[pid][0] if pid in seen else _kind(pid, rank_pids)
                seen[pid] = (kind, cpu - before.get(pid, 0.0))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    cpu0, t0 = _busy_cpu_s(), time.time()
    cmd = [sys.executable, __file__, "--rank", model] + (["--farm"] if farm else [])

    def command(i: int) -> list[str]:
        if not spy:
            return cmd
        from timeline import sampled  # next to this script

        return sampled(spy[0], f"{spy[1]}_rank{i}.json", cmd)

    # RANK, not LOCAL_RANK: these ranks share one GPU, while torchrun's LOCAL_RANK names a rank's own
    # GPU, and single flight is shared only by the ranks of one device (wrapper/flights.py)
    procs = [subprocess.Popen(command(i), env={**{k: v for k, v in os.environ.items() if k != "LOCAL_RANK"}, **env,
                                               "RANK": str(i)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(n)]
    rank_pids.update(p.pid for p in procs)
    ranks = []
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
        if p.returncode != 0 or not lines:
            raise RuntimeError(f"a rank failed ({p.returncode}):\n{out[-2000:]}\n{err[-4000:]}")
        r = json.loads(lines[-1][7:])
        r["first_output_s"] = r.pop("first_output_epoch") - t0
        r["phases_s"] = {k: round(v - t0, 2) for k, v in r.pop("phases_epoch").items()}
        ranks.append(r)
    cpu = _busy_cpu_s() - cpu0
    done.set()
    sampler.join()
    by_kind: dict[str, float] = {}
    for kind, spent in seen.values():
        by_kind[kind] = round(by_kind.get(kind, 0.0) + max(spent, 0.0), 1)
    return {"ranks": ranks, "slowest_s": max(r["first_output_s"] for r in ranks), "cpu_s": cpu,
            "cpu_s_by_kind": by_kind,
            "peak_memory_gib": peak[0] / 2**30, "graphs_traced": [r["graphs_traced"] for r in ranks],
            "losses": sorted({r["loss"] for r in ranks})}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rank")
    p.add_argument("--farm", action="store_true")
    p.add_argument("--models", nargs="+", default=["gpt2"])
    p.add_argument("--ranks", nargs="+", type=int, default=[4, 8])
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--label", default="local")
    p.add_argument("--out", type=pathlib.Path, default=HERE / "results")
    p.add_argument("--sample", default="", metavar="PY_SPY", help="run the farm's ranks under this py-spy")
    args = p.parse_args()
    if args.rank:
        rank(args.rank, args.farm)
        return 0
    import torch

    where = torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU ({os.cpu_count()} cores)"
    print(f"ranks: {where}, {os.cpu_count()} CPUs, torch {torch.__version__}", flush=True)
    work = pathlib.Path(tempfile.mkdtemp(prefix="ranks-"))
    doc: dict[str, Any] = {"device": where, "cpus": os.cpu_count(), "torch": torch.__version__, "runs": []}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"ranks_{args.label}.json"
    rows = []
    for model in args.models:
        for n in args.ranks:
            stock = run_job(model, n, False, fresh(work, f"{model}-{n}-stock"), args.timeout)
            ray_proc, ray_env = start_ray(work / f"{model}-{n}-ray")  # a new cluster: nothing warm in it
            try:
                prefix = str(args.out / f"ranks_{args.label}_sampled_{model}_{n}")
                sample = (args.sample, prefix) if args.sample else None
                farm = run_job(model, n, True, {**fresh(work, f"{model}-{n}-farm"), **ray_env}, args.timeout, sample)
            finally:
                stop_ray(ray_proc)
            for name, job in (("stock", stock), ("farm", farm)):
                rows.append((model, n, name, job, stock))
                doc["runs"].append({"model": model, "ranks": n, "case": name, **job})
                path.write_text(json.dumps(doc, indent=1))
                print(f"  {model} x{n} {name}: slowest {job['slowest_s']:.2f} s, cpu {job['cpu_s']:.1f} s "
                      f"({job['cpu_s_by_kind']}), peak {job['peak_memory_gib']:.2f} GiB, graphs per rank "
                      f"{job['graphs_traced']}, losses {job['losses']}", flush=True)
                for i, r in enumerate(job["ranks"]):
                    print(f"    rank {i}: {r.get('roles') or ''} phases {r['phases_s']} first output "
                          f"{r['first_output_s']:.2f}", flush=True)
    print(f"\n{'model':<8}{'ranks':>6}{'case':>7}{'slowest s':>11}{'x stock':>9}{'CPU s':>9}{'x stock':>9}"
          f"{'peak GiB':>10}{'graphs/rank':>16}  loss = stock's")
    for model, n, name, job, stock in rows:
        same = job["losses"] == stock["losses"] and len(job["losses"]) == 1
        print(f"{model:<8}{n:>6}{name:>7}{job['slowest_s']:>11.2f}{job['slowest_s'] / stock['slowest_s']:>9.2f}"
              f"{job['cpu_s']:>9.1f}{job['cpu_s'] / stock['cpu_s']:>9.2f}{job['peak_memory_gib']:>10.2f}"
              f"{str(job['graphs_traced']):>16}  {same}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
