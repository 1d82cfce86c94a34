"""``compat.code_names.resolve_code``: the module and path of a code object torch cannot name, found
by the code's own name where it can be (no scan of every object), else through its function."""

from __future__ import annotations

import dataclasses
import gc
import types

import pytest

from raycompile.wrapper.compat import code_names


class Model:
    @property
    def loss_function(self) -> int:
        return 1

    @staticmethod
    def helper() -> int:
        return 2

    @classmethod
    def build(cls) -> int:
        return 3


@dataclasses.dataclass
class Output:
    loss: int = 0


def _no_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*objs: object) -> list[object]:
        raise AssertionError("gc.get_referrers was called for a code its name leads to")

    monkeypatch.setattr(gc, "get_referrers", refused)


@pytest.fixture(autouse=True)
def _fresh() -> None:
    code_names._RESOLVED.clear()


def test_a_property_getter_and_a_static_or_class_method_are_found_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    _no_scan(monkeypatch)
    here = __name__
    getter = Model.__dict__["loss_function"].fget.__code__
    assert code_names.resolve_code(getter) == (here, "Model.loss_function", "fget.__code__")
    assert code_names.resolve_code(Model.helper.__code__) == (here, "Model.helper", "__code__")
    assert code_names.resolve_code(Model.build.__func__.__code__) == (here, "Model.build", "__code__")


def test_a_dataclass_generated_init_is_found_through_its_function() -> None:
    code = Output.__init__.__code__
    assert code.co_filename.startswith("<")  # no file: its name leads nowhere
    module, qualname, path = code_names.resolve_code(code)
    assert (module, qualname, path) == (__name__, "Output.__init__", "__code__")
    assert code_names._RESOLVED[id(code)][0] is code  # kept: the next frame's lookup is free


def test_a_local_function_and_a_rebound_name_are_not_resolved(monkeypatch: pytest.MonkeyPatch) -> None:
    def local() -> int:
        return 4

    assert code_names.resolve_code(local.__code__) is None
    # a code whose name now leads to another function (the attribute was rebound): not this code's path
    old = Model.__dict__["helper"].__func__
    monkeypatch.setattr(Model, "helper", staticmethod(lambda: 5))
    assert code_names.resolve_code(old.__code__) is None
    assert isinstance(old, types.FunctionType)
