from __future__ import annotations

import pathlib

import pytest

from raycompile.cache import kernel_key

BASE = dict(kind="triton", sources=["SRC DeviceProperties(type='cuda', index=0, cc=90)"], torch_version="2.13.0",
            triton_version="3.9.0", ptxas_version="12.9", arch="cuda:90:32", settings={"static": True})


@pytest.mark.parametrize("field,value", [
    ("kind", "cpp"), ("sources", ["SRC2 DeviceProperties(type='cuda', index=0, cc=90)"]),
    ("torch_version", "2.11.0"), ("triton_version", "3.6.0"), ("ptxas_version", "12.8"),
    ("arch", "cuda:80:32"), ("settings", {"static": False}),
])
def test_each_input_changes_the_key(field: str, value: object) -> None:
    assert kernel_key(**{**BASE, field: value}) != kernel_key(**BASE)


def test_equal_inputs_equal_keys() -> None:
    assert kernel_key(**BASE) == kernel_key(**dict(BASE))


def test_real_kernel_on_two_ranks_shares_a_key(corpus_files: list[pathlib.Path]) -> None:
    """The device index is not part of a Triton kernel's key (the adapter removes it from the
    source, ``without_device_index``): cuda:0 and cuda:1 share an entry (pytorch#170123); the
    arch is."""
    from raycompile.cache.keys import triton_key
    from raycompile.wrapper.compat import target_of, without_device_index

    src = corpus_files[0].read_text()
    assert "index=0" in src

    def key(source: str) -> str:
        return triton_key(without_device_index(source), "2.13.0", "3.9.0", "12.9", target_of(source), {})

    assert "index=" not in without_device_index(src).split("DeviceProperties(", 1)[1].split(")")[0]
    assert key(src.replace("index=0", "index=3", 1)) == key(src)
    assert key(src.replace("cc=90", "cc=80", 1)) != key(src)
