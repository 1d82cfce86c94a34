"""One kernel identity end to end: the key the farm's codegen writes into an output module
(``definition_key``) is the key the Router computes for the compile job that module's definition
submits, and the key its cache entry is filed under; a module that names a kernel by another key
(made with another toolchain) is counted and served by this node's key. Real parts: a real corpus
kernel cross-compiled on this CPU, the real Router and hooks of an enabled session, Inductor's
own ``AsyncCompile.triton`` under the farm's runtime."""

from __future__ import annotations

import contextlib
import pathlib

import pytest
import torch

import raycompile
from raycompile.cache import Entry
from raycompile.wrapper.codegen import definition_key, with_key
from raycompile.wrapper.kernel_sources import read_kernel

pytest.importorskip("triton")


def _loads_here() -> contextlib.AbstractContextManager[object]:
    """Loading the compiled kernel into this process (Inductor's precompile in the parent) needs a
    GPU; on a CPU-only machine the wait raises there, after the Router has keyed, compiled and
    filed the kernel, which is what is checked."""
    if torch.cuda.is_available():
        return contextlib.nullcontext()
    return pytest.raises(RuntimeError, match="CUDA")


def _module(name: str, keyed_body: str, key: str) -> str:
    """A minimal output module as the farm's codegen writes one: the runtime, the keyed definition,
    the manifest and the one wait."""
    return "\n".join([
        "from raycompile.wrapper.runtime import FarmCompile",
        "async_compile = FarmCompile()",
        f"{name} = {keyed_body}",
        f"_raycompile_manifest = {{'kernels': {{{name!r}: {key!r}}}, 'winners': {{}}}}",
        f"({name},) = async_compile.wait_named(_raycompile_manifest, {{{name!r}: {name}}})",
    ])


def test_the_router_keys_a_kernel_as_its_output_module_names_it(corpus_files: list[pathlib.Path],
                                                                 tmp_path: pathlib.Path) -> None:
    src = read_kernel(str(next(p for p in corpus_files if "triton_heuristics.template" not in p.read_text())))
    body = f"async_compile.triton({src.name!r}, '''\n{src.source.strip()}\n''', device_str='cuda')"
    key = definition_key(src.name, body)
    assert key is not None
    session = raycompile.enable(compile_jobs="local", cache_dir=str(tmp_path / "cache"), shared_cache="none",
                                autotune=False)
    try:
        session.install()
        with _loads_here():
            exec(compile(_module(src.name, with_key(body, key), key), "module_a", "exec"), {})
        s = raycompile.stats()
        assert s["jobs_local"] == 1 and s["key_mismatches"] == 0 and s["failures"] == 0
        entry = session.cache.local.get(key)  # filed under exactly the module's key
        assert isinstance(entry, Entry) and entry.meta["label"] == src.name

        # a module made where this kernel keys differently (another ptxas, say): the mismatch is
        # counted, and this node's key serves it (a hit: nothing compiled again)
        foreign = "f" * 64
        with _loads_here():
            exec(compile(_module(src.name, with_key(body, foreign), foreign), "module_b", "exec"), {})
        s = raycompile.stats()
        assert s["key_mismatches"] == 1 and s["jobs_local"] == 1 and s["local_hits"] >= 1
        assert not isinstance(session.cache.local.get(foreign), Entry)
    finally:
        raycompile.disable()
