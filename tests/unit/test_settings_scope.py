"""``Settings.scope``: settings for a block of code without touching ``os.environ``."""

from __future__ import annotations

import threading

import pytest

from raycompile.errors import SettingsError
from raycompile.settings import Settings


def test_a_scope_wins_over_the_environment_and_arguments_win_over_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYCOMPILE_JOB_TIMEOUT_S", "5")
    monkeypatch.setenv("RAYCOMPILE_RETRIES", "2")
    with Settings.scope(job_timeout_s=7, compile_jobs="local"):
        s = Settings.resolve()
        assert (s.job_timeout_s, s.compile_jobs, s.retries) == (7.0, "local", 2)
        assert Settings.resolve(job_timeout_s=9).job_timeout_s == 9.0
        with Settings.scope(retries=0, job_timeout_s=None):  # nested; None leaves a setting alone
            s = Settings.resolve()
            assert (s.retries, s.job_timeout_s) == (0, 7.0)
        assert Settings.resolve().retries == 2
    assert Settings.resolve().job_timeout_s == 5.0 and Settings.resolve().compile_jobs != "local"


def test_a_scope_is_this_threads_own() -> None:
    seen: list[str] = []
    outside = Settings.resolve().compile_jobs  # the environment's (the test suite sets one)
    with Settings.scope(compile_jobs="local"):
        thread = threading.Thread(target=lambda: seen.append(Settings.resolve().compile_jobs))
        thread.start()
        thread.join()
        assert Settings.resolve().compile_jobs == "local"
    assert seen == [outside] and outside != "local"


def test_a_bad_scope_fails_with_the_setting_named() -> None:
    with pytest.raises(SettingsError, match="unknown setting.*job_timeout"):
        with Settings.scope(job_timeout=3):
            pass
    with Settings.scope(job_timeout_s="soon"), pytest.raises(SettingsError, match="job_timeout_s"):
        Settings.resolve()


def test_a_worker_gets_the_drivers_cache_and_jobs_and_joins_its_own_cluster() -> None:
    from raycompile.settings import FOR_WORKER, Settings

    driver = Settings.resolve(address="ray://head:10001", shared_cache="file:///tmp/x", job_timeout_s=42.0,
                              progress=True, graph_compiles="cluster", cache_max_bytes=123)
    worker = driver.for_worker()
    assert worker["address"] == "auto" and set(worker) == {"address", *FOR_WORKER}
    assert worker["shared_cache"] == "file:///tmp/x" and worker["job_timeout_s"] == 42.0
    assert worker["cache_max_bytes"] == 123
    assert "progress" not in worker and "graph_compiles" not in worker  # a driver's own
    Settings.resolve(**worker)  # a valid session of its own
