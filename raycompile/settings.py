"""One typed settings object, read once: arguments, then environment, then defaults."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from .errors import SettingsError


@dataclass(frozen=True)
class Settings:
    """How the farm runs. Every field has a ``RAYCOMPILE_<FIELD>`` environment variable, except
    ``address``, which also reads Ray's own ``RAY_ADDRESS``."""

    address: str | None = None  # None: an embedded local Ray; "auto"; "host:6379"; "ray://host:10001"
    num_cpus: int | None = None  # CPUs of the embedded local Ray (default: all)
    job_timeout_s: float = 600.0  # one compile job, from submit to result
    connect_timeout_s: float = 30.0  # reaching Ray, and the first-contact version probe
    retries: int = 3  # the farm re-runs a job whose worker or node died, this many times
    fallback: bool = True  # compile locally (stock Inductor pools) when Ray is unreachable or dies
    namespace: str = "raycompile"
    cache_dir: str = "~/.cache/raycompile"  # the local tier
    # auto: ray://head on a multi-node cluster, else none | none | ray://head | file:///path | redis://host:port/db
    shared_cache: str = "auto"
    cluster_dedupe: bool = True  # with a shared tier: drivers missing on one key wait for one compile
    cache_max_bytes: int = 10 * 2**30  # the local tier's cap (LRU eviction)
    head_cache_dir: str = "~/.cache/raycompile-head"  # where ray://head keeps entries, on the head node
    progress: bool | None = None  # None: a bar only on a terminal and outside Ray jobs
    trace: str | None = None  # write a Chrome/Perfetto trace of the jobs here at disable()
    autotune: bool = True  # with GPUs in the cluster: benchmark autotune candidates on GPU actors

    @classmethod
    def resolve(cls, **overrides: Any) -> Settings:
        """Build settings from keyword arguments, then RAYCOMPILE_* variables, then defaults.

        Raises SettingsError for an unknown argument or a value of the wrong type.
        """
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = set(overrides) - set(fields)
        if unknown:
            raise SettingsError(f"unknown setting(s) {sorted(unknown)}; known: {sorted(fields)}")
        values: dict[str, Any] = {}
        for name, f in fields.items():
            if overrides.get(name) is not None:
                values[name] = _check(name, overrides[name], f.type)
                continue
            env = os.environ.get(f"RAYCOMPILE_{name.upper()}")
            if env is None and name == "address":
                env = os.environ.get("RAY_ADDRESS")
            if env is not None and env != "":
                values[name] = _parse(name, env, f.type)
        settings = cls(**values)
        settings._validate()
        return settings

    def _validate(self) -> None:
        for name in ("job_timeout_s", "connect_timeout_s"):
            if not getattr(self, name) > 0:
                raise SettingsError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if self.num_cpus is not None and self.num_cpus < 1:
            raise SettingsError(f"num_cpus must be >= 1, got {self.num_cpus}")
        if self.retries < 0:
            raise SettingsError(f"retries must be >= 0, got {self.retries}")
        if self.cache_max_bytes < 0:
            raise SettingsError(f"cache_max_bytes must be >= 0, got {self.cache_max_bytes}")


def _check(name: str, value: Any, typ: Any) -> Any:
    """An argument's value, parsed if it is text for a number or flag; SettingsError if it is of
    another type than the field's."""
    kind = str(typ)
    if isinstance(value, str) and not kind.startswith("str"):
        return _parse(name, value, typ)
    ok = (isinstance(value, bool) if "bool" in kind
          else isinstance(value, int) and not isinstance(value, bool) if kind.startswith("int")
          else isinstance(value, (int, float)) and not isinstance(value, bool) if "float" in kind
          else isinstance(value, str))
    if not ok:
        raise SettingsError(f"{name}={value!r}: expected {kind.replace(' | None', '')}")
    return float(value) if "float" in kind else value


def _parse(name: str, text: str, typ: Any) -> Any:
    kind = str(typ)
    try:
        if "bool" in kind:
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(text)
        if "int" in kind:
            return int(text)
        if "float" in kind:
            return float(text)
    except ValueError:
        raise SettingsError(f"{name} (or RAYCOMPILE_{name.upper()})={text!r} is not a valid "
                            f"{kind.replace(' | None', '')}") from None
    return text
