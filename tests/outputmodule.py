"""Checks the output-module tests share (tests/integration/test_output_module.py on CPU,
tests/gpu/test_output_module_gpu.py on CUDA): what every farm-made module must look like, and
the normalisation its goldens go through."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch

from raycompile.wrapper import compat


def normalise(code: str) -> str:
    """The module text with what changes from run to run or machine to machine replaced: kernel
    sources (C++ follows the CPU's vector width), cache keys, versions, AOT ids, paths."""
    code = re.sub(r"'''.*?'''", "'''<kernel source>'''", code, flags=re.DOTALL)
    code = re.sub(r"'[0-9a-f]{64}'", "'<key>'", code)
    code = re.sub(r"'versions': \{.*?\}", "'versions': <versions>", code)
    code = re.sub(r"# AOT ID: .*", "# AOT ID: <id>", code)
    return re.sub(r"(# kernel path: ).*", r"\1<path>", code)


def compile_and_get_code(fn: Callable[..., Any], *args: Any, **kw: Any) -> tuple[Any, list[str]]:
    """A cold compile (empty Inductor caches): the output, and each output module's source."""
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    with compat.fresh_cache():
        return run_and_get_code(torch.compile(fn, **kw), *args)


def defined_kernels(code: str) -> list[tuple[str, str]]:
    """(name, kind) of each ``NAME = async_compile.KIND(...)`` in the module, in order."""
    return re.findall(r"^(\w+) = async_compile\.(\w+)\(", code, flags=re.MULTILINE)


def check_shape(code: str) -> dict[str, Any]:
    """Assert what every farm-made module is: the farm's runtime (no ``AsyncCompile()``), every
    Triton/C++ kernel defined with its cache key, a manifest listing exactly the kernels defined,
    and one explicit wait that names and binds each of them. Returns the manifest."""
    assert "AsyncCompile()" not in code and "async_compile = FarmCompile()" in code
    assert "wait(globals())" not in code and code.count("async_compile.wait_named(") == 1
    defined = defined_kernels(code)
    manifest_src = re.search(r"^_raycompile_manifest = \{.*?^\}$", code, flags=re.MULTILINE | re.DOTALL)
    assert manifest_src, "no manifest"
    namespace: dict[str, Any] = {}
    exec(manifest_src.group(0), namespace)
    manifest = namespace["_raycompile_manifest"]
    assert list(manifest["kernels"]) == [name for name, _ in defined]
    # before any kernel is defined, one batched lookup of every Triton kernel's key (a warm node's
    # shared-tier round trip)
    triton_keys = [manifest["kernels"][name] for name, kind in defined if kind == "triton"]
    prefetch = re.search(r"^async_compile\.prefetch\((\[.*?\])\)$", code, flags=re.MULTILINE)
    if triton_keys:
        assert prefetch and eval(prefetch.group(1)) == list(dict.fromkeys(triton_keys))
        assert prefetch.start() < code.index(" = async_compile.triton(")
    else:
        assert prefetch is None
    for name, kind in defined:
        if kind in ("triton", "cpp_pybinding"):
            key = manifest["kernels"][name]
            assert re.fullmatch(r"[0-9a-f]{64}", key), name
            assert re.search(rf"^{name} = async_compile\.{kind}\(.*?, key='{key}'\)$", code,
                             flags=re.MULTILINE | re.DOTALL), name
        assert f"    {name!r}: {name}," in code  # waited on by name, and bound by name
    return manifest
