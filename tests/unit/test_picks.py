"""benchmarks/picks.py reads a process's max-autotune picks from its output modules: one pick per
GEMM call site, a template kernel launched at several call sites counted at each, so that two
processes' picks compare call site for call site whichever way each decided."""

from __future__ import annotations

import importlib.util
import math
import pathlib

PICKS = pathlib.Path(__file__).parents[2] / "benchmarks" / "picks.py"


def _picks():
    spec = importlib.util.spec_from_file_location("bench_picks", PICKS)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _template(name: str, block_m: int, stages: int) -> str:
    """A template kernel's definition, as Inductor's (and the farm's) output modules write it."""
    return (f"{name} = async_compile.triton('{name}', '''\n"
            "import triton\nimport triton.language as tl\n\n"
            f"@triton_heuristics.template(num_stages={stages}, num_warps=4, triton_meta={{}})\n"
            "@triton.jit\n"
            f"def {name}(arg_A, arg_B, out_ptr0):\n"
            "    EVEN_K : tl.constexpr = True\n"
            f"    BLOCK_M : tl.constexpr = {block_m}\n"
            "    BLOCK_N : tl.constexpr = 128\n"
            "    # extern_kernels.mm( in a comment of the kernel's source is not a call site\n"
            "''', device_str='cuda')\n\n")


def _module(calls: list[str]) -> str:
    """An output module whose call() makes the GEMM calls named in ``calls`` (``aten`` or a template
    kernel's name, defined once however often it is launched), each at its own call site."""
    body = "\n".join(
        f"        extern_kernels.mm(buf{i}, w{i}, out=buf{i + 1})" if c == "aten"
        else f"        {c}.run(buf{i}, w{i}, buf{i + 1}, grid=grid(4096), stream=stream0)"
        for i, c in enumerate(calls))
    return ("from torch._inductor.select_algorithm import extern_kernels\n"
            "async_compile = AsyncCompile()\n\n"
            + "".join(_template(name, block_m, stages) for name, block_m, stages in
                      (("triton_tem_fused_mm_0", 128, 3), ("triton_tem_fused_addmm_1", 64, 4)) if name in calls)
            + "async_compile.wait(globals())\n\n"
            "def call(args):\n"
            "    with torch.cuda._DeviceGuard(0):\n" + body + "\n")


def test_each_call_site_is_one_pick_and_a_reused_template_counts_at_each_launch() -> None:
    picks = _picks()
    got = picks.picks_of(_module(["triton_tem_fused_mm_0"] * 3 + ["triton_tem_fused_addmm_1", "aten", "aten"]))
    mm = [p for p in got if "triton_tem_fused_mm[" in p]
    addmm = [p for p in got if "triton_tem_fused_addmm[" in p]
    assert len(got) == 6 and len(mm) == 3 and len(addmm) == 1 and got.count("aten mm") == 2, got
    assert mm[0] == "template triton_tem_fused_mm[EVEN_K=True,BLOCK_M=128,BLOCK_N=128] stages=3 warps=4", mm
    assert addmm[0].endswith("BLOCK_M=64,BLOCK_N=128] stages=4 warps=4"), addmm


def test_two_processes_that_decided_one_call_site_differently_differ_by_two() -> None:
    """Process A launched the reused template at three call sites; B called ATen at one of them.
    Per definition (the count until stop 62) A had 1 template and 1 ATen pick, B 1 and 2: they
    differed in 1, and their totals (2, 3) did not match although both made four GEMM calls."""
    picks = _picks()
    count = lambda source: dict(__import__("collections").Counter(picks.picks_of(source)))  # noqa: E731
    a = count(_module(["triton_tem_fused_mm_0"] * 3 + ["aten"]))
    b = count(_module(["triton_tem_fused_mm_0"] * 2 + ["aten", "aten"]))
    assert sum(a.values()) == sum(b.values()) == 4, (a, b)
    assert picks.differ(a, b) == 2 and picks.differ(a, a) == 0, (a, b)


def _table(op: str, rows: list[tuple[str, float, str]]) -> str:
    """One decision's table as Inductor's ``log_results`` writes it (the fastest first)."""
    best = min(ms for _, ms, _ in rows)
    return (f"AUTOTUNE {op}(2048x768, 768x3072)\nstrides: [768, 1], [3072, 1]\ndtypes: torch.bfloat16, torch.bfloat16\n"
            + "".join(f"  {name} {ms:.4f} ms {best / ms:.1%} {desc}\n" for name, ms, desc in rows)
            + "SubProcess AUTOTUNE benchmarking takes 1.2 seconds and 0.0 seconds precompiling for 3 choices\n")


def test_decisions_decided_differently_are_sized_by_each_process_own_timings() -> None:
    """Process A picked ATen's mm, B a template that A timed 2% slower and B timed 1.5% faster than
    ATen: a near-tie, sized by the larger gap. The template's number (its order of making) differs
    between the processes and is not part of the choice."""
    picks = _picks()
    cfg = "BLOCK_K=64, BLOCK_M=128, BLOCK_N=128, num_stages=3, num_warps=8"
    a = picks.decisions_of("noise before\n" + _table("mm", [("mm", 0.0200, ""), ("triton_mm_7", 0.0204, cfg),
                                                            ("triton_mm_3", 0.0300, "BLOCK_M=64")]))
    b = picks.decisions_of(_table("mm", [("triton_mm_12", 0.0197, cfg), ("mm", 0.0200, "")]))
    key = next(iter(a))
    assert list(a) == list(b) == [key] and key.startswith("mm(2048x768, 768x3072) strides")
    assert list(a[key]) == ["mm", f"triton_mm {cfg}", "triton_mm BLOCK_M=64"] and a[key]["mm"] == 1.0
    vs = picks.compare_decisions(a, b)
    (d,) = vs["differing"]
    assert vs["compared"] == 1 and vs["same"] == 0 and vs["by_gap"]["<3%"] == 1, vs
    assert abs(d["gap_a"] - 0.02) < 0.001 and abs(d["gap_b"] - 0.015) < 0.001 and d["gap"] == d["gap_a"], d
    assert picks.compare_decisions(a, a)["same"] == 1
    # a pick the other process did not list at all (beyond its displayed choices) is not a near-tie
    c = picks.decisions_of(_table("mm", [("triton_mm_1", 0.0150, "BLOCK_M=32"), ("mm", 0.0200, "")]))
    assert picks.compare_decisions(a, c)["by_gap"][">=10% or unlisted"] == 1


def test_aten_over_the_templates_median_singles_out_a_process_whose_aten_timing_was_inflated() -> None:
    """Each decision's fastest ATen choice over its templates' median does not depend on the pick;
    a process whose ATen timing alone doubled stands out against three others, which do not."""
    picks = _picks()
    templates = [("triton_mm_1", 0.0200, "BLOCK_M=64"), ("triton_mm_2", 0.0300, "BLOCK_M=128"),
                 ("triton_mm_3", 0.0400, "BLOCK_M=32"), ("triton_mm_4", math.inf, "BLOCK_M=256")]  # failed: left out

    def run(aten_ms: float) -> dict[str, float]:
        rows = sorted([*templates, ("mm", aten_ms, ""), ("bias_addmm", aten_ms * 1.5, "")], key=lambda r: r[1])
        return picks.aten_against_templates(picks.decisions_of(_table("mm", rows)))

    quiet = run(0.0180)
    (key,) = quiet
    assert abs(quiet[key] - 0.0180 / 0.0300) < 0.002, quiet  # mm, the faster ATen choice, over the median
    runs = {"a": quiet, "b": run(0.0183), "c": run(0.0178), "inflated": run(0.0360)}
    assert runs["inflated"][key] > 1.0  # ATen now looks slower than the median template
    ((name, decision, off),) = picks.aten_outliers(runs)
    assert (name, decision) == ("inflated", key) and abs(off - 2.0) < 0.05
    assert picks.aten_outliers({"a": quiet, "inflated": runs["inflated"]}) == []  # two runs have no median
