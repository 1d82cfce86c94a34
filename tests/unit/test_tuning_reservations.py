"""Turns taken ahead (``compat.tuning.Reservations``): which kernels the process that compiled a
module reserves when it loads it (``will_tune``: those whose first run tunes, through stock's
``CachingAutotuner.run``), and that a forked child neither claims nor lets go of its parent's
turns. Real ``flock``s and Inductor's real ``AutotuneCache``; the kernel is a stand-in for a
``CachingAutotuner`` (its ``run`` is stock's), as the CI box has no GPU to load a real one on. The
two-process behaviour is in ``tests/integration/test_tuning_turns.py``."""

from __future__ import annotations

import multiprocessing
import os
import pathlib
import subprocess
import sys
import threading
import types
from typing import Any

import pytest

from raycompile.cache import turns
from raycompile.wrapper import compat

triton = pytest.importorskip("triton")

from torch._inductor.runtime.autotune_cache import AutotuneCache  # noqa: E402 - after the skip
from torch._inductor.runtime.triton_heuristics import CachingAutotuner, HeuristicType  # noqa: E402


class Kernel(types.SimpleNamespace):
    run = CachingAutotuner.run


class OwnRun(Kernel):
    def run(self, *args: Any, **kwargs: Any) -> None:  # as Inductor's DebugAutotuner: may tune nothing
        return None


def kernel(tmp: pathlib.Path, blocks: tuple[int, ...], coordesc: bool = True, cls: type = Kernel,
           found: bool = False, name: str = "cabcdef0123") -> Any:
    meta = {"coordinate_descent_tuning": coordesc, "autotune_local_cache": True}
    configs = [triton.Config({"XBLOCK": b}, num_warps=4, num_stages=1) for b in blocks]
    for cfg in configs:
        cfg.found_by_coordesc = found
    cache = AutotuneCache.create(meta, str(tmp / f"{name}.py"), "configs-hash")
    assert cache is not None
    return cls(fn=types.SimpleNamespace(__name__=f"triton_poi_{name}"), inductor_meta=meta, configs=configs,
               launchers=[types.SimpleNamespace(config=c) for c in configs], save_cache_hook=cache.save,
               heuristic_type=HeuristicType.POINTWISE, lock=threading.Lock())


def test_the_kernels_whose_first_run_tunes_are_the_ones_reserved(tmp_path: pathlib.Path) -> None:
    assert compat.tuning.will_tune(kernel(tmp_path, (64, 128, 256), coordesc=False))  # its configs timed
    assert compat.tuning.will_tune(kernel(tmp_path, (64,)))  # coordinate descent from its one config
    assert not compat.tuning.will_tune(kernel(tmp_path, (64,), coordesc=False))  # nothing to tune
    assert not compat.tuning.will_tune(kernel(tmp_path, (64,), found=True))  # restricted to descent's pick
    assert not compat.tuning.will_tune(kernel(tmp_path, (64, 128), cls=OwnRun))  # a run of its own
    filed_nowhere = kernel(tmp_path, (64, 128))
    filed_nowhere.save_cache_hook = None
    assert not compat.tuning.will_tune(filed_nowhere)
    reservations = compat.tuning.Reservations(turns.try_take)
    try:
        assert reservations.reserve([kernel(tmp_path, (64,), name="c1"), kernel(tmp_path, (64,), coordesc=False,
                                                                                 name="c2")]) == 1
    finally:
        reservations.close()


def _held_elsewhere(path: str) -> bool:
    """Whether another process finds the turn at ``path`` held (a fresh process: flock tells it apart)."""
    code = ("import sys; from raycompile.cache import turns; t = turns.try_take(sys.argv[1]); "
            "print('free' if t is not None else 'held'); t is not None and t.release(done=False)")
    out = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip() == "held"


def _child(reservations: Any, path: str, answer: Any) -> None:
    answer.put(reservations.claim(path) is None)
    reservations.close()  # as a child's own disable() at its exit would


def test_a_forked_child_neither_claims_nor_lets_go_of_its_parents_turns(tmp_path: pathlib.Path) -> None:
    k = kernel(tmp_path, (64, 128))
    path = compat.tuning.best_config_path(k)
    reservations = compat.tuning.Reservations(turns.try_take)
    try:
        assert reservations.reserve([k]) == 1 and _held_elsewhere(path)
        fork = multiprocessing.get_context("fork")
        answer = fork.Queue()
        child = fork.Process(target=_child, args=(reservations, path, answer))
        child.start()
        child.join(60)
        assert child.exitcode == 0 and answer.get(timeout=5) is True
        assert _held_elsewhere(path)  # the child's close let go of nothing
        turn = reservations.claim(path)  # the parent's own, still
        assert turn is not None and turn.held and os.getpid() == reservations._pid
        turn.release(done=False)
        assert not _held_elsewhere(path)
    finally:
        reservations.close()
