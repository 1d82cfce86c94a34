"""A driver process started now and its results read later, so that processes that do not
depend on each other run side by side (each is mostly one thread; the box has two cores)."""

from __future__ import annotations

import pathlib
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import torch


def start(script: pathlib.Path, args: list[str], env: dict[str, str], out: pathlib.Path,
          timeout: float) -> Callable[[], dict[str, Any]]:
    """``script`` run with ``args`` in ``env``; what this returns waits for it (at most
    ``timeout`` s, then kills it), checks it exited 0 and loads what it saved at ``out``."""
    proc = subprocess.Popen([sys.executable, str(script), *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)

    def results() -> dict[str, Any]:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, stdout[-3000:] + stderr[-6000:]
        return torch.load(out, weights_only=False)

    return results
