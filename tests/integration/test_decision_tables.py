"""benchmarks/picks.py reads max-autotune's decision tables from what real Inductor writes to
stderr: two stock processes compiling one model under max-autotune on this CPU (with ``freezing``
each linear layer is a decision between Inductor's C++ GEMM template and MKL's packed linear, both
timed for real). ranks.py compares the farm's decisions with stock's this way, so the keys must
match from one process to the next and every listed choice must be read."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

# two real max-autotune compiles, in parallel; a benchmark tool's reader, so extended (docs/testing.md)
pytestmark = [pytest.mark.slow, pytest.mark.extended]

PICKS = pathlib.Path(__file__).parents[2] / "benchmarks" / "picks.py"

SCRIPT = """
import torch
from torch._inductor import config
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(), torch.nn.Linear(96, 32)).eval()
with config.patch(freezing=True), torch.no_grad():
    torch.compile(m, mode="max-autotune-no-cudagraphs")(torch.randn(16, 64))
"""


def test_two_stock_processes_tables_are_read_and_matched_decision_for_decision(tmp_path: pathlib.Path) -> None:
    spec = importlib.util.spec_from_file_location("bench_picks", PICKS)
    picks = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(picks)  # type: ignore[union-attr]
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / f"inductor{i}"),
                                              "TORCHINDUCTOR_AUTOTUNE_NUM_CHOICES_DISPLAYED": "all"})
             for i in range(2)]
    errs = []
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        errs.append(err)
    a, b = (picks.decisions_of(e) for e in errs)
    # one decision per linear layer, each with both candidates, the pick first at 1.0
    assert len(a) == 2 and set(a) == set(b), (a, b)
    for table in (*a.values(), *b.values()):
        assert len(table) == 2 and next(iter(table.values())) == 1.0 and min(table.values()) == 1.0, table
        assert any(c.startswith("cpp_") for c in table) and "_mkl_linear" in table, table
    vs = picks.compare_decisions(a, b)
    assert vs["compared"] == 2 and vs["same"] + len(vs["differing"]) == 2, vs
