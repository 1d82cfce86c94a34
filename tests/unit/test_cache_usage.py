"""The cache directory's lasting counters and cap (cache/usage.py), as ``ccache -s / -z / -M``
keep theirs: summed across sessions and processes, zeroed with a time, never a crash at close."""

from __future__ import annotations

import json
import logging
import pathlib
import subprocess
import sys
import textwrap

import pytest

from raycompile.cache.usage import COUNTERS, Usage
from raycompile.observe.stats import Stats


def test_every_counter_of_a_session_is_kept() -> None:
    numeric = {k for k, v in Stats().snapshot().items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    assert numeric == set(COUNTERS), "a number in Stats.snapshot that raycompile/counters.py does not declare"


def test_sessions_add_up(tmp_path: pathlib.Path) -> None:
    usage = Usage(str(tmp_path / "c"))
    assert usage.read() == {**dict.fromkeys(COUNTERS, 0), "updated_at": None, "zeroed_at": None}
    snap = Stats()
    snap.add(local_hits=3, shared_hits=1, misses=2, refused=1, jobs=2, compile_seconds=1.25)
    usage.record(snap.snapshot())
    usage.record({"local_hits": 2, "misses": 1, "compile_seconds": 0.5, "nodes": {"n1": 2}, "new_thing": 7,
                  "corrupt": "x", "evictions": True})
    got = Usage(str(tmp_path / "c")).read()  # another object, as another process would
    assert (got["local_hits"], got["shared_hits"], got["misses"], got["refused"], got["jobs"]) == (5, 1, 3, 1, 2)
    assert got["compile_seconds"] == 1.75 and got["corrupt"] == 0 and got["evictions"] == 0
    assert "new_thing" not in got and "nodes" not in got
    assert got["updated_at"] is not None and got["zeroed_at"] is None


def test_zero_keeps_the_time(tmp_path: pathlib.Path) -> None:
    usage = Usage(str(tmp_path))
    usage.record({"misses": 4})
    usage.zero()
    got = usage.read()
    assert got["misses"] == 0 and isinstance(got["zeroed_at"], float)
    usage.record({"misses": 1})
    again = usage.read()
    assert again["misses"] == 1 and again["zeroed_at"] == got["zeroed_at"]


def test_concurrent_processes_all_count(tmp_path: pathlib.Path) -> None:
    """Four processes, 40 records each, at once: the lock makes every one of them count."""
    code = textwrap.dedent(f"""
        from raycompile.cache.usage import Usage
        u = Usage({str(tmp_path)!r})
        for _ in range(40):
            u.record({{"local_hits": 1, "bytes_read": 10, "compile_seconds": 0.5}})
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    got = Usage(str(tmp_path)).read()
    assert (got["local_hits"], got["bytes_read"], got["compile_seconds"]) == (160, 1600, 80.0)


def test_record_never_raises_where_it_cannot_write(tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture) -> None:
    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("not a directory")
    usage = Usage(str(in_the_way / "cache"))  # its parent is a file: nothing can be created there
    with caplog.at_level(logging.WARNING, logger="raycompile.cache"):
        usage.record({"local_hits": 1})
    assert "cannot record this session's cache statistics" in caplog.text
    assert usage.read()["local_hits"] == 0 and usage.max_bytes() is None
    with pytest.raises(OSError):
        usage.zero()
    with pytest.raises(OSError):
        usage.set_max_bytes(10)


def test_a_damaged_stats_file_reads_as_zeros_and_is_rewritten(tmp_path: pathlib.Path) -> None:
    (tmp_path / "stats.json").write_text("{half")
    (tmp_path / "config.json").write_text('["not", "a", "mapping"]')
    usage = Usage(str(tmp_path))
    assert usage.read()["misses"] == 0 and usage.max_bytes() is None
    usage.record({"misses": 2})
    assert json.loads((tmp_path / "stats.json").read_text())["counters"] == {"misses": 2}


def test_the_lasting_cap(tmp_path: pathlib.Path) -> None:
    usage = Usage(str(tmp_path))
    assert usage.max_bytes() is None
    usage.set_max_bytes(5 * 10**9)
    assert Usage(str(tmp_path)).max_bytes() == 5 * 10**9
    usage.set_max_bytes(0)  # no cap, as ccache -M 0
    assert usage.max_bytes() == 0
    usage.record({"misses": 1})  # the counters and the cap are kept apart
    usage.zero()
    assert usage.max_bytes() == 0
    usage.set_max_bytes(None)
    assert usage.max_bytes() is None
    for bad in (-1, 1.5, True, "5G"):
        with pytest.raises(ValueError, match="max_bytes must be an integer >= 0"):
            usage.set_max_bytes(bad)  # type: ignore[arg-type]
