"""Diagnosis: which call begins raycompile's Ray start in a cold compile (prints its stack)."""
import sys
import traceback

import torch

import raycompile
from raycompile.orchestrator import startup

stock_begin = startup.Startup.begin


def begin(self):
    if not self.begun:
        print("BEGIN CALLED FROM:\n" + "".join(traceback.format_stack(limit=14)), flush=True)
    return stock_begin(self)


startup.Startup.begin = begin
sys.path.insert(0, "benchmarks")
from overhead import build  # noqa: E402

raycompile.enable()
step, (ids,) = build("gpt2", "cuda" if torch.cuda.is_available() else "cpu")
loss = torch.compile(step)(ids)
print("loss", float(loss.detach()), "begun", raycompile.stats()["ray_start_seconds"], flush=True)
raycompile.disable()
