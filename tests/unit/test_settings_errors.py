"""Settings resolution, and every raycompile error: raised the way the code raises it, its message
names what went wrong (the bad value, path, node, versions) and says what to do about it (the
setting, variable, command or format to use), and it survives pickling (a trip through Ray)."""

from __future__ import annotations

import inspect
import pathlib
import pickle
from collections.abc import Callable
from dataclasses import dataclass

import pytest

import raycompile
from raycompile import errors
from raycompile.precompile_job import load_entry, run_script
from raycompile.settings import Settings
from raycompile.spec import load_spec
from raycompile.wrapper.compat import parse_arch
from raycompile.wrapper.kernel_sources import find_kernels, read_kernel


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


# -- every error: raised as the code raises it, and what its message says ------------------------


@dataclass(frozen=True)
class Case:
    """``raise_`` raises the error (through the code that raises it where that is cheap, else
    constructed exactly as its raise site does); its message must contain every string of ``what``
    (what went wrong: the bad value, path, node, versions) and of ``remedy`` (what to do)."""

    type: type[errors.RaycompileError]
    raise_: Callable[[pathlib.Path, pytest.MonkeyPatch], object]
    what: tuple[str, ...]
    remedy: tuple[str, ...]


def _env(name: str, value: str) -> Callable[[pathlib.Path, pytest.MonkeyPatch], object]:
    def raise_(tmp: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> object:
        monkeypatch.setenv(name, value)
        return Settings.resolve()

    return raise_


def _file(name: str, text: str) -> Callable[[pathlib.Path], str]:
    def write(tmp: pathlib.Path) -> str:
        (tmp / name).write_text(text)
        return str(tmp / name)

    return write


def _raise(exc: errors.RaycompileError) -> Callable[[pathlib.Path, pytest.MonkeyPatch], object]:
    def raise_(tmp: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> object:
        raise exc

    return raise_


def _enable_auto_without_cluster(tmp: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> object:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # and RAY_TMPDIR (tests/conftest.py) holds no cluster file
    try:
        return raycompile.enable(address="auto", fallback=False)
    finally:
        raycompile.disable()


def _status_without_cluster(tmp: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> object:
    """`raycompile status`'s error: its advice never offers an embedded Ray, which it never starts."""
    from raycompile.orchestrator.cluster_status import collect

    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # and RAY_TMPDIR (tests/conftest.py) holds no cluster file
    error = None
    try:
        collect(Settings.resolve())
    except errors.FarmUnavailableError as e:
        error = e
    assert error is not None and "embedded" not in str(error), error
    raise error


_NOT_A_KERNEL = _file("wrapper.py", "import torch\nprint(torch.ones(2))\n")
_BAD_JSON = _file("spec.json", '{"variants": [{"entry": "m:f",}]}')
_BAD_SHAPE = _file("spec.json", '{"variants": [{"entry": "m:f", "inputs": [{"shape": "8x96"}]}]}')
_SPEC_FORMAT = ('{"variants": [{"entry": "package.module:function", "inputs": [{"shape": [8, 96]}]}]}',
                "raycompile precompile --help")
_RAY_REMEDY = ("`ray start --head`", "address='host:6379'", "RAY_ADDRESS")
CASES = [
    # SettingsError: arguments and RAYCOMPILE_* variables
    pytest.param(Case(errors.SettingsError, lambda tmp, mp: Settings.resolve(job_timeout_s=-1),
                      ("job_timeout_s", "got -1.0"), ("must be > 0",)), id="settings-argument-out-of-range"),
    pytest.param(Case(errors.SettingsError, lambda tmp, mp: Settings.resolve(job_timeout=3),
                      ("unknown setting(s) ['job_timeout']",), ("known: [", "'job_timeout_s'")),
                 id="settings-unknown-name"),
    pytest.param(Case(errors.SettingsError, lambda tmp, mp: Settings.resolve(fallback=3),
                      ("fallback=3",), ("expected bool",)), id="settings-argument-wrong-type"),
    pytest.param(Case(errors.SettingsError, lambda tmp, mp: Settings.resolve(compile_jobs="everywhere"),
                      ("compile_jobs", "'everywhere'"), ("'auto', 'cluster' or 'local'",)), id="settings-choice"),
    pytest.param(Case(errors.SettingsError, _env("RAYCOMPILE_JOB_TIMEOUT_S", "soon"),
                      ("'soon'", "is not a valid float"), ("RAYCOMPILE_JOB_TIMEOUT_S",)), id="env-not-a-number"),
    pytest.param(Case(errors.SettingsError, _env("RAYCOMPILE_FALLBACK", "maybe"),
                      ("'maybe'", "is not a valid bool"), ("RAYCOMPILE_FALLBACK",)), id="env-not-a-flag"),
    pytest.param(Case(errors.SettingsError, _env("RAYCOMPILE_CACHE_MAX_BYTES", "lots"),
                      ("'lots' is not a size",), ("RAYCOMPILE_CACHE_MAX_BYTES", "500K, 1.5G or 2GiB")),
                 id="env-not-a-size"),
    pytest.param(Case(errors.SettingsError, _env("RAYCOMPILE_NUM_CPUS", "0"),
                      ("num_cpus", "got 0"), (">= 1", "RAYCOMPILE_NUM_CPUS")), id="env-out-of-range"),
    pytest.param(Case(errors.SettingsError, lambda tmp, mp: (mp.setenv("RAYCOMPILE_COMPILE_JOBS", "clustr"),
                                                             Settings.resolve(compile_jobs="cluster")),
                      ("compile_jobs", "got 'clustr'"), ("RAYCOMPILE_COMPILE_JOBS", "'auto', 'cluster' or 'local'")),
                 id="env-bad-where-an-argument-overrides-it"),
    pytest.param(Case(errors.SettingsError, lambda tmp, mp: (mp.setenv("RAYCOMPILE_RETRIES", "many"),
                                                             Settings.resolve(retries=1)),
                      ("'many'", "is not a valid int"), ("RAYCOMPILE_RETRIES",)),
                 id="env-unparsable-where-an-argument-overrides-it"),
    pytest.param(Case(errors.SettingsError, _env("RAYCOMPILE_JOB_TIMEOUT_S", "-1"),
                      ("job_timeout_s", "got -1.0"), ("> 0", "RAYCOMPILE_JOB_TIMEOUT_S")), id="env-negative"),
    pytest.param(Case(errors.SettingsError, lambda tmp, mp: raycompile.enable(shared_cache="s3://bucket/x"),
                      ("shared cache 's3://bucket/x'",), ("file:///path", "redis://host:port/db", "ray://head")),
                 id="settings-shared-cache-scheme"),
    # UnknownArchError: `raycompile compile --arch` and the cross-compile targets
    pytest.param(Case(errors.UnknownArchError, lambda tmp, mp: parse_arch("sm_12"),
                      ("unknown arch 'sm_12'",), ("pass one of", "sm_80", "sm_90", "sm_120")), id="arch"),
    # KernelSourceError: files given to `raycompile compile`
    pytest.param(Case(errors.KernelSourceError, lambda tmp, mp: read_kernel(_NOT_A_KERNEL(tmp)),
                      ("<tmp>/wrapper.py: not an Inductor Triton kernel",),
                      ("Pass Inductor kernel modules", "TORCHINDUCTOR_CACHE_DIR", "@triton.jit")), id="not-a-kernel"),
    pytest.param(Case(errors.KernelSourceError, lambda tmp, mp: find_kernels([str(tmp / "gone.py")]),
                      ("<tmp>/gone.py: no such file or directory",), ("Pass Inductor kernel modules",)),
                 id="no-kernel-file"),
    # SpecError: `raycompile precompile SPEC` and `raycompile precompile SCRIPT`
    pytest.param(Case(errors.SpecError, lambda tmp, mp: load_spec(_BAD_JSON(tmp)),
                      ("<tmp>/spec.json: not valid JSON",), _SPEC_FORMAT), id="spec-json"),
    pytest.param(Case(errors.SpecError, lambda tmp, mp: load_spec(_BAD_SHAPE(tmp)),
                      ("<tmp>/spec.json", "variant 0", "'inputs[0].shape' must be a list, got '8x96'"), _SPEC_FORMAT),
                 id="spec-field"),
    pytest.param(Case(errors.SpecError, lambda tmp, mp: load_entry("json:no_such_function"),
                      ("json:no_such_function", "module 'json' has no 'no_such_function'"), _SPEC_FORMAT),
                 id="spec-entry"),
    pytest.param(Case(errors.SpecError, lambda tmp, mp: run_script(str(tmp / "train.py"), [], None),
                      ("<tmp>/train.py: no such script",), ("Usage: raycompile precompile SCRIPT [-- ARGS]",)),
                 id="precompile-script"),
    # FarmUnavailableError: no Ray where one is needed
    pytest.param(Case(errors.FarmUnavailableError, _enable_auto_without_cluster,
                      ("cannot reach Ray at auto", "no Ray cluster is running on this machine"), _RAY_REMEDY),
                 id="farm-auto-no-cluster"),
    pytest.param(Case(errors.FarmUnavailableError, _status_without_cluster,
                      ("cannot reach Ray at auto", "no Ray cluster is running on this machine"),
                      ("`raycompile status` shows a running cluster", "`ray start --head`", "--address host:6379")),
                 id="farm-status-no-cluster"),
    pytest.param(Case(errors.FarmUnavailableError, lambda tmp, mp: raycompile.ready(),
                      ("(no session)",), ("call raycompile.enable() first",)), id="farm-ready-without-enable"),
    pytest.param(Case(errors.FarmUnavailableError, lambda tmp, mp: raycompile.autotune(None, [], [], (1,)),
                      ("(no session)",), ("raycompile.autotune needs raycompile.enable() on a Ray cluster",)),
                 id="farm-autotune-without-enable"),
    # raised only with Ray (and a cluster of a given shape): constructed as their raise sites do
    pytest.param(Case(errors.VersionMismatchError,  # orchestrator/farm.py, the first-contact probe
                      _raise(errors.VersionMismatchError("gpu-7 (0123456789ab)", "torch 2.13.0 / triton 3.7.1",
                                                         "torch 2.11.0 / triton 3.5.1")),
                      ("worker node gpu-7 (0123456789ab) runs torch 2.11.0 / triton 3.5.1",
                       "this driver runs torch 2.13.0 / triton 3.7.1"),
                      ("Install the same torch and triton on every node", "setup_commands",
                       "leave that node out of the cluster")), id="version-mismatch"),
    pytest.param(Case(errors.CompileError,  # wrapper/hooks.py: a job's Failed result
                      _raise(errors.CompileError("cpp_fused_relu_0", "node-3", "error: expected ';' before '}'")),
                      ("kernel 'cpp_fused_relu_0' failed to compile on node node-3",
                       "\nerror: expected ';' before '}'\n"),
                      ("The other kernels are unaffected", "raycompile.disable()", "report it")), id="compile"),
    pytest.param(Case(errors.CompileError,  # wrapper/runtime.py: no result in time (no node to name)
                      _raise(errors.CompileError("triton_poi_fused_0", "", "no result within 300 s "
                                                 "(TORCHINDUCTOR_COMPILE_WORKER_WAIT_TIMEOUT; raise it, or "
                                                 "RAYCOMPILE_JOB_TIMEOUT_S, for kernels this large)")),
                      ("kernel 'triton_poi_fused_0' failed to compile:\nno result within 300 s",),
                      ("TORCHINDUCTOR_COMPILE_WORKER_WAIT_TIMEOUT", "RAYCOMPILE_JOB_TIMEOUT_S")),
                 id="compile-wait-timeout"),
    pytest.param(Case(errors.NoGPUError,  # orchestrator/gpu_pool.py: no actor of the group
                      _raise(errors.NoGPUError("NVIDIA H200 (sm_90)", ["NVIDIA A100-SXM4-80GB (sm_80)"])),
                      ("no GPU of NVIDIA H200 (sm_90) in the Ray cluster",
                       "GPU groups there: NVIDIA A100-SXM4-80GB (sm_80)"),
                      ("ray start --num-gpus N", "pass gpu= one of the groups")), id="no-gpu"),
    pytest.param(Case(errors.NoGPUError, _raise(errors.NoGPUError("NVIDIA H200 (sm_90)", [])),
                      ("GPU groups there: none",), ("add a node with that GPU",)), id="no-gpu-at-all"),
    pytest.param(Case(errors.AutotuneError,  # raycompile/autotune.py: every config failed
                      _raise(errors.AutotuneError("add_kernel", "every config failed on NVIDIA H200 (sm_90): "
                                                  "config 0: OutOfResources: shared memory")),
                      ("autotuning 'add_kernel' failed", "config 0: OutOfResources: shared memory"),
                      ("run the kernel in this process with that config", "leave out the configs")),
                 id="autotune-configs"),
    pytest.param(Case(errors.AutotuneError,  # raycompile/autotune.py: the kernel does not pickle
                      _raise(errors.AutotuneError("add_kernel", "it cannot be sent to the GPU workers: "
                                                  "PicklingError: cannot pickle '_thread.lock' object")),
                      ("autotuning 'add_kernel' failed", "cannot pickle '_thread.lock' object"),
                      ("grid and the kernel's globals", "cloudpickle")), id="autotune-pickle"),
]


@pytest.mark.parametrize("case", CASES)
def test_error_names_what_went_wrong_and_what_to_do(case: Case, tmp_path: pathlib.Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(errors.RaycompileError) as info:
        case.raise_(tmp_path, monkeypatch)
    exc = info.value
    assert type(exc) is case.type
    text = str(exc).replace(str(tmp_path), "<tmp>")
    missing = [s for s in (*case.what, *case.remedy) if s not in text]
    assert not missing, f"{type(exc).__name__} message lacks {missing}:\n{text}"
    back = pickle.loads(pickle.dumps(exc))  # it crosses Ray (a worker's, the coordinator's errors)
    assert type(back) is type(exc) and str(back) == str(exc) and back.args == exc.args


def test_every_error_class_has_a_case() -> None:
    """A new error class fails here until it has a case above (its message checked)."""
    classes = {c for _, c in inspect.getmembers(errors, inspect.isclass)
               if issubclass(c, BaseException) and c.__module__ == errors.__name__}
    assert all(issubclass(c, errors.RaycompileError) for c in classes)  # one `except` catches them all
    covered = {p.values[0].type for p in CASES}
    assert covered == classes - {errors.RaycompileError}, "error classes without a case: " + ", ".join(
        sorted(c.__name__ for c in classes - covered - {errors.RaycompileError}))
    # the ones raised for bad input are also ValueErrors, as a caller validating input expects
    assert {c for c in classes if issubclass(c, ValueError)} == {
        errors.SettingsError, errors.UnknownArchError, errors.SpecError}


def test_every_setting_is_in_one_declared_group_and_each_mode_names_its_values() -> None:
    """Settings are grouped by concern where they are declared (``GROUPS``, each field's metadata);
    a mode is a ``Literal``, and a value outside it is refused with the values it takes, from an
    argument and from the environment alike."""
    import dataclasses
    import typing

    from raycompile import settings as settings_module

    for f in dataclasses.fields(Settings):
        assert f.metadata.get("group") in settings_module.GROUPS, f.name
    types = typing.get_type_hints(Settings)
    modes = {name for name, t in types.items() if typing.get_origin(t) is typing.Literal}
    assert modes == {"compile_jobs", "autotune_configs", "graph_compiles"}
    for name in sorted(modes):
        values = typing.get_args(types[name])
        for value in values:
            assert getattr(Settings.resolve(**{name: value}), name) == value
        with pytest.raises(errors.SettingsError, match=f"{name}.*must be .*{values[-1]!r}"):
            Settings.resolve(**{name: "nope"})
    with Settings.scope(), pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAYCOMPILE_GRAPH_COMPILES", "everywhere")
        with pytest.raises(errors.SettingsError, match="RAYCOMPILE_GRAPH_COMPILES"):
            Settings.resolve()


def test_a_workers_session_takes_the_graph_profile_dir_from_the_drivers() -> None:
    """The one diagnosis variable that was read outside ``Settings`` is a setting a worker's session
    takes (``for_worker``), so a whole-graph task profiles where the driver said."""
    worker = Settings.resolve(graph_profile_dir="/tmp/profiles", graph_compiles="cluster").for_worker()
    assert worker["graph_profile_dir"] == "/tmp/profiles"
    assert Settings.resolve(**worker).graph_profile_dir == "/tmp/profiles"
