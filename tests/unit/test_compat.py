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



def test_the_version_hashes_are_computed_on_the_thread_given() -> None:
    """``version_hashes_ahead``: torch's and Triton's source hashes computed on another thread (an
    I/O thread of the session's), into torch's and Triton's own caches, so the first call finds them."""
    import threading

    from torch._inductor import codecache
    from torch._inductor.runtime import triton_compat

    if not getattr(triton_compat, "HAS_TRITON", False):
        pytest.skip("no Triton installed")
    triton_compat.triton_key.cache_clear()
    if hasattr(codecache.torch_key, "clear"):  # torch 2.13's prefetchable cache
        codecache.torch_key.clear()
    threads: list[threading.Thread] = []

    def submit(fn: object) -> None:
        threads.append(threading.Thread(target=fn, name="io"))  # type: ignore[arg-type]
        threads[-1].start()

    compat.version_hashes_ahead(submit)
    assert len(threads) == 2  # torch's and Triton's, side by side
    for thread in threads:
        thread.join(120)
    assert triton_compat.triton_key.cache_info().currsize == 1  # computed there, cached for the caller
    assert triton_compat.triton_key.cache_info().hits == 0
    assert isinstance(codecache.torch_key(), bytes)


def torch_211_key_cache(func):  # noqa: ANN001, ANN201 - torch 2.11's codecache.torch_key_cache, verbatim
    """A stand-in for torch 2.11's ``codecache.torch_key_cache`` (CI runs torch 2.13, whose cache
    is another): its code as 2.11 ships it, less the docstring."""
    _cache = []

    def wrapper():  # noqa: ANN202
        if len(_cache) == 0:
            _cache.append(func())
        return _cache[0]

    def set_val(val) -> None:  # noqa: ANN001
        assert len(_cache) == 0
        _cache.append(val)

    def clear() -> None:
        _cache.clear()

    wrapper.set = set_val
    wrapper.clear = clear
    return wrapper


def _installed_key_cache(func):  # noqa: ANN001, ANN201
    from torch.utils import _functools

    if not hasattr(_functools, "prefetchable_cache"):
        pytest.skip("this torch's torch_key cache is 2.11's (the stand-in's case)")
    return _functools.prefetchable_cache(func)


@pytest.mark.parametrize("cache", [torch_211_key_cache, _installed_key_cache], ids=["torch-2.11", "installed-torch"])
@pytest.mark.parametrize("io", ["quick", "slow", "fails", "queued"])
def test_a_torch_key_asked_for_while_computed_ahead_is_waited_for_briefly(cache, io: str) -> None:  # noqa: ANN001
    """``version_hashes_ahead`` computes ``torch_key`` on an I/O thread (``entry._key_ahead``). A
    caller that asks for it meanwhile waits at most ``KEY_WAIT_S`` for that value, then computes it
    itself, as stock: beside a busy main thread the I/O thread's computation took 8.2 s on an H200
    host, and a caller that waited for all of it lost 2.0 s. Quick: computed once, by the I/O
    thread, the caller gets its value. Slow: the caller has it after about ``KEY_WAIT_S`` and its
    own computation, long before the I/O thread's ends. Fails: the caller computes it. Queued (the
    I/O thread reaches it only after the caller computed it): it computes nothing. Afterwards the
    cache's own function is stock's again, the value stays cached, and a second ``_key_ahead`` of
    it does nothing. torch 2.11's cache (no
    lock) as a named stand-in on CI's torch 2.13; the installed torch's own (2.13: a lock, ``set``)."""
    import threading
    import time

    from raycompile.wrapper.compat import entry

    calls: list[str] = []
    started = threading.Event()
    takes = {"quick": 0.05, "slow": 3.0, "fails": 0.05, "queued": 0.05}[io]

    def hashing() -> bytes:  # reading and hashing torch's sources
        name = threading.current_thread().name
        calls.append(name)
        started.set()
        if name == "io":
            time.sleep(takes)
            if io == "fails":
                raise OSError("a source file went away")
        return b"key"

    key = cache(hashing)
    cell = key.__closure__[key.__code__.co_freevars.index("func")]
    stock = cell.cell_contents
    compute = entry._key_ahead(key)
    assert compute is not None
    thread = threading.Thread(target=compute, name="io")
    if io == "queued":
        assert key() == b"key"  # before the I/O thread began: computed here, after the short wait
        started.clear()
    thread.start()
    if io != "queued":
        assert started.wait(10)
    began = time.monotonic()
    assert key() == b"key"  # asked while the I/O thread computes it
    waited = time.monotonic() - began
    if io == "slow":
        assert waited < takes / 2, f"the caller waited {waited:.2f} s for the I/O thread"
        assert waited >= entry.KEY_WAIT_S * 0.8
    thread.join(10)
    assert not thread.is_alive()
    expected = {"quick": ["io"], "queued": ["MainThread"]}.get(io, ["io", "MainThread"])
    assert calls == expected
    assert key() == b"key" and len(calls) == len(expected)  # cached now
    assert cell.cell_contents is stock
    assert entry._key_ahead(key) is None  # computed already: nothing more to do
