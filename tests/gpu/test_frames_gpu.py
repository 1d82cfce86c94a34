"""GPU check (run on the GPU machine; skipped without a GPU): the GPT-2-style training step of the
overhead benchmark (transformers config, bf16, 4x512), compiled with compiled frames on
(``RAYCOMPILE_DYNAMO_CACHE=1``) in one process, then started in a NEW process with empty raycompile,
Inductor and Triton caches and the same shared tier, as on a fresh node: the warm process loads the
compiled frames (Dynamo traces only those torch cannot save), runs no compile job and no benchmark,
and its loss is bitwise the cold process's. Each case is a process of ``benchmarks/overhead.py``,
which starts its own Ray head (as an operator's ``ray start --head``)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

BENCH = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "overhead.py"


def test_gpt2_training_step_warm_starts_from_compiled_frames(tmp_path: pathlib.Path) -> None:
    proc = subprocess.run([sys.executable, str(BENCH), "--models", "gpt2", "--cases", "frames-cold-file",
                           "frames-warm-file", "--label", "gputest", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    rows = json.loads((tmp_path / "overhead_gputest.json").read_text())["results"]["gpt2"]
    cold, warm = rows["frames-cold-file"], rows["frames-warm-file"]
    print("\n" + proc.stdout[-2500:])
    assert cold["frames_traced"] > 0 and cold["frames_published"] >= 1, cold
    assert warm["frames_loaded"] > 0 and warm["frames_traced"] <= cold["frames_unsaveable"], (cold, warm)
    assert warm["jobs"] == 0 and (warm["jobs_local"] or 0) == 0 and not warm["benchmarks"], warm
    assert warm["loss"] == cold["loss"]
