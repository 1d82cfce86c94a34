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
