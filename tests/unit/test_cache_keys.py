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


def test_equal_inputs_equal_keys_and_the_device_index_does_not_split() -> None:
    assert kernel_key(**BASE) == kernel_key(**dict(BASE))
    rank1 = {**BASE, "sources": ["SRC DeviceProperties(type='cuda', index=1, cc=90)"]}
    assert kernel_key(**rank1) == kernel_key(**BASE)  # cuda:0 and cuda:1 share (pytorch#170123)


def test_real_kernel_on_two_ranks_shares_a_key(corpus_files: list[pathlib.Path]) -> None:
    src = corpus_files[0].read_text()
    assert "index=0" in src
    k0 = kernel_key(**{**BASE, "sources": [src]})
    assert kernel_key(**{**BASE, "sources": [src.replace("index=0", "index=3", 1)]}) == k0
    assert kernel_key(**{**BASE, "sources": [src.replace("cc=90", "cc=80", 1)]}) != k0
