from __future__ import annotations

import os
import pathlib

import pytest

from raycompile.cache import files


def test_publish_writes_blobs_before_the_manifest(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []
    real = files.write_atomic
    monkeypatch.setattr(files, "write_atomic", lambda p, d: (order.append(os.path.basename(p)), real(p, d)))
    group = tmp_path / "GROUP"
    payload = {str(group / "__grp__k.json"): b"{}", str(group / "k.cubin"): b"\x00" * 10,
               str(group / "k.json"): b"{\"a\": 1}"}
    assert files.publish(payload) == 2 + 10 + 8
    assert order[-1] == "__grp__k.json" and set(order) == {"__grp__k.json", "k.cubin", "k.json"}
    order.clear()
    assert files.publish(payload) == 0 and order == []  # identical files are left alone
    assert not [p for p in os.listdir(group) if p.startswith(".tmp.")]
