"""The farm's wrapper codegen: Inductor's ``PythonWrapperCodegen``, registered for ``cuda`` and
``cpu`` while the farm is enabled (``Hooks.install``). The output module it writes

- imports the farm's runtime (``async_compile = FarmCompile()``, wrapper/runtime.py), and takes
  ``align`` and ``extern_kernels`` where loading them imports no codegen or lowering
  (``compat.LIGHT_LINES``: a module loaded from compiled frames needs neither);
- defines each kernel as a named future keyed by its cache key
  (``triton_poi_fused_0 = async_compile.triton('triton_poi_fused_0', '''...''', device_str='cuda', key='...')``);
- carries a manifest, ``_raycompile_manifest = {'kernels': {name: key}, 'winners': {...}, 'versions': {...}}``;
- waits once, on an explicit dict of those futures, binding each name to its compiled kernel:
  ``(triton_poi_fused_0,) = async_compile.wait_named(_raycompile_manifest, {'triton_poi_fused_0': ...})``.

Everything else (the ``call`` function, the benchmark harness) is Inductor's, unchanged.
"""

from __future__ import annotations

import ast
import logging
from typing import Any

from ..cache.keys import OUTPUT_MODULE_TAG as CACHE_KEY_TAG
from . import compat
from .job_keys import cpp_source_key, triton_key
from .runtime import winner_for

log = logging.getLogger("raycompile.codegen")

DEVICES = ("cuda", "cpu")
__all__ = ["CACHE_KEY_TAG", "DEVICES", "FarmSubgraphWrapperCodegen", "FarmWrapperCodegen", "definition_key", "with_key"]

STOCK_IMPORT, STOCK_INSTANCE = compat.STOCK_IMPORT, compat.STOCK_INSTANCE
RUNTIME_IMPORT = "from raycompile.wrapper.runtime import FarmCompile"
RUNTIME_INSTANCE = "async_compile = FarmCompile()"

_PythonWrapperCodegen, _SubgraphPythonWrapperCodegen = compat.wrapper_codegen_classes()


def definition_key(kernel_name: str, body: str) -> str | None:
    """The cache key of the kernel that ``body`` (``async_compile.KIND(...)``) defines; None for a
    body that is not a Triton or C++ kernel definition.

    Triton: the key of the job ``AsyncCompile.triton`` sends (``wrapper/job_keys.py``, one function
    for both), which the Router checks against it. C++: a key of the source, argument types,
    compiler and target CPU (``cache.keys.cpp_source_key``; the build's own entry is keyed by its
    resolved command lines, which exist only once Inductor writes the source out)."""
    try:
        call = ast.parse(body.strip(), mode="eval").body
    except SyntaxError:
        return None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and isinstance(call.func.value, ast.Name) and call.func.value.id == "async_compile"
            and len(call.args) >= 2 and not any(k.arg == "key" for k in call.keywords)):
        return None
    try:
        first, source = ast.literal_eval(call.args[0]), ast.literal_eval(call.args[1])
    except ValueError:
        return None
    if call.func.attr == "triton":
        return triton_key(first, source)
    if call.func.attr == "cpp_pybinding":
        return cpp_source_key(first, source)
    return None


def with_key(body: str, key: str) -> str:
    """``async_compile.KIND(...)`` (a body ``definition_key`` read) with ``key=`` as its last argument."""
    text = body.rstrip()
    return f"{text[:-1]}, key={key!r})"


class _NamedKernels:
    """Shared by the module's wrapper and its subgraphs' wrappers: every kernel defined goes into
    the root wrapper's ``farm_kernels`` (name -> cache key), in order, and gets its ``key=``."""

    def _farm_root(self) -> FarmWrapperCodegen | None:
        root = self.get_root_graph() if hasattr(self, "get_root_graph") else self
        return root if isinstance(root, FarmWrapperCodegen) else None

    def define_kernel(self, kernel_name: str, kernel_body: str, *args: Any, **kwargs: Any) -> None:
        root = self._farm_root()
        if root is not None:
            try:
                key = definition_key(kernel_name, kernel_body)
            except (ValueError, TypeError, OSError) as e:  # a kernel whose target cannot be read still compiles
                log.warning("raycompile: no cache key for %s in the output module (%s)", kernel_name, e)
                key = None
            if key is not None:
                kernel_body = with_key(kernel_body, key)
                if kernel_body.lstrip().startswith("async_compile.triton("):
                    root.farm_triton_keys.append(key)  # a cache entry's key (a C++ build's is its own)
            root.farm_kernels[kernel_name] = key
        super().define_kernel(kernel_name, kernel_body, *args, **kwargs)  # type: ignore[misc]


class FarmWrapperCodegen(_NamedKernels, _PythonWrapperCodegen):  # type: ignore[misc, valid-type]
    """The output module's wrapper codegen while the farm is enabled (see the module docstring)."""

    def __init__(self) -> None:
        self.farm_kernels: dict[str, str | None] = {}  # before super().__init__: it writes the wait
        self.farm_triton_keys: list[str] = []  # the Triton kernels' keys, for ``render_prefetch``
        super().__init__()

    @staticmethod
    def create(is_subgraph: bool, subgraph_name: str | None, parent_wrapper: Any,
               partition_signatures: Any = None) -> Any:
        if is_subgraph:
            return FarmSubgraphWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
        return FarmWrapperCodegen()

    def write_header(self) -> None:
        super().write_header()
        compat.replace_line(self.imports, STOCK_IMPORT, RUNTIME_IMPORT)
        compat.replace_line(self.header, STOCK_INSTANCE, RUNTIME_INSTANCE)
        for stock, light in compat.LIGHT_LINES:  # a warm load without Inductor's codegen and lowerings
            compat.replace_line(self.imports, stock, light, required=False)
        # before any kernel is defined: the keys of all of them, rendered once they are known
        self.header.writeline(compat.deferred_line(self.render_prefetch))

    def render_prefetch(self) -> str:
        """``async_compile.prefetch([...])``: a warm node looks up the module's kernels in the
        shared tier in one batched round trip, not one per kernel."""
        keys = list(dict.fromkeys(self.farm_triton_keys))
        return f"async_compile.prefetch({keys!r})" if keys else "# (no Triton kernel to look up)"

    def write_kernel_autotune_defs_header(self) -> None:
        # the compile-time autotune block (config.triton.autotune_at_compile_time) defines the same
        # kernels, with their key=, so it needs the same runtime
        super().write_kernel_autotune_defs_header()
        compat.replace_line(self.kernel_autotune_defs, STOCK_IMPORT, RUNTIME_IMPORT)
        compat.replace_line(self.kernel_autotune_defs, STOCK_INSTANCE, RUNTIME_INSTANCE)

    def write_async_compile_wait(self) -> None:
        # written before any kernel is defined; rendered when the module text is assembled
        self.prefix.writeline("")
        self.prefix.writeline(compat.deferred_line(self.render_wait))
        self.prefix.writeline("del async_compile")

    def manifest(self) -> dict[str, Any]:
        """The manifest the module carries: its kernels' cache keys, the autotune winners known for
        them now, and the versions that made it."""
        from .._version import __version__
        from ..kernels import Versions

        v = Versions.here()
        known = {name: w for name, key in self.farm_kernels.items() if key and (w := winner_for(key))}
        return {"kernels": dict(self.farm_kernels), "winners": known,
                "versions": {"torch": v.torch, "triton": v.triton, "raycompile": __version__}}

    def render_wait(self) -> str:
        m = self.manifest()
        lines = ["_raycompile_manifest = {", "    'kernels': {"]
        lines += [f"        {name!r}: {key!r}," for name, key in m["kernels"].items()]
        lines += ["    },", f"    'winners': {m['winners']!r},", f"    'versions': {m['versions']!r},", "}"]
        names = list(m["kernels"])
        if not names:
            return "\n".join([*lines, "async_compile.wait_named(_raycompile_manifest, {})"])
        lines += ["(", *(f"    {n}," for n in names), ") = async_compile.wait_named(_raycompile_manifest, {"]
        lines += [f"    {n!r}: {n}," for n in names]
        return "\n".join([*lines, "})"])


class FarmSubgraphWrapperCodegen(_NamedKernels, _SubgraphPythonWrapperCodegen):  # type: ignore[misc, valid-type]
    """A subgraph's wrapper (control flow, graph partitions): its kernels are module globals too,
    defined before the root's wait, so they join the root's manifest and wait."""
