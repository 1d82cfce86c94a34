"""Two publishes of compiled frames at once (``FrameCache.publish``): the publish timer's, already
running when ``disable()`` cancels it, and ``close()``'s own. Each found the same package unwritten
and wrote it, so one function's frames went out as two generations (``dynamo_published`` 2 where
the lazy-backward test expects 1, seen under load in CI's run). Now one waits for the other, for
at most ``PUBLISH_WAIT_S``.

Dynamo's ``save_to_dynamo_cache`` is replaced by a stand-in (named ``SlowSave``) that holds the first
save open until the second publish has started, and then marks the package written as
``FrameCache.write`` does: the real one needs a traced function, and the race is in ours."""

from __future__ import annotations

import threading
import time

import pytest

from raycompile.cache.keys import OUTPUT_MODULE_TAG
from raycompile.observe.stats import Stats
from raycompile.wrapper import compat
from raycompile.wrapper.frames import FrameCache, _Known


class SlowSave:
    """Stands in for Dynamo's save: the first call waits for ``go``; each marks its packages written."""

    def __init__(self, frames: FrameCache) -> None:
        self.frames, self.calls, self.go = frames, [], threading.Event()

    def __call__(self, sids: set[str]) -> None:
        self.calls.append(set(sids))
        if len(self.calls) == 1:
            assert self.go.wait(10), "the test never let the first save go on"
        for sid in sids:
            self.frames._known[sid].written_frames = 1


def publishing(monkeypatch: pytest.MonkeyPatch, written: list[int]) -> tuple[FrameCache, SlowSave, threading.Thread]:
    """A frame cache with one unwritten package, and the timer's publish of it started and held
    inside its save (``SlowSave``) until the test lets it go."""
    frames = FrameCache(None, Stats(), lambda: None, OUTPUT_MODULE_TAG)  # type: ignore[arg-type]
    frames._known["step"] = _Known(base="base", next_generation=0, label="step", traced=1)
    save = SlowSave(frames)
    monkeypatch.setattr(compat.precompile, "recorded", lambda: ({"step": 1}, set()))
    monkeypatch.setattr(compat.precompile, "save", save)
    timer = threading.Thread(target=lambda: written.append(frames.publish()))  # the timer's publish
    timer.start()
    deadline = time.monotonic() + 10
    while not save.calls and time.monotonic() < deadline:
        time.sleep(0.01)
    assert save.calls, "the first publish never reached its save"
    return frames, save, timer


def test_a_publish_that_starts_while_another_writes_does_not_write_the_same_frames_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    written: list[int] = []
    frames, save, timer = publishing(monkeypatch, written)
    closing = threading.Thread(target=lambda: written.append(frames.publish(final=True)))  # close()'s
    closing.start()
    time.sleep(0.3)  # without one publish at a time, the second finds the package unwritten here
    save.go.set()
    timer.join(10)
    closing.join(10)

    assert save.calls == [{"step"}], save.calls
    assert sorted(written) == [0, 1]


def test_a_publish_gives_up_waiting_for_one_that_does_not_end(monkeypatch: pytest.MonkeyPatch,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    """Nothing waits forever: a publish that finds another running past ``PUBLISH_WAIT_S`` returns
    without writing, and says so."""
    from raycompile.wrapper import frames as frames_module

    monkeypatch.setattr(frames_module, "PUBLISH_WAIT_S", 0.2)
    frames, save, timer = publishing(monkeypatch, [])
    started = time.monotonic()
    assert frames.publish(final=True) == 0
    assert time.monotonic() - started < 5
    assert "a write of compiled frames still runs" in caplog.text
    save.go.set()
    timer.join(10)
    assert save.calls == [{"step"}]
