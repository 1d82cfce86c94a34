"""Triton's compiled helper modules travel with compiled frames (``compat.triton.helper_modules``):
a helper built for real by Triton's own ``compile_module_from_src`` (gcc, as its CUDA driver's
``cuda_utils`` is) in one cache dir is found, installed into an empty one, and loaded from there
by Triton without building it again."""

from __future__ import annotations

import pathlib

import pytest

triton_build = pytest.importorskip("triton.runtime.build")

from raycompile.wrapper.compat import triton as compat_triton  # noqa: E402 - after the skip

SOURCE = """
#define PY_SSIZE_T_CLEAN
#include <Python.h>
static struct PyModuleDef probe = {PyModuleDef_HEAD_INIT, "raycompile_helper_probe", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_raycompile_helper_probe(void) { return PyModule_Create(&probe); }
"""


def test_a_helper_built_in_one_cache_dir_loads_from_another_unbuilt(tmp_path: pathlib.Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "built"))
    module = triton_build.compile_module_from_src(SOURCE, "raycompile_helper_probe")
    assert module.__name__ == "raycompile_helper_probe"
    blobs = compat_triton.helper_modules()
    assert [b for b in blobs if b.startswith(compat_triton.HELPER_BLOB)], sorted(blobs)  # the group Triton named

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "fresh"))  # another node's empty cache
    assert compat_triton.install_helper_modules(blobs) >= 1
    assert compat_triton.install_helper_modules(blobs) == 0  # there already: nothing written twice

    def no_build(*args: object, **kwargs: object) -> str:
        raise AssertionError("Triton built the helper again")

    monkeypatch.setattr(triton_build, "_build", no_build)
    again = triton_build.compile_module_from_src(SOURCE, "raycompile_helper_probe")
    assert again.__file__ and again.__file__.startswith(str(tmp_path / "fresh"))
