"""One process of the guard scenarios (run as a script; tests/integration/test_frames_guards.py):
each scenario compiles a function, calls it, changes what stock Inductor's guards notice (a rebound
global function, class or module, a type passed in, a replaced ``__call__``, closure cell or
closed-over module, a module's attribute or submodule, another shape or dtype) and calls it again;
a function that reads an environment variable is compiled once.
For every step the process saves the output and how many graphs Dynamo traced for it (torch's own
``unique_graphs`` counter).

    python guards_driver.py MODE PART OUT.pt [SHARED_URL CACHE_DIR]

MODE ``stock`` (no raycompile) or ``farm`` (raycompile with its defaults, compiled frames in the
shared tier ``SHARED_URL``); PART ``full`` (every step) or ``first`` (each scenario's first call
only: a process that compiled less than the loading process will meet)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from guard_libs import minus, ops, plus, registry  # noqa: E402, F401 - ops registers torch.ops.raycompile_guard_libs

Step = tuple[str, Callable[[], torch.Tensor]]
X = torch.arange(4.0)

# -- what the scenarios compile -------------------------------------------------------------------


def helper(x: torch.Tensor) -> torch.Tensor:
    return x + 1


def helper_b(x: torch.Tensor) -> torch.Tensor:
    return x * 10


def calls_helper(x: torch.Tensor) -> torch.Tensor:
    return helper(x) * 2


def calls_helper_before(x: torch.Tensor) -> torch.Tensor:  # its global is rebound before the first call
    return helper_before(x) * 3


helper_before = helper


class ActA:
    @staticmethod
    def apply(x: torch.Tensor) -> torch.Tensor:
        return x.sin()


class ActB:
    @staticmethod
    def apply(x: torch.Tensor) -> torch.Tensor:
        return x.cos()


Act = ActA


def calls_class(x: torch.Tensor) -> torch.Tensor:
    return Act.apply(x) + 1


lib = plus


def calls_module(x: torch.Tensor) -> torch.Tensor:
    return lib.act(x) * 2


def fill_of(x: torch.Tensor, kind: type) -> torch.Tensor:
    return torch.full((4,), kind(1)) if x is not None else x


class Op:
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


op = Op()


def calls_op(x: torch.Tensor) -> torch.Tensor:
    return op(x) * 2


def op_call_b(self: Op, x: torch.Tensor) -> torch.Tensor:
    return x * 5


def closing_over(fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    def closure(x: torch.Tensor) -> torch.Tensor:
        return fn(x) * 3

    return closure


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 4)
        self.act = torch.nn.GELU()
        self.scale = 2.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.lin(x)) * self.scale


def over_module(model: torch.nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    def step(x: torch.Tensor) -> torch.Tensor:
        return model(x).sum(0)

    return step


def reads_environ(x: torch.Tensor) -> torch.Tensor:
    """Reads a variable, as transformers' attention does: Dynamo inlines ``os.environ.get`` (its
    value baked in, unguarded, in stock too) and guards the code of ``os.environ.encodekey``, a
    nested function whose maker ``os`` deleted: the frame must still be saved and load."""
    return x * float(os.environ.get(ENV_SCALE, "2"))


ENV_SCALE = "RAYCOMPILE_GUARDS_SCALE"


def reads_registry(x: torch.Tensor) -> torch.Tensor:
    """Reads a library's registry (a module's attribute) by a class (its second key), as
    transformers' models read theirs: Dynamo guards the value under the registry's second key."""
    return x * registry.REGISTRY.get_for(registry.Decoder)


def calls_custom_op(x: torch.Tensor) -> torch.Tensor:
    """Calls a library's custom op through its ``torch.ops`` namespace (a module object that
    ``importlib`` cannot import: its guard must still pickle and load)."""
    return torch.ops.raycompile_guard_libs.twice(x) + 1


def plain(x: torch.Tensor) -> torch.Tensor:
    return (x * x).sum(-1)


def for_user_backend(x: torch.Tensor) -> torch.Tensor:
    return helper(x) * 4


backend_calls: list[int] = []


def counting_backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., object]:
    """A user's backend with a side effect of its own: it must run in every process."""
    backend_calls.append(len(example_inputs))
    return gm.forward


# -- the scenarios: (name, steps); a step may change something, then calls --------------------------


def scenarios(full: bool) -> list[tuple[str, list[Step]]]:
    g = globals()

    def rebind(name: str, value: object, call: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
        def step() -> torch.Tensor:
            g[name] = value
            return call()

        return step

    f_helper = torch.compile(calls_helper)
    if full:
        g["helper_before"] = helper_b  # rebound before the first call: a loaded helper entry must not serve
    f_before = torch.compile(calls_helper_before)
    f_class = torch.compile(calls_class)
    f_module = torch.compile(calls_module)
    f_fill = torch.compile(fill_of)
    f_op = torch.compile(calls_op)
    closure = closing_over(helper)
    f_closure = torch.compile(closure)
    net = Net()
    f_net = torch.compile(net)
    inner = Net()
    f_over = torch.compile(over_module(inner))
    f_plain = torch.compile(plain)
    f_environ = torch.compile(reads_environ)
    f_registry = torch.compile(reads_registry)
    f_custom_op = torch.compile(calls_custom_op)
    f_backend = torch.compile(for_user_backend, backend=counting_backend)

    def set_cell(value: object) -> Callable[[], torch.Tensor]:
        def step() -> torch.Tensor:
            closure.__closure__[0].cell_contents = value  # type: ignore[index]
            return f_closure(X)

        return step

    def set_attr(obj: object, name: str, value: object, call: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
        def step() -> torch.Tensor:
            setattr(obj, name, value)
            return call()

        return step

    def set_decoder(value: float) -> Callable[[], torch.Tensor]:
        def step() -> torch.Tensor:
            registry.REGISTRY[registry.Decoder()] = value
            return f_registry(X)

        return step

    def set_call() -> torch.Tensor:
        Op.__call__ = op_call_b  # type: ignore[method-assign]
        return f_op(X)

    out: list[tuple[str, list[Step]]] = [
        ("global function", [("first", lambda: f_helper(X)),
                             ("rebound", rebind("helper", helper_b, lambda: f_helper(X)))]),
        ("global rebound before the call", [("first", lambda: f_before(X))]),
        ("global class", [("first", lambda: f_class(X)), ("rebound", rebind("Act", ActB, lambda: f_class(X)))]),
        ("global module", [("first", lambda: f_module(X)), ("rebound", rebind("lib", minus, lambda: f_module(X)))]),
        ("type passed in", [("bool", lambda: f_fill(X, bool)), ("int", lambda: f_fill(X, int)),
                            ("float", lambda: f_fill(X, float))]),
        ("class __call__", [("first", lambda: f_op(X)), ("rebound", set_call)]),
        ("closure cell", [("first", lambda: f_closure(X)), ("replaced", set_cell(helper_b))]),
        ("module attribute and submodule", [
            ("first", lambda: f_net(X)),
            ("attribute", set_attr(net, "scale", 3.0, lambda: f_net(X))),
            ("submodule", set_attr(net, "act", torch.nn.ReLU(), lambda: f_net(X))),
        ]),
        ("closed-over module", [("first", lambda: f_over(X)),
                                ("its submodule", set_attr(inner, "act", torch.nn.Tanh(), lambda: f_over(X)))]),
        ("environment variable", [("first", lambda: f_environ(X))]),
        ("a library's registry", [("first", lambda: f_registry(X)), ("value changed", set_decoder(4.0))]),
        ("a library's custom op", [("first", lambda: f_custom_op(X))]),
        ("shape and dtype", [("first", lambda: f_plain(torch.ones(3, 4))),
                             ("shape", lambda: f_plain(torch.ones(3, 6))),
                             ("dtype", lambda: f_plain(torch.ones(3, 4, dtype=torch.float64)))]),
        ("user backend", [("first", lambda: f_backend(X)),
                          ("its calls", lambda: torch.tensor(float(len(backend_calls))))]),
    ]
    if not full:
        out = [(name, steps[:1]) for name, steps in out]
    return out


def main(mode: str, part: str, out_path: str, shared: str = "", cache_dir: str = "") -> None:
    from torch._dynamo.utils import counters

    import raycompile

    os.environ.pop(ENV_SCALE, None)  # each process starts as the first did
    if mode == "farm":
        raycompile.enable(shared_cache=shared, cache_dir=cache_dir, fallback=False)
    results: dict[str, list[tuple[str, torch.Tensor, int]]] = {}
    for name, steps in scenarios(part == "full"):
        results[name] = []
        for label, step in steps:
            before = counters["stats"]["unique_graphs"]
            value = step()
            results[name].append((label, value.detach().clone(), counters["stats"]["unique_graphs"] - before))
    saved: dict[str, object] = {"results": results}
    if mode == "farm":
        raycompile.disable()  # writes what is left
        saved["stats"] = raycompile.stats()
    torch.save(saved, out_path)


if __name__ == "__main__":
    main(*sys.argv[1:])
