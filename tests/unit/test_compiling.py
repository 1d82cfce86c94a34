"""``compat.precompile.compiling()``, as another thread sees it: true while Dynamo compiles a frame
and while AOTAutograd lowers a training graph's backward at its first backward (outside Dynamo's
lock). The compiled frames' writer (``wrapper/frames.py``) lowers a backward ahead only when it is
false: otherwise a backward lowered lazily at that moment would be lowered twice (and its frames
written twice). Real ``torch.compile`` with AOTAutograd's lazy backward; the compilers only look."""

from __future__ import annotations

import threading
from typing import Any

import torch
from torch._dynamo.backends.common import aot_autograd

from raycompile.wrapper import compat


def seen_from_another_thread() -> bool:
    seen: list[bool] = []
    probe = threading.Thread(target=lambda: seen.append(compat.precompile.compiling()))
    probe.start()
    probe.join(timeout=30)
    return seen[0]


def test_compiling_is_true_while_a_frame_compiles_and_while_a_backward_lowers_lazily() -> None:
    during: dict[str, bool] = {}

    def compiler(name: str) -> Any:
        def compile_graph(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
            during[name] = seen_from_another_thread()
            return gm.forward

        return compile_graph

    backend = aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"))
    torch._dynamo.reset()
    try:
        x = torch.randn(8, requires_grad=True)
        out = torch.compile(lambda t: (t.sin() * 2).sum(), backend=backend)(x)
        assert during == {"forward": True}  # the backward is lowered lazily, at the first backward
        assert not compat.precompile.compiling()
        out.backward()
        assert during == {"forward": True, "backward": True}
        assert not compat.precompile.compiling()
        assert torch.equal(x.grad, 2 * x.detach().cos())
    finally:
        torch._dynamo.reset()
