"""The facade's one piece of state, the current session: what ``enable`` and ``disable`` leave."""

from __future__ import annotations

import pytest

import raycompile
from raycompile import session as session_module


def test_a_session_that_fails_to_start_leaves_none_current(tmp_path: object) -> None:
    """``enable()`` twice, the second with a bad setting: the first is closed, nothing is current,
    and ``stats()`` still answers from the closed one."""
    first = raycompile.enable(address="auto", fallback=True, cache_dir=str(tmp_path), metrics=False)
    try:  # no cluster on this machine (the test's own env has none at address auto): compiles would fall back
        assert session_module.current() is first and raycompile.is_enabled()
        with pytest.raises(raycompile.SettingsError, match="s3://"):
            raycompile.enable(shared_cache="s3://bucket/cache", cache_dir=str(tmp_path))
        assert session_module.current() is None and not raycompile.is_enabled()
        assert session_module.last() is first and first._closed
        assert isinstance(raycompile.stats()["jobs"], int)
    finally:
        raycompile.disable()


def test_a_session_is_a_context_manager(tmp_path: object) -> None:
    with raycompile.enable(address="auto", fallback=True, cache_dir=str(tmp_path), metrics=False) as s:
        assert session_module.current() is s
    assert session_module.current() is None and s._closed and raycompile.report()
