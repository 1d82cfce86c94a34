from __future__ import annotations

import pickle

import pytest

from raycompile import errors
from raycompile.settings import Settings


def test_arguments_then_environment_then_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert Settings.resolve().job_timeout_s == 600.0
    monkeypatch.setenv("RAYCOMPILE_JOB_TIMEOUT_S", "12.5")
    monkeypatch.setenv("RAYCOMPILE_FALLBACK", "no")
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    s = Settings.resolve()
    assert (s.job_timeout_s, s.fallback, s.address) == (12.5, False, "10.0.0.1:6379")
    s = Settings.resolve(job_timeout_s=3, address="auto")
    assert (s.job_timeout_s, s.address) == (3, "auto")


@pytest.mark.parametrize("env,value", [("RAYCOMPILE_JOB_TIMEOUT_S", "soon"), ("RAYCOMPILE_FALLBACK", "maybe"),
                                       ("RAYCOMPILE_NUM_CPUS", "0"), ("RAYCOMPILE_JOB_TIMEOUT_S", "-1")])
def test_bad_environment_values_name_the_variable(monkeypatch: pytest.MonkeyPatch, env: str, value: str) -> None:
    monkeypatch.setenv(env, value)
    with pytest.raises(errors.SettingsError):
        Settings.resolve()


def test_unknown_setting() -> None:
    with pytest.raises(errors.SettingsError, match="unknown setting"):
        Settings.resolve(job_timeout=3)


@pytest.mark.parametrize("exc", [
    errors.CompileError("triton_poi_0", "node1", "ptxas died"),
    errors.VersionMismatchError("n", "torch 2.13.0", "torch 2.11.0"),
    errors.FarmUnavailableError("127.0.0.1:1", "refused"),
    errors.KernelSourceError("/x.py", "not a kernel"),
    errors.UnknownArchError("sm_42", "sm_80"),
])
def test_errors_pickle_and_say_what_to_do(exc: errors.RaycompileError) -> None:
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is type(exc) and str(back) == str(exc)
    assert len(str(exc)) > 30


def test_compile_error_names_kernel_node_and_message() -> None:
    text = str(errors.CompileError("triton_poi_0", "node1", "SyntaxError: bad"))
    assert "triton_poi_0" in text and "node1" in text and "SyntaxError: bad" in text
