"""One typed settings object, read once: arguments, then environment, then defaults."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, get_args, get_origin, get_type_hints

from .errors import SettingsError

DEFAULT_CACHE_MAX_BYTES = 10 * 2**30
# values ``Settings.scope`` sets for the code inside it: between arguments and the environment
_SCOPE: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("raycompile_settings_scope",
                                                                               default=None)
SIZES = ("cache_max_bytes",)  # settings in the size syntax (raycompile/sizes.py)
# what a worker's own session (a whole-graph compile task on a Ray worker) takes from the driver's:
# the cache, the jobs and the cluster; not what only a driver does (progress, traces, metrics,
# sending graphs, compiled frames) nor where Ray is (a worker joins the cluster it runs in)
FOR_WORKER = ("cache_dir", "shared_cache", "secret", "cache_max_bytes", "compile_jobs", "job_timeout_s", "retries",
              "cluster_dedupe", "worker_nice", "namespace", "connect_timeout_s", "autotune_configs",
              "graph_profile_dir")


@dataclass(frozen=True)
class Group:
    """A concern the settings are grouped by (as Triton's ``knobs`` are): its heading, and the page
    of docs/ that explains it."""

    heading: str
    page: str


GROUPS = {
    "ray": Group("Joining Ray", "clusters-and-ranks.md"),
    "jobs": Group("Compile jobs", "clusters-and-ranks.md"),
    "cache": Group("The cache", "cache-and-security.md"),
    "frames": Group("Compiled frames", "compiled-frames.md"),
    "graphs": Group("Whole graphs on the cluster", "whole-graphs.md"),
    "autotune": Group("Autotuning", "max-autotune.md"),
    "watch": Group("Watching it", "metrics.md"),
}

# the modes' values, checked where a setting is read (Settings.resolve) and listed in docs/settings.md
CompileJobs = Literal["auto", "cluster", "local"]
AutotuneConfigs = Literal["local", "actors"]
GraphCompiles = Literal["local", "cluster", "backward"]


def _in(group: str, default: Any, **kwargs: Any) -> Any:
    """A field of ``group`` (a key of ``GROUPS``) with ``default``."""
    return field(default=default, metadata={"group": group}, **kwargs)


@dataclass(frozen=True)
class Settings:
    """How the farm runs, grouped by concern (``GROUPS``; each field's group is in its metadata).
    Every field has a ``RAYCOMPILE_<FIELD>`` environment variable, except ``address``, which also
    reads Ray's own ``RAY_ADDRESS``."""

    # -- joining Ray ------------------------------------------------------------------------------
    # None: RAY_ADDRESS, else the cluster started on this machine, else an embedded local Ray;
    # "auto": the same without the embedded Ray; "host:6379"; "ray://host:10001"
    address: str | None = _in("ray", None)
    num_cpus: int | None = _in("ray", None)  # CPUs of the embedded local Ray (default: all)
    connect_timeout_s: float = _in("ray", 30.0)  # reaching Ray, and the first-contact version probe
    namespace: str = _in("ray", "raycompile")
    fallback: bool = _in("ray", True)  # compile locally (stock Inductor pools) when Ray is unreachable or dies

    # -- compile jobs -----------------------------------------------------------------------------
    # where kernel compiles run: "auto" sends them to the Ray cluster when it has CPUs on other
    # nodes than this one, else to Inductor's own compile workers on this node (a one-node farm adds
    # no CPUs, only overhead); "cluster" always to Ray; "local" never. Cache and sharing work the
    # same in every mode; the cluster-wide dedupe (a Ray actor) acts only where jobs go to Ray: two
    # drivers compiling one kernel on their node's workers at once both compile it (single flight
    # keeps the ranks of a job from compiling one function twice; the local tier serves it after).
    compile_jobs: CompileJobs = _in("jobs", "auto")
    job_timeout_s: float = _in("jobs", 600.0)  # one compile job, from submit to result
    retries: int = _in("jobs", 3)  # the farm re-runs a job whose worker or node died, this many times
    # drivers of one Ray cluster missing on one key wait for one compile (through the shared tier,
    # or with none this node's local tier)
    cluster_dedupe: bool = _in("jobs", True)
    # a max-autotune pointwise or reduction kernel's configs compiled at once, each by one of the
    # node's compile workers, where stock compiles them one after another in one (wrapper/spread.py)
    spread_configs: bool = _in("jobs", True)
    # max-autotune's coordinate descent: while a kernel's tuner times a sweep's candidates, the
    # node's compile workers compile the sweep from each of them, so that the tuner finds the next
    # sweep compiled when it moves (compiles that may be for nothing; wrapper/compat/coordesc.py)
    coordesc_next_sweeps: bool = _in("jobs", True)
    # the node's compile workers (Inductor's process pool, as the farm fills it) and their ptxas run
    # this much below the driver's CPU priority (``nice``, 0-19; 0: as stock), so a busy node's
    # compiles delay neither the driver's lowering nor the GPU timings max-autotune takes in the
    # driver and on the node's GPU actors (kernels/priority.py); after disable() they stay lowered
    # until Inductor stops its idle workers (60-90 s without a job; docs/max-autotune.md)
    worker_nice: int = _in("jobs", 10)

    # -- the cache --------------------------------------------------------------------------------
    cache_dir: str = _in("cache", "~/.cache/raycompile")  # the local tier
    # auto: ray://head on a multi-node cluster, else none | none | ray://head | file:///path | redis://host:port/db
    shared_cache: str = _in("cache", "auto")
    # the local tier's cap (LRU eviction), a size such as 20G or 10GiB (raycompile/sizes.py); 0: none.
    # Unset: the lasting cap of `raycompile cache set-max-size`, else DEFAULT_CACHE_MAX_BYTES
    cache_max_bytes: int | None = _in("cache", None)
    head_cache_dir: str = _in("cache", "~/.cache/raycompile-head")  # where ray://head keeps entries, on the head node
    # signs every cache entry; default: this user's key for the local tier, the Ray cluster's own
    # secret for a shared tier when this process joins a cluster (cache/signing.py)
    secret: str | None = _in("cache", None, repr=False)

    # -- compiled frames --------------------------------------------------------------------------
    # Dynamo precompile entries in the tiers (wrapper/frames.py): torch.compile(model) on a warm node
    # loads the compiled frames (guards, bytecode, AOTAutograd forward and backward, output modules)
    # and skips Dynamo tracing, AOTAutograd and lowering. On by default: every guard is kept, the
    # identity guards re-created against the loading process's objects (wrapper/compat/guards.py),
    # so a compiled function notices what a stock-compiled one notices. None: on.
    dynamo_cache: bool | None = _in("frames", None)

    # -- whole graphs on the cluster --------------------------------------------------------------
    # where a graph's whole Inductor compile (lowering, codegen, kernel builds, max-autotune's
    # timings) runs: "local" in this process, as stock; "cluster" as a Ray task on a node of the
    # cluster (a GPU node for a GPU graph), through Inductor's out-of-process compile seam
    # (wrapper/graph_compiles.py), the backward sent with the forward and waited for at its first call, so
    # the graphs of one step compile at once; "backward": only backward graphs go to the cluster
    # (compiled while the step runs forward), forward and inference graphs compile here, where
    # Dynamo waits for them anyway. Graphs that seam cannot carry stay local, counted.
    graph_compiles: GraphCompiles = _in("graphs", "local")
    graph_timeout_s: float = _in("graphs", 1800.0)  # one graph's compile on the cluster (max-autotune's take minutes)
    # a diagnosis: each whole-graph compile on a Ray worker runs under cProfile, one file per graph
    # written to this directory on the worker's node
    graph_profile_dir: str | None = _in("graphs", None)

    # -- autotuning -------------------------------------------------------------------------------
    autotune: bool = _in("autotune", True)  # with GPUs in the cluster: benchmark max-autotune candidates on GPU actors
    # a Triton kernel's configs (pointwise, reductions): "local" times them on this GPU at the first
    # run, as stock does, and caches the winner for every other node; "actors" times them on the
    # GPU actors in parallel (only worth it for kernels with many large configs)
    autotune_configs: AutotuneConfigs = _in("autotune", "local")
    # while this process times a kernel on its GPU (max-autotune's ATen choices, the candidates
    # confirmed here, a kernel's configs at its first run), raycompile's threads in it hold still,
    # and a timing that another thread ran Python through is taken again: a launch that waits for
    # the GIL is timed as GPU time (raycompile/observe/quiet.py). False: neither (the contended
    # timings still counted: a diagnosis)
    quiet_timings: bool = _in("autotune", True)
    profile_gpu_workers: bool = _in("autotune", False)  # each GPU actor runs its jobs under cProfile (a diagnosis)

    # -- watching it ------------------------------------------------------------------------------
    progress: bool | None = _in("watch", None)  # None: a bar only on a terminal and outside Ray jobs
    trace: str | None = _in("watch", None)  # write a Chrome/Perfetto trace of the jobs here at disable()
    # the counters as Ray metrics (ray_raycompile_*), once Ray is up: orchestrator/metrics.py
    metrics: bool = _in("watch", True)

    @classmethod
    def resolve(cls, **overrides: Any) -> Settings:
        """Build settings from keyword arguments, then RAYCOMPILE_* variables, then defaults.

        Raises SettingsError for an unknown argument, or a value of the wrong type or out of its
        range: an argument's, and every variable's, also where an argument overrides it (a typo in
        the environment is an error, not ignored by the one command that overrides it).
        """
        fields = {f.name: f for f in dataclasses.fields(cls)}
        types = _types()
        unknown = set(overrides) - set(fields)
        if unknown:
            raise SettingsError(f"unknown setting(s) {sorted(unknown)}; known: {sorted(fields)}")
        environment: dict[str, Any] = {}
        for name in fields:
            env = os.environ.get(f"RAYCOMPILE_{name.upper()}")
            if env is None and name == "address":
                env = os.environ.get("RAY_ADDRESS")
            if env is not None and env != "":
                environment[name] = _parse(name, env, types[name])
        cls(**environment)._validate()
        values: dict[str, Any] = {}
        scoped = _SCOPE.get() or {}
        for name in fields:
            if overrides.get(name) is not None:
                values[name] = _check(name, overrides[name], types[name])
            elif scoped.get(name) is not None:
                values[name] = _check(name, scoped[name], types[name])
            elif name in environment:
                values[name] = environment[name]
        settings = cls(**values)
        settings._validate()
        return settings

    @staticmethod
    @contextlib.contextmanager
    def scope(**values: Any) -> Iterator[None]:
        """Inside, ``resolve()`` takes ``values`` over the RAYCOMPILE_* environment (arguments still
        win): settings for one block of code, a test, without touching ``os.environ``. Nests; a
        value of None keeps what the enclosing scope (else the environment) says. Raises SettingsError for an unknown
        name, or (at ``resolve``) a value of the wrong type."""
        unknown = set(values) - {f.name for f in dataclasses.fields(Settings)}
        if unknown:
            raise SettingsError(f"unknown setting(s) {sorted(unknown)} in Settings.scope")
        token = _SCOPE.set({**(_SCOPE.get() or {}), **{k: v for k, v in values.items() if v is not None}})
        try:
            yield
        finally:
            _SCOPE.reset(token)

    def for_worker(self) -> dict[str, Any]:
        """The settings of a session this driver's work starts on a Ray worker (``FOR_WORKER``),
        joining the cluster the worker runs in."""
        return {"address": "auto", **{name: getattr(self, name) for name in FOR_WORKER}}

    def _validate(self) -> None:
        def bad(name: str, rule: str) -> SettingsError:
            return SettingsError(f"{name} (or RAYCOMPILE_{name.upper()}) {rule}, got {getattr(self, name)!r}")

        for name in ("job_timeout_s", "connect_timeout_s", "graph_timeout_s"):
            if not getattr(self, name) > 0:
                raise bad(name, "must be > 0")
        if self.num_cpus is not None and self.num_cpus < 1:
            raise bad("num_cpus", "must be >= 1")
        if self.retries < 0:
            raise bad("retries", "must be >= 0")
        if not 0 <= self.worker_nice <= 19:
            raise bad("worker_nice", "must be a nice increment from 0 to 19")
        if self.cache_max_bytes is not None and self.cache_max_bytes < 0:
            raise bad("cache_max_bytes", "must be >= 0")
        for name, typ in _types().items():
            choices = _choices(typ)
            if choices and getattr(self, name) not in choices:
                raise bad(name, "must be " + ", ".join(repr(c) for c in choices[:-1]) + f" or {choices[-1]!r}")

    @property
    def dynamo_cache_on(self) -> bool:
        """Whether compiled frames are shared (the setting; on unless set off)."""
        return self.dynamo_cache is not False

    @property
    def secret_bytes(self) -> bytes | None:
        """The ``secret`` setting as a key (None: unset, so the defaults apply)."""
        return self.secret.encode() if self.secret else None


@functools.cache
def _types() -> dict[str, Any]:
    """Each field's type, evaluated (not the annotation's text); evaluated once (read, never changed)."""
    return get_type_hints(Settings)


def _choices(typ: Any) -> tuple[Any, ...]:
    """The values a ``Literal`` mode takes (None's left out), else ()."""
    return get_args(typ) if get_origin(typ) is Literal else ()


def _kinds(typ: Any) -> set[type]:
    """The Python types a field's value may have, None's left out: ``int | None`` -> {int}; a
    ``Literal`` of strings -> {str}."""
    if get_origin(typ) is Literal:
        return {type(c) for c in get_args(typ)}
    args = get_args(typ)
    if args:
        return {k for a in args for k in _kinds(a)} - {type(None)}
    return {typ} if isinstance(typ, type) else set()


def _name(typ: Any) -> str:
    return " | ".join(sorted(k.__name__ for k in _kinds(typ)))


def _check(name: str, value: Any, typ: Any) -> Any:
    """An argument's value, parsed if it is text for a number or flag; SettingsError if it is of
    another type than the field's."""
    kinds = _kinds(typ)
    if isinstance(value, str) and str not in kinds:
        return _parse(name, value, typ)
    ok = (isinstance(value, bool) if bool in kinds
          else isinstance(value, int) and not isinstance(value, bool) if int in kinds
          else isinstance(value, (int, float)) and not isinstance(value, bool) if float in kinds
          else isinstance(value, str))
    if not ok:
        raise SettingsError(f"{name}={value!r}: expected {_name(typ)}")
    return float(value) if float in kinds else value


def _parse(name: str, text: str, typ: Any) -> Any:
    kinds = _kinds(typ)
    if name in SIZES:
        from .sizes import parse_size

        try:
            return parse_size(text)
        except SettingsError as e:
            raise SettingsError(f"{name} (or RAYCOMPILE_{name.upper()}): {e}") from None
    try:
        if bool in kinds:
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(text)
        if int in kinds:
            return int(text)
        if float in kinds:
            return float(text)
    except ValueError:
        raise SettingsError(f"{name} (or RAYCOMPILE_{name.upper()})={text!r} is not a valid "
                            f"{_name(typ)}") from None
    return text
