"""A C++ job's label (the summary's slowest kernels, the trace's slices, CompileError): the
kernel's name in the output module, else its library's hash and its length, never the bare hashed
``.so`` name. tests/integration/test_observability.py checks the names of a real compile."""

from __future__ import annotations

import pathlib
from typing import Any

from raycompile.kernels import CppStep
from raycompile.wrapper import compat
from raycompile.wrapper.job_keys import _cpp_label

MODULE = """
class _AsyncCompile:
    def cpp_pybinding(self, argtypes, source, key=None):
        return compat.defining_cpp_kernel()


async_compile = _AsyncCompile()
cpp_fused_add_relu_0 = async_compile.cpp_pybinding(['const float*', 'float*'], r'''
#include <torch/csrc/inductor/cpp_prefix.h>
extern "C"  void  kernel(const float* in_ptr0, float* out_ptr0)
{
}
''', key='k')
outside = compat.defining_cpp_kernel()
"""


def test_the_name_comes_from_the_output_module_line_that_defines_the_kernel(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "cxyz_output_module.py"
    path.write_text(MODULE)
    namespace: dict[str, Any] = {"compat": compat}
    exec(compile(MODULE, str(path), "exec"), namespace)  # as Inductor loads a module: from its file
    assert namespace["cpp_fused_add_relu_0"] == "cpp_fused_add_relu_0"
    assert namespace["outside"] is None  # not under a kernel's definition
    assert compat.defining_cpp_kernel() is None


def test_without_a_name_the_label_is_the_hash_and_the_kernels_length(tmp_path: pathlib.Path) -> None:
    source = tmp_path / "c7vumwyt5sawsvhp5wnjflkv5g6ay4b4my3ymr3fxmnuco6zthw5.main.cpp"
    source.write_text('\n#include <cstdint>\nextern "C" void kernel(float* out)\n{\n    out[0] = 1;\n}\n\n'
                      "// Python bindings to call kernel():\n#define PY_SSIZE_T_CLEAN\n#include <Python.h>\n")
    target = str(source).replace(".cpp", ".so")
    step = CppStep(["g++", str(source), "-shared", "-o", target], target, f"{target}.rcbuild")
    assert _cpp_label([step], {str(source): source.read_bytes()}) == "C++ kernel c7vumwyt (5 lines)"
    gone = CppStep(["g++", str(tmp_path / "cgone.main.cpp"), "-o", target], target, "b")
    assert _cpp_label([gone], {}) == "C++ kernel c7vumwyt (0 lines)"  # no source carried: still a label
