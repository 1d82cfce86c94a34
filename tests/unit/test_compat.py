from __future__ import annotations

import pytest

from raycompile.wrapper import compat


def test_every_seam_exists_in_installed_torch() -> None:
    compat.check()


def test_a_missing_seam_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    seams = dict(compat.SEAMS, **{"AsyncCompile.gone": ("torch._inductor.async_compile", "AsyncCompile.gone")})
    monkeypatch.setattr(compat, "SEAMS", seams)
    with pytest.raises(compat.SeamMissing, match="AsyncCompile.gone"):
        compat.check()


def test_every_codegen_time_compile_site_is_where_compat_says() -> None:
    compat.check_eager_compile_sites()


def test_a_moved_compile_site_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    sites = dict(compat.EAGER_COMPILE_SITES, **{"gone": ("torch._inductor.scheduler", "no_such_call(", "2.11")})
    monkeypatch.setattr(compat, "EAGER_COMPILE_SITES", sites)
    with pytest.raises(compat.SeamMissing, match="gone"):
        compat.check_eager_compile_sites()


def test_the_wrapper_codegen_registration_is_restored_exactly() -> None:
    from torch._inductor.codegen import common

    stock_cls = compat.wrapper_codegen_for("cpu")
    before = {d: common.device_codegens[d] for d in ("cpu", "cuda")}

    class Mine(compat.wrapper_codegen_classes()[0]):  # type: ignore[misc]
        pass

    with compat.wrapper_codegen_registered(Mine, ("cpu", "cuda")) as replaced:
        assert replaced == ["cpu", "cuda"]
        assert compat.wrapper_codegen_for("cpu") is Mine and compat.wrapper_codegen_for("cuda") is Mine
        assert common.device_codegens["cpu"].scheduling is before["cpu"].scheduling  # only the wrapper changes
    assert compat.wrapper_codegen_for("cpu") is stock_cls
    assert all(common.device_codegens[d] is before[d] for d in before)  # the very same entries


def test_the_light_header_lines_bind_what_stocks_bind() -> None:
    """The output module's ``align`` and ``extern_kernels`` as the farm's codegen writes them
    (``LIGHT_LINES``) are stock's objects: the same function, and every name of Inductor's
    namespace the same kernel (torch's own functions resolved without Inductor's lowerings; any
    other name from Inductor's namespace itself)."""
    from torch._inductor.codegen import memory_planning
    from torch._inductor.select_algorithm import extern_kernels

    from raycompile.wrapper import runtime

    stock_ns: dict[str, object] = {}
    light_ns: dict[str, object] = {}
    for stock_line, light_line in compat.LIGHT_LINES:
        exec(stock_line, stock_ns)  # noqa: S102 - the header's own import lines
        exec(light_line, light_ns)  # noqa: S102
    assert light_ns["align"] is stock_ns["align"] is memory_planning._align
    assert light_ns["extern_kernels"] is runtime.extern_kernels
    registered = vars(extern_kernels)
    # the kernels of every default-mode and max-autotune GEMM and convolution are torch's own functions
    assert {"mm", "addmm", "bmm", "baddbmm", "convolution"} <= set(compat.light.EXTERN_TORCH_FUNCTIONS)
    for name in compat.light.EXTERN_TORCH_FUNCTIONS:
        if name in registered:  # (a name this torch does not register is never written by its codegen)
            assert getattr(compat.ExternKernels(), name) is registered[name], name
    light = compat.ExternKernels()
    for name, kernel in registered.items():  # every name: the object stock's namespace holds
        assert getattr(light, name) is kernel, name
    with pytest.raises(AttributeError):
        light.no_such_kernel  # noqa: B018 - as stock's namespace raises


def test_the_cache_key_tag_enters_the_fx_graph_key() -> None:
    import torch

    gm = torch.fx.symbolic_trace(lambda x: x + 1)
    args = [torch.randn(3)]
    stock_tag = torch.compiler.config.cache_key_tag
    stock = compat.fx_graph_key(gm, args)
    with compat.cache_key_tag("raycompile-test") as tag:
        assert "raycompile-test" in tag
        tagged = compat.fx_graph_key(gm, args)
    assert tagged != stock and compat.fx_graph_key(gm, args) == stock
    assert torch.compiler.config.cache_key_tag == stock_tag


def test_the_driver_compiles_with_the_ptxas_of_the_farm_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """``inductor_ptxas``: inside, TRITON_PTXAS_PATH is what Inductor's ``_set_triton_ptxas_path``
    sets (the farm's workers run it before every compile), and the ptxas version cached for the
    cache keys is read again; after, both are as before. This CPU build ships no ptxas, so
    Inductor's function is replaced by one that points at a stand-in script."""
    import os

    from torch._inductor.runtime import compile_tasks

    from raycompile.wrapper import compat
    from raycompile.wrapper.compat import triton as triton_compile

    monkeypatch.delenv("TRITON_PTXAS_PATH", raising=False)
    with compat.inductor_ptxas() as path:  # the real one: set only where this torch ships a ptxas
        assert path == os.environ.get("TRITON_PTXAS_PATH")
        assert path is None or os.path.basename(path) == "ptxas"
    assert "TRITON_PTXAS_PATH" not in os.environ
    if path is not None:  # a CUDA torch ships one: the stand-in below would not be used
        return
    before = triton_compile.ptxas_version()
    monkeypatch.setattr(compile_tasks, "_set_triton_ptxas_path",
                        lambda: os.environ.setdefault("TRITON_PTXAS_PATH", "/opt/inductor/bin/ptxas"))
    with compat.inductor_ptxas() as path:
        assert path == os.environ["TRITON_PTXAS_PATH"] == "/opt/inductor/bin/ptxas"
        assert triton_compile.ptxas_version.cache_info().currsize == 0  # read again with the new ptxas
    assert "TRITON_PTXAS_PATH" not in os.environ and triton_compile.ptxas_version() == before
    monkeypatch.setenv("TRITON_PTXAS_PATH", "/usr/local/cuda/bin/ptxas")  # the user's choice stands
    with compat.inductor_ptxas() as path:
        assert path is None
    assert os.environ["TRITON_PTXAS_PATH"] == "/usr/local/cuda/bin/ptxas"


def test_every_internal_the_adapter_imports_is_a_listed_seam() -> None:
    """Each family lists what it reaches: a ``from torch._x import y`` (or a Triton internal) in
    a family's module without an entry in that family's SEAMS fails here, naming it; and each
    family says which torch versions it was checked on."""
    import ast
    import inspect

    from raycompile.wrapper import compat

    unlisted = []
    for name, family in compat.FAMILIES.items():
        assert {"2.11.0", "2.13.0"} <= set(family.CHECKED_ON), name
        listed = set(family.SEAMS.values())
        for node in ast.walk(ast.parse(inspect.getsource(family))):
            if not isinstance(node, ast.ImportFrom) or not node.module:
                continue
            internal = node.module.startswith("torch._") or (
                node.module.startswith("triton.") and node.module != "triton.language")
            if not internal:
                continue
            for alias in node.names:
                if not any((m == node.module and p.split(".")[0] == alias.name) or m == f"{node.module}.{alias.name}"
                           for m, p in listed):
                    unlisted.append(f"{name}: {node.module}.{alias.name}")
    assert unlisted == []
    assert set(compat.CHECKED_ON) == set(compat.SEAMS)


def test_a_cpu_install_without_triton_passes_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton's own seams are skipped where Triton is not installed (C++ kernels only); the
    Inductor ones are still checked."""
    import sys

    from raycompile.wrapper import compat

    monkeypatch.setitem(sys.modules, "triton", None)  # `import triton` now raises ImportError
    compat.check()
    seams = dict(compat.SEAMS, **{"gone": ("torch._inductor.async_compile", "AsyncCompile.gone")})
    monkeypatch.setattr(compat, "SEAMS", seams)
    with pytest.raises(compat.SeamMissing, match="gone"):
        compat.check()


HASHING_THREADS = r"""
import json, sys, tempfile, threading
import torch
import raycompile

seen = []  # (function, thread name) of each computation of torch's or Triton's own source hash


def profile(frame, event, arg):
    if event == "call" and frame.f_code.co_name in ("build_code_hash", "triton_key"):
        seen.append((frame.f_code.co_name, threading.current_thread().name))


threading.setprofile(profile)  # every thread started from here on: the session's I/O threads too
sys.setprofile(profile)
raycompile.enable(shared_cache="file://" + tempfile.mkdtemp(), cache_dir=tempfile.mkdtemp(),
                  compile_jobs="local", fallback=False)
out = torch.compile(lambda x: torch.sin(x) * 2 + 1)(torch.arange(8.0))
raycompile.disable()
sys.setprofile(None)
threading.setprofile(None)
print(json.dumps({"seen": sorted(set(seen)), "traced": raycompile.stats().get("dynamo_frames_traced", 0)}))
"""


@pytest.mark.slow  # a compiling subprocess (about 20 s)
def test_torch_and_tritons_source_hashes_are_computed_where_stock_computes_them() -> None:
    """torch's and Triton's source hashes (``torch_key``, ``triton_key``: every source file read
    and hashed) are computed by the thread that asks for them, as stock does. Until stop 61 the
    session computed them ahead on its I/O threads, which took the GIL from Dynamo's tracing of a
    cold compile (a GPT-2-style step's tracing 1.1 s longer than stock's on an H200, stop 61's
    sample) and gained nothing measurable on a warm start (stop 59's A/B). A real compile in a new
    process, every thread's calls recorded: none of raycompile's threads computes either hash,
    the compile did compute torch's (Inductor's cache key asks for it), and it went through
    compiled frames (where the hashes were computed ahead)."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", HASHING_THREADS], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    seen = [tuple(pair) for pair in got["seen"]]
    assert got["traced"] >= 1, got  # compiled frames were installed: the path that computed them ahead
    assert any(name == "build_code_hash" for name, _ in seen), seen
    assert not [thread for _, thread in seen if thread.startswith("raycompile")], seen
