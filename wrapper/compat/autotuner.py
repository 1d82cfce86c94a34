"""Seam family "autotuner": Inductor's ``CachingAutotuner`` (a compiled Triton kernel with its
configs) and Triton's ``JITFunction``: the configs a kernel was compiled for, the winner Inductor's
autotune cache knows, restricting a kernel to one config, recovering a kernel's source, and a
user's ``@triton.jit`` kernel bundled to travel. Coordinate descent's candidates compiled at once
are the family ``coordesc``. Checked on torch 2.11.0, 2.13.0 and 2.15.0."""

from __future__ import annotations

import functools
import logging
import os
import types
from typing import Any

from ._base import Seams

CHECKED_ON = ("2.11.0", "2.13.0", "2.15.0")

SEAMS: Seams = {
    "CachingAutotuner": ("torch._inductor.runtime.triton_heuristics", "CachingAutotuner"),
    "CachingAutotuner._reload_kernel": ("torch._inductor.runtime.triton_heuristics", "CachingAutotuner.precompile"),
    "CachingAutotuner.bench": ("torch._inductor.runtime.triton_heuristics", "CachingAutotuner.bench"),
    "AutotuneCache.read_best": ("torch._inductor.runtime.autotune_cache", "AutotuneCache.read_best"),
    "_load_triton_kernel_from_source": ("torch._inductor.codecache", "_load_triton_kernel_from_source"),
    "triton.runtime.jit.JITFunction": ("triton.runtime.jit", "JITFunction"),
}

log = logging.getLogger("raycompile.autotune")


_KEY_ATTRIBUTE = "_raycompile_key"


def set_kernel_key(kernel: Any, key: str) -> None:
    """Carry the kernel's identity (``cache/keys.py``) on the compiled kernel the Router hands to
    Inductor, so its autotune winner is filed under the key its job had, never one computed again."""
    setattr(kernel, _KEY_ATTRIBUTE, key)


def kernel_key_of(kernel: Any) -> str | None:
    """The identity ``set_kernel_key`` gave ``kernel`` (None: compiled outside the Router)."""
    key = getattr(kernel, _KEY_ATTRIBUTE, None)
    return key if isinstance(key, str) else None


def launchers(kernel: Any) -> list[Any]:
    """A precompiled kernel's launchers, one per compiled config, in order."""
    return list(kernel.launchers)


def is_caching_autotuner(obj: Any) -> bool:
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    return isinstance(obj, CachingAutotuner)


def _config_matches(cfg: Any, winner: Any) -> bool:
    return (all(winner.get(k) == v for k, v in cfg.kwargs.items())
            and winner.get("num_warps") == cfg.num_warps and winner.get("num_stages") == cfg.num_stages)


def config_dict(cfg: Any) -> dict[str, Any]:
    """A Triton ``Config`` as the dict Inductor's ``.best_config`` files hold (kwargs, warps, stages)."""
    return {**cfg.kwargs, "num_warps": cfg.num_warps, "num_stages": cfg.num_stages}


def launcher_configs(kernel: Any) -> list[dict[str, Any]]:
    """The config dicts of a precompiled kernel's launchers, in order."""
    return [config_dict(launcher.config) for launcher in kernel.launchers]


def launcher_for(kernel: Any, config: dict[str, Any]) -> Any:
    """The launcher of ``kernel`` compiled for ``config`` (a config dict), or None."""
    for launcher in kernel.launchers:
        if config_dict(launcher.config) == config:
            return launcher
    return None


def is_cuda_kernel(kernel: Any) -> bool:
    return getattr(getattr(kernel, "device_props", None), "type", None) == "cuda"


def kernel_label(kernel: Any) -> str:
    return str(getattr(getattr(kernel, "fn", None), "__name__", "") or kernel_attribute_name(kernel) or "kernel")


def inductor_best_config(kernel: Any) -> dict[str, Any] | None:
    """The winner Inductor's autotune cache knows for ``kernel`` (its ``.best_config``, or the
    remote autotune cache), read through the kernel's own ``AutotuneCache``; None if none."""
    cache = getattr(getattr(kernel, "save_cache_hook", None), "__self__", None)
    configs = [r.config for r in getattr(kernel, "compile_results", None) or []] or list(kernel.configs or [])
    if cache is None or not hasattr(cache, "read_best") or not configs:
        return None
    best = cache.read_best(kernel.inductor_meta, configs)
    return config_dict(best) if best is not None else None


def restrict_autotuner(kernel: Any, winner: Any) -> bool:
    """Leave ``kernel`` (a precompiled CachingAutotuner) with only the launcher of ``winner``, as
    ``autotune_to_one_config`` would after benchmarking, so its first run benchmarks nothing.
    False (and ``kernel`` untouched) when it has one launcher or none matches ``winner``."""
    launchers = list(getattr(kernel, "launchers", None) or [])
    match = [launcher for launcher in launchers if _config_matches(launcher.config, winner)]
    if len(launchers) <= 1 or len(match) != 1:
        return False
    (best,) = match
    release = getattr(kernel, "_release_static_launchers_except", None)
    if release is not None:
        release(best)
    kernel.launchers = [best]
    results = [r for r in kernel.compile_results if _config_matches(r.config, winner)]
    if results:
        kernel.compile_results = results[:1]
    if winner.get("found_by_coordesc"):
        best.config.found_by_coordesc = True
    return True


def set_autotuner_device(kernel: Any, index: int) -> None:
    """Point a compiled CachingAutotuner at CUDA device ``index``.

    The cubins do not depend on the device index; the autotuner records it in ``triton_meta``,
    ``device_props`` and each compile result's ``compile_meta`` (it launches under a DeviceGuard
    of ``triton_meta['device']``). Rewriting those lets ranks on cuda:0 and cuda:1 share one
    cache entry (pytorch#170123)."""
    if kernel.triton_meta.get("device") == index:
        return
    kernel.triton_meta["device"] = index
    if getattr(kernel, "device_props", None) is not None:
        kernel.device_props = kernel.device_props._replace(index=index)
    for result in getattr(kernel, "compile_results", None) or []:
        meta = getattr(result, "compile_meta", None)
        if isinstance(meta, dict) and "device" in meta:
            meta["device"] = index


def load_autotuner(name: str, source: str) -> Any:
    """Load an Inductor Triton kernel module and precompile it here (a Triton cache hit when the
    kernel's cache group was published first)."""
    from torch._inductor.codecache import _load_triton_kernel_from_source

    kernel = _load_triton_kernel_from_source(name, source)
    kernel.precompile()
    return kernel


def bench_launcher(kernel: Any, launcher: Any, args: Any, kwargs: dict[str, Any]) -> float:
    """Inductor's own timing of one config (``CachingAutotuner.bench``: mutated arguments cloned,
    spilling configs skipped, ``benchmarker``)."""
    return float(kernel.bench(launcher, *args, **kwargs))


def autotuner_source(kernel: Any) -> tuple[str, str] | None:
    """(kernel name, module source) of a loaded ``CachingAutotuner``, or None when unknown.

    ``AsyncCompile.triton`` hands the parent's precompile a ``reload_kernel`` closure over
    ``functools.partial(_load_triton_kernel_from_source, name, source)`` (kept as
    ``_reload_kernel``); a kernel compiled in-process was loaded from a file under Inductor's
    cache whose name is the hash of its source (``filename``)."""
    from torch._inductor.codecache import _load_triton_kernel_from_source

    reload = getattr(kernel, "_reload_kernel", None)
    for cell in getattr(reload, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if (isinstance(value, functools.partial) and value.func is _load_triton_kernel_from_source
                and len(value.args) == 2):
            return value.args[0], value.args[1]
    filename = getattr(kernel, "filename", None)
    name = kernel_attribute_name(kernel)
    if filename and name and os.path.isfile(filename):
        with open(filename) as f:
            return name, f.read()
    return None


def kernel_attribute_name(kernel: Any) -> str | None:
    """The name a kernel's module binds it to (what ``_load_triton_kernel_from_source`` looks up):
    its ``@triton.jit`` function's name. Not ``inductor_meta['kernel_name']``: in the modules
    Inductor builds to benchmark a fusion (``generate_kernel_code_from_nodes``) that is still
    ``'Placeholder.DESCRIPTIVE_NAME'`` while the function is ``triton_``."""
    for name in (getattr(getattr(kernel, "fn", None), "__name__", None),
                 (getattr(kernel, "inductor_meta", None) or {}).get("kernel_name")):
        if isinstance(name, str) and name.isidentifier():
            return name
    return None


def bundle_user_kernel(kernel: Any) -> tuple[str, dict[str, Any]]:
    """A ``@triton.jit`` kernel as (module source, globals it refers to). A JITFunction does not
    pickle (it holds locks), and the module that defines it may not exist on a GPU node, so its
    source travels: the kernel and every ``@triton.jit`` function it calls, modules it uses by
    import name, other globals by value (cloudpickle). Raises TypeError for an object that is not
    a JITFunction."""
    from triton.runtime.jit import JITFunction

    if not isinstance(kernel, JITFunction):
        raise TypeError(f"expected a @triton.jit function, got {type(kernel).__name__}")
    order: list[JITFunction] = []
    seen: set[int] = set()
    modules: dict[str, str] = {}
    values: dict[str, Any] = {}
    aliases: dict[str, str] = {}

    def code_names(code: types.CodeType) -> set[str]:
        out = set(code.co_names)
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                out |= code_names(const)
        return out

    def visit(fn: JITFunction) -> None:
        if id(fn) in seen:
            return
        seen.add(id(fn))
        scope = dict(fn.fn.__globals__)
        code = fn.fn.__code__
        for name, cell in zip(code.co_freevars, fn.fn.__closure__ or ()):  # a kernel defined in a function
            scope[name] = cell.cell_contents
        for name in sorted(code_names(code) | set(code.co_freevars)):
            if name not in scope:
                continue  # an attribute name, or a builtin
            value = scope[name]
            if isinstance(value, JITFunction):
                visit(value)
                if value.__name__ != name:
                    aliases[name] = value.__name__
            elif isinstance(value, types.ModuleType):
                modules[name] = value.__name__
            else:
                values[name] = value
        order.append(fn)

    visit(kernel)
    lines = ["import importlib", "import triton", "import triton.language as tl", ""]
    lines += [f"{name} = importlib.import_module({module!r})" for name, module in sorted(modules.items())]
    for fn in order:
        options = []
        if getattr(fn, "do_not_specialize", None):
            options.append(f"do_not_specialize={list(fn.do_not_specialize)!r}")
        if getattr(fn, "noinline", False):
            options.append("noinline=True")
        lines += ["", "", f"@triton.jit({', '.join(options)})" if options else "@triton.jit", fn.src.strip()]
    lines += [""] + [f"{alias} = {target}" for alias, target in sorted(aliases.items())]
    return "\n".join(lines) + "\n", values


# heuristics whose kernels coordinate descent leaves alone (torch 2.13's ``_should_coordesc_tune``;
# older torch tests the first two inline)
_NOT_COORDESC = ("TEMPLATE", "USER_AUTOTUNE", "FIXED")


def coordesc_eligible(kernel: Any) -> bool:
    """Whether coordinate descent tunes ``kernel`` (not a template, a fixed config or a user's
    autotuned kernel; nor, in deterministic mode, a reduction), as Inductor's own test says."""
    eligible = getattr(kernel, "_should_coordesc_tune", None)
    if eligible is not None:
        return bool(eligible)
    return getattr(getattr(kernel, "heuristic_type", None), "name", "") not in _NOT_COORDESC


def kernel_configs(kernel: Any) -> list[Any]:
    """The configs ``kernel`` can launch now: its launchers' (once precompiled), else its own."""
    launchers = list(getattr(kernel, "launchers", None) or [])
    return [launcher.config for launcher in launchers] or list(getattr(kernel, "configs", None) or [])


def descends_from_one(kernel: Any) -> bool:
    """Whether ``kernel``'s first run is max-autotune's coordinate descent from its one config
    (on, the kernel one it tunes, and that config not one a descent found)."""
    configs = kernel_configs(kernel)
    return (len(configs) == 1 and bool((getattr(kernel, "inductor_meta", None) or {}).get("coordinate_descent_tuning"))
            and coordesc_eligible(kernel) and not getattr(configs[0], "found_by_coordesc", False))


def _kernel_loaded(kernel: Any) -> bool:
    """Reload the kernel's Triton function where unpickling left it out (a kernel compiled in a
    worker), as stock's tuning does first; whether it is there."""
    fn = getattr(kernel, "fn", None)
    if getattr(fn, "fn", None) is None:
        ensure = getattr(kernel, "_ensure_kernel_loaded", None)
        reload = getattr(kernel, "_reload_kernel", None)
        try:
            if callable(ensure):
                ensure()
            elif callable(reload):
                kernel.fn = reload().fn
        except Exception as e:  # noqa: BLE001 - stock's tuning then meets it, and says so
            log.debug("raycompile: coordinate descent's candidates not compiled ahead: %s", e)
            return False
    return getattr(getattr(kernel, "fn", None), "fn", None) is not None
