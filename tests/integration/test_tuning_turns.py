"""A kernel's first-run tuning taken in turns by the processes of a node (``cache/turns.py``,
``compat.tuning.tuning_in_turns``): the ranks of a job that run the same kernel at once time its
configs once between them, and every rank ends with the same pick. Two real processes, the real
seam over Inductor's real ``AutotuneCache`` (its ``.best_config`` files) and real ``flock``s; the
kernel and its timing are stand-ins (``turns_driver.py``: this box has no GPU)."""

from __future__ import annotations

import os
import pathlib
import time

import procs
import pytest

from raycompile.cache import turns

pytest.importorskip("triton")

HERE = pathlib.Path(__file__).parent
A_PICKS = {"XBLOCK": 256, "num_warps": 4}  # A's configs' pick (config 2)
A_DESCENT = {"XBLOCK": 2048, "num_warps": 8}  # A's descent from it
B_OWN = {"XBLOCK": 512, "num_warps": 8}  # B's descent from its own pick (config 0)


def pair(tmp: pathlib.Path, first: list[str], second: list[str]) -> tuple[dict | None, dict]:
    """Process A (pick 2, ``first``'s options) takes the kernel's turn and, once another process
    announces itself, holds it; B (pick 0, ``second``'s options) is started once A is tuning (or
    has taken the turn ahead, with ``--reserve``). A's results are None where it was to die."""
    cache = tmp / "inductor"
    cache.mkdir()
    a = procs.start(HERE / "turns_driver.py", [str(cache), str(tmp / "a.pt"), "2", "--await-waiter", *first],
                    dict(os.environ), tmp / "a.pt", timeout=180)
    deadline = time.monotonic() + 120
    while not list(cache.glob("reserved.*" if "--reserve" in first else "tuning.*")):
        assert time.monotonic() < deadline, "process A never started tuning"
        time.sleep(0.05)
    b = procs.start(HERE / "turns_driver.py", [str(cache), str(tmp / "b.pt"), "0", *second], dict(os.environ),
                    tmp / "b.pt", timeout=180)()
    if "--die-in" in first:
        with pytest.raises(AssertionError):
            a()
        return None, b
    return a(), b


@pytest.mark.parametrize("coordesc", [False, True], ids=["configs", "configs-then-coordinate-descent"])
def test_the_second_process_takes_the_first_ones_pick_and_times_nothing(tmp_path: pathlib.Path,
                                                                        coordesc: bool) -> None:
    descent = ["--coordesc", "--descent", "2"] if coordesc else []
    a, b = pair(tmp_path, ["--hold", "1", *descent], descent[:1])
    assert a is not None
    assert a["ran"] == ["tuning", "configs", *(["coordesc"] if coordesc else [])] and a["adopted"] == []
    # B waited for A's turn (through A's coordinate descent too: the configs' pick A filed first,
    # marked as descent's, is not the one A ends with), timed nothing and ended with A's pick
    assert b["ran"] == [] and len(b["adopted"]) == 1, b
    assert b["adopted"][0][0] == "triton_poi_fused_0" and b["adopted"][0][1] > 0.5, b
    assert a["config"] == (A_DESCENT if coordesc else A_PICKS) and b["config"] == a["config"], (a, b)
    assert a["let_go"] and b["let_go"] and b["finished"]  # the turn is free, its work marked whole


def test_the_process_that_loaded_a_kernel_with_the_compile_workers_tunes_it_first(tmp_path: pathlib.Path) -> None:
    """A (the process that compiled the kernel's module: it has the node's compile workers) took
    the kernel's turn ahead when the module loaded (``Reservations``). B reaches the kernel 2 s
    before A does: it waits for A's pick instead of tuning first on its own and making A wait for
    it (so a job's waiting ranks never hold up the rank that compiles). Without the turn taken
    ahead, B would tune and A would take B's pick."""
    a, b = pair(tmp_path, ["--reserve", "60", "--late", "2", "--hold", "0.5", "--coordesc", "--descent", "0.5"],
                ["--coordesc"])
    assert a is not None
    assert a["ran"] == ["tuning", "configs", "coordesc"] and a["adopted"] == [], a
    assert b["ran"] == [] and len(b["adopted"]) == 1 and b["adopted"][0][1] > 2.0, b
    assert a["config"] == A_DESCENT and b["config"] == A_DESCENT
    assert a["let_go"] and b["let_go"] and b["finished"]


# extended (docs/testing.md, stop 60): turns let go of in the file's other tests
@pytest.mark.extended
def test_a_turn_taken_ahead_for_a_kernel_never_run_is_let_go_of(tmp_path: pathlib.Path) -> None:
    """A takes the kernel's turn ahead (kept 1 s unclaimed) but never runs the kernel (it sleeps
    20 s, then exits): B waits for it about 1 s, not until A exits, then tunes the kernel itself."""
    a, b = pair(tmp_path, ["--reserve", "1", "--never-run", "20"], ["--coordesc"])
    assert b["ran"] == ["tuning", "configs", "coordesc"] and b["adopted"] == [], b
    assert b["config"] == B_OWN and b["finished"]
    assert a is not None and b["ended"] < a["exited"] - 10, (a, b)  # B was done while A still slept


@pytest.mark.parametrize("where", ["configs", "descent"])
def test_a_holder_that_dies_mid_tuning_leaves_the_next_process_to_tune(tmp_path: pathlib.Path, where: str) -> None:
    """A killed before it filed anything, or after it filed its configs' pick (marked as
    descent's) but before its descent ended: B takes nothing from it and tunes the kernel itself."""
    _, b = pair(tmp_path, ["--hold", "1", "--coordesc", "--descent", "1", "--die-in", where], ["--coordesc"])
    assert b["ran"] == ["tuning", "configs", "coordesc"] and b["adopted"] == [], b
    assert b["config"] == B_OWN and b["finished"]


def test_a_pick_that_cannot_be_taken_here_is_tuned_here(tmp_path: pathlib.Path) -> None:
    """A's coordinate descent filed a config that B cannot compile (on the GPU: a kernel compiled
    in a worker whose Triton function did not load): B tunes the kernel itself, as stock, instead
    of failing its step."""
    a, b = pair(tmp_path, ["--hold", "1", "--coordesc"], ["--coordesc", "--broken"])
    assert a is not None and b["adopted"] == [] and b["ran"] == ["tuning", "configs", "coordesc"], b
    assert b["config"] == B_OWN


def test_a_process_that_gave_up_waiting_never_takes_its_own_filing(tmp_path: pathlib.Path) -> None:
    """B gives up waiting after 0.5 s and times its configs itself (4 s), while A ends its whole
    tuning and lets go: B's filed pick, marked as descent's by Inductor, is its own, and B goes on
    to its own descent rather than taking it (nor does it wait for the turn again)."""
    a, b = pair(tmp_path, ["--hold", "2", "--coordesc"], ["--coordesc", "--wait", "0.5", "--hold", "4"])
    assert a is not None and a["config"] == A_DESCENT
    assert b["ran"] == ["tuning", "configs", "coordesc"] and b["adopted"] == [], b
    assert b["config"] == B_OWN


def test_a_wait_past_its_time_out_tunes_without_the_turn(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "sub" / "k.best_config")  # its directory made with it
    held = turns.take(path)
    assert held is not None and held.held and not held.waited and not held.finished
    started = time.monotonic()
    late = turns.take(path, wait_s=0.3)  # another open of the lock file: flock tells them apart
    assert late is not None and late.waited and not late.held and 0.3 <= time.monotonic() - started < 5
    held.release(done=True)
    again = turns.take(path, wait_s=0.3)
    assert again is not None and again.held and not again.waited and again.finished
    again.release(done=False)  # a holder that failed: the next one finds the work unfinished
    last = turns.take(path, wait_s=0.3)
    assert last is not None and last.held and not last.finished
    last.release(done=True)
