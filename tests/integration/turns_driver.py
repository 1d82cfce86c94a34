"""One process of a node at a kernel's first-run tuning, for test_tuning_turns.py.

    turns_driver.py CACHE_DIR OUT PICK [--hold S] [--descent S] [--wait S] [--coordesc]
                    [--await-waiter] [--die-in configs|descent] [--broken]
                    [--reserve S [--late S | --never-run S]]

The kernel is a stand-in for a ``CachingAutotuner`` (this box has no GPU to run a real one on):
three configs, filed through Inductor's real ``AutotuneCache`` in CACHE_DIR. Its tuning is a
named stand-in for a GPU's timing: ``timed_configs`` picks config PICK after ``--hold`` seconds
and files it as Inductor's ``autotune_to_one_config`` does (marked as coordinate descent's when
descent is on, as 2.13 marks it); ``coordinate_descent`` (with ``--coordesc``) takes
``--descent`` seconds, moves the pick to a config none of the three is, as coordinate descent
does, and files it. The seam under test (``compat.tuning.tuning_in_turns``) wraps both, with the
real turns (``cache.turns``, waits of at most ``--wait`` seconds); the steps are those
``CachingAutotuner.run`` takes at a first run. Saves the config it ended with, which stand-ins
ran, and what it counted.

- ``--await-waiter``: once tuning (so holding the kernel's turn), the process waits for another
  to announce itself (``waiting.*`` in CACHE_DIR, written just before its steps), then holds on.
- ``--die-in``: the process exits inside its configs' timing (before filing anything) or inside
  its descent (after filing the configs' pick): a rank killed mid-tuning.
- ``--broken``: no config beyond the kernel's own three can be compiled here (as a kernel whose
  Triton function failed to load).
- ``--reserve``: the process takes the kernel's turn ahead, as one that compiled the kernel's
  module does when it loads it (``compat.tuning.Reservations``, kept ``--reserve`` seconds
  unclaimed), writes ``reserved.*`` into CACHE_DIR, waits for another process to announce itself,
  then reaches the kernel ``--late`` seconds later (after the other one), or not at all for
  ``--never-run`` seconds (then exits without running it)."""

from __future__ import annotations

import argparse
import functools
import os
import threading
import time
import types
from typing import Any

import torch
import triton
from torch._inductor.runtime.autotune_cache import AutotuneCache
from torch._inductor.runtime.triton_heuristics import CachingAutotuner

from raycompile.cache import turns
from raycompile.wrapper import compat


class Launcher:
    def __init__(self, config: Any) -> None:
        self.config = config


class Kernel(types.SimpleNamespace):
    """The stand-in kernel; its ``run`` is stock's, as a CachingAutotuner's (the seam keeps a turn
    through coordinate descent only for a kernel whose run is stock's: that run calls it next)."""

    run = CachingAutotuner.run


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("cache_dir")
    p.add_argument("out")
    p.add_argument("pick", type=int)
    p.add_argument("--hold", type=float, default=0.0)
    p.add_argument("--descent", type=float, default=0.0)
    p.add_argument("--wait", type=float, default=turns.WAIT_S)
    p.add_argument("--coordesc", action="store_true")
    p.add_argument("--await-waiter", action="store_true")
    p.add_argument("--die-in", choices=("configs", "descent"))
    p.add_argument("--broken", action="store_true")
    p.add_argument("--reserve", type=float)
    p.add_argument("--late", type=float, default=0.0)
    p.add_argument("--never-run", type=float)
    a = p.parse_args()
    meta = {"coordinate_descent_tuning": a.coordesc, "autotune_local_cache": True}
    configs = [triton.Config({"XBLOCK": block}, num_warps=4, num_stages=1) for block in (64, 128, 256)]
    cache = AutotuneCache.create(meta, os.path.join(a.cache_dir, "cabcdef0123.py"), "configs-hash")
    assert cache is not None and cache.local_cache is not None
    kernel = Kernel(
        fn=types.SimpleNamespace(__name__="triton_poi_fused_0", fn=main), inductor_meta=meta, configs=configs,
        launchers=[Launcher(c) for c in configs], compile_results=[], save_cache_hook=cache.save, lock=threading.Lock(),
        _precompile_config=lambda cfg: types.SimpleNamespace(make_launcher=lambda: Launcher(cfg)))
    if a.broken:
        kernel._precompile_config = lambda cfg: 1 / 0
    ran: list[str] = []

    def await_waiter() -> None:
        deadline = time.monotonic() + 90
        mine = f"waiting.{os.getpid()}"
        while not any(n.startswith("waiting.") and n != mine for n in os.listdir(a.cache_dir)):
            assert time.monotonic() < deadline, "no other process came"
            time.sleep(0.02)

    def started() -> None:
        ran.append("tuning")
        open(os.path.join(a.cache_dir, f"tuning.{os.getpid()}"), "w").close()  # the test starts the next process
        if a.await_waiter:
            await_waiter()
        time.sleep(a.hold)

    def timed_configs(self: Any, *args: Any, **kwargs: Any) -> None:  # stand-in for the GPU's timing
        started()
        if a.die_in == "configs":
            os._exit(3)
        ran.append("configs")
        best = self.launchers[a.pick]
        self.launchers = [best]
        self.save_cache_hook(best.config, 0, found_by_coordesc=a.coordesc)  # as autotune_to_one_config files it

    def coordinate_descent(self: Any, launcher: Any, *args: Any, **kwargs: Any) -> Any:  # stand-in too
        if "tuning" not in ran:
            started()
        time.sleep(a.descent)
        if a.die_in == "descent":
            os._exit(3)
        ran.append("coordesc")
        moved = triton.Config({"XBLOCK": launcher.config.kwargs["XBLOCK"] * 8}, num_warps=8, num_stages=1)
        self.save_cache_hook(moved, 0, found_by_coordesc=True)
        moved.found_by_coordesc = True
        return Launcher(moved)

    counted: list[tuple[str, float]] = []
    CachingAutotuner.autotune_to_one_config = timed_configs
    CachingAutotuner.coordinate_descent_tuning = coordinate_descent
    take = functools.partial(turns.take, wait_s=a.wait)
    reservations = None
    if a.reserve is not None:  # the kernel's module just loaded in the process that compiled it
        reservations = compat.tuning.Reservations(turns.try_take, hold_s=a.reserve)
        assert reservations.reserve([kernel]) == 1
        open(os.path.join(a.cache_dir, f"reserved.{os.getpid()}"), "w").close()  # the test starts the next
        await_waiter()
        if a.never_run is not None:
            time.sleep(a.never_run)
            reservations.close()
            torch.save({"exited": time.time()}, a.out)
            return
        time.sleep(a.late)
    claim = reservations.claim if reservations is not None else None
    with compat.tuning.tuning_in_turns(take, lambda name, waited: counted.append((name, waited)), claim):
        open(os.path.join(a.cache_dir, f"waiting.{os.getpid()}"), "w").close()
        # the steps of CachingAutotuner.run at a kernel's first run
        if len(kernel.launchers) > 1:
            CachingAutotuner.autotune_to_one_config(kernel)
        if not getattr(kernel.launchers[0].config, "found_by_coordesc", False) and a.coordesc:
            kernel.launchers = [CachingAutotuner.coordinate_descent_tuning(kernel, kernel.launchers[0])]
    (launcher,) = kernel.launchers
    final = {**launcher.config.kwargs, "num_warps": launcher.config.num_warps}
    path = compat.tuning.best_config_path(kernel)
    # this process let go of its turn, its work marked whole. The other process takes it too for
    # this check, about now: held only while read, so a wait here is that check's instant, never a
    # tuning's (both ended before either check)
    again = turns.take(path, wait_s=10)
    assert again is not None
    finished, let_go = again.finished, again.held and again.waited_s < 1.0
    again.release(done=again.finished)
    if reservations is not None:
        reservations.close()
    torch.save({"config": final, "ran": ran, "adopted": counted, "finished": finished, "let_go": let_go,
                "ended": time.time()}, a.out)


if __name__ == "__main__":
    main()
