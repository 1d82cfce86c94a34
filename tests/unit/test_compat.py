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

    from raycompile.kernels import triton_compile
    from raycompile.wrapper import compat

    monkeypatch.delenv("TRITON_PTXAS_PATH", raising=False)
    with compat.inductor_ptxas() as path:  # the real one, on a torch that ships none: nothing changes
        assert path is None and "TRITON_PTXAS_PATH" not in os.environ
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
