"""The backward of a compiled function's frames (``wrapper/frames.py``), as stock lowers it: at a
training frame's first backward, so that a cold compile costs what stock's does. A frame's entry is
complete, and written, once that backward ran. Two exceptions:

- in a rank of a job of several (``job_of_ranks``) it is lowered with the forward: the owner of a flight hands
  its waiters whole frames as soon as they are compiled, before its step waits on them in a
  collective;
- a training frame whose backward never ran (a forward with grad-requiring parameters, called
  without one) is lowered ahead (``lower_ahead``, ``compat.autograd``), off the first output; where
  that cannot be done the caller writes a note, and the next process lowers it with the forward.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
from collections.abc import Iterator

import torch

from . import compat

log = logging.getLogger("raycompile.frames")

# a function whose frames were traced this long ago and still lack a backward ran none
NO_BACKWARD_S = 60.0


def job_of_ranks() -> bool:
    """Whether this process is a rank of a job of several (torchrun's variables, or a process group
    of more than one): its frames' backward is lowered with the forward. A job of one rank
    (``WORLD_SIZE=1``, as ``torchrun --nproc-per-node 1`` on one node sets beside ``RANK=0``) has
    no rank to hand frames to: its backward is lowered at its first backward, as stock lowers it
    (which also times max-autotune's backward candidates after the forward ran, as stock does)."""
    env = os.environ
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():  # the job's own answer
        return dist.get_world_size() > 1
    if env.get("WORLD_SIZE", "").isdigit():
        return int(env["WORLD_SIZE"]) > 1
    return env.get("RANK", "").isdigit() or env.get("LOCAL_RANK", "").isdigit()


def exiting() -> bool:
    """Whether the interpreter is exiting (its thread pools, Inductor's and the farm's, refuse work:
    ``concurrent.futures`` stops them before ``atexit`` handlers run)."""
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as probe:
            probe.submit(int).result(timeout=10)
    except RuntimeError:
        return True
    return False


@contextlib.contextmanager
def _on_device(index: int | None) -> Iterator[None]:
    """The CUDA device ``index`` current on this thread while inside (a timer's thread starts on
    device 0, where the frame was traced on another); nothing where it is None."""
    if index is None:
        yield
        return
    with torch.cuda.device(index):
        yield


def lower_ahead(due: dict[str, int | None]) -> tuple[set[str], int]:
    """Lower now the backwards that the frames of ``due`` (source id -> the CUDA device they were
    traced on) lack, each on its device. Returns (the source ids whose packages are then
    complete, how many backwards were lowered). Where the interpreter is exiting, none."""
    if exiting():
        # no pool takes a kernel now, and compiling them one by one would hold the exit up
        log.debug("raycompile: exiting: %d functions' backwards not lowered ahead", len(due))
        return set(), 0
    lowered = 0
    for index in set(due.values()):
        sids = [sid for sid, where in due.items() if where == index]
        try:
            with _on_device(index):
                lowered += compat.autograd.lower_backwards(compat.precompile.missing_backends(sids))[0]
        except Exception as e:  # noqa: BLE001 - a seam moved, say: left to the caller's note
            log.debug("raycompile: no backward lowered ahead (%s: %s)", type(e).__name__, e)
    ready, _ = compat.precompile.recorded()
    return {sid for sid in due if sid in ready}, lowered
