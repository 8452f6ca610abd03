"""Argument types across mechanisms: one op with an argument of each kind, exported both ways.

Run: python test.py [--out DIR] [-v]

`argdemo::all_kinds(Tensor x, Tensor? bias, float alpha, int k, bool flag, str mode, int[] dims, float[] scales)`
is built in C++ (TORCH_LIBRARY) and again in Python (torch.library.custom_op), then exported to one
`argdemo::AllKinds` node three ways: a parse_args symbolic and an autograd.Function symbolic
(dynamo=False), and a custom_translation_table translation (dynamo=True). Every attribute's ONNX type
and value is checked, the node's meaning is checked with onnx.reference against PyTorch, the same op
in standard ONNX runs in ONNX Runtime, and an onnxruntime-extensions Python kernel shows which kinds
it can read. Steps 1 and 4-8 need a C++ compiler; without one they are skipped and the example exits 77.
"""

import contextlib
import logging
import os
import re
import time
from collections.abc import Sequence

import numpy as np
import onnx
import onnxruntime as ort
import onnxscript
import torch
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun
from onnxscript import opset18 as op
from torch.onnx import register_custom_op_symbolic
from torch.onnx.symbolic_helper import parse_args

try:  # only step 8 needs it: it runs the custom node in ONNX Runtime
    from onnxruntime_extensions import PyCustomOpDef, get_library_path, onnx_op
except ImportError:  # pip install onnxruntime-extensions
    onnx_op = None

# isort: split
# Test-only imports: the command line and the checks around the lesson's code.
import argparse
import ctypes
import pathlib
import shutil
import sys
import tempfile
import textwrap
import traceback
import typing
import warnings

TORCH = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])  # e.g. (2, 14)


@contextlib.contextmanager
def expect_error(expected):
    """The code inside must fail with `expected` in its message: print the error's first line and go on."""
    try:
        yield
    except Exception as error:  # noqa: BLE001 - showing what the reader would see is the point
        message = f"{type(error).__name__}: {error}"
        cause = error.__cause__
        while cause is not None:  # a wrapped error: its cause often names the real problem
            message += f"\n{type(cause).__name__}: {cause}"
            cause = cause.__cause__
        message = re.sub(r"\x1b\[[0-9;]*m", "", message)  # some errors colour their text
        if expected not in message:
            raise
        lines = [line.strip() for line in message.splitlines() if line.strip()]
        print("  reproduced:", lines[0])
        if expected not in lines[0]:  # the line that names the cause is further down
            print("  reproduced, further down:", next(line for line in lines if expected in line))
    else:
        raise AssertionError(f"expected an error containing {expected!r}, but the code ran")


# ---------------------------------------------------------------------------------------------
# 1. The op in C++: the schema types and the kernel's C++ types
# ---------------------------------------------------------------------------------------------

ALL_KINDS_CPP = r"""
#include <ATen/ATen.h>
#include <torch/library.h>

// One argument of each kind. The schema (TORCH_LIBRARY below) names the kinds PyTorch sees; the
// kernel's parameter types are the C++ types each kind arrives as.
at::Tensor all_kinds(const at::Tensor& x,                    // Tensor
                     const std::optional<at::Tensor>& bias,  // Tensor?
                     double alpha,                           // float
                     int64_t k,                              // int
                     bool flag,                              // bool
                     c10::string_view mode,                  // str
                     at::IntArrayRef dims,                   // int[]
                     at::ArrayRef<double> scales) {          // float[]
  TORCH_CHECK(mode == "sum" || mode == "max", "all_kinds: mode must be \"sum\" or \"max\"");
  auto y = x * alpha;
  if (bias.has_value()) y = y + *bias;
  std::vector<int64_t> shape(x.dim(), 1);
  shape[1] = static_cast<int64_t>(scales.size());  // one scale per channel (dim 1)
  y = y * at::tensor(scales, x.options()).view(shape);
  if (flag) y = y.relu();
  y = mode == "sum" ? y.sum(dims, /*keepdim=*/true) : y.amax(dims, /*keepdim=*/true);
  return y + k;
}

TORCH_LIBRARY(argdemo, m) {
  m.def("all_kinds(Tensor x, Tensor? bias, float alpha, int k, bool flag, str mode, int[] dims, float[] scales)"
        " -> Tensor");
}

TORCH_LIBRARY_IMPL(argdemo, CPU, m) {
  m.impl("all_kinds", &all_kinds);
}
"""


def step1_cpp_op() -> None:
    print("== 1. The op in C++: TORCH_LIBRARY schema and kernel types ==")
    problem = build_problem()
    if problem:
        raise Skip(problem)
    noise: list[str] = []
    with captured(noise):  # torch 2.4 prints "No CUDA runtime is found" to stderr: the filter cannot catch a print
        logging.getLogger("torch.utils.cpp_extension").addFilter(lambda record: "No CUDA runtime" not in record.msg)
        from torch.utils import cpp_extension  # after the filter: importing it logs "No CUDA runtime is found"

    EXTENSION_NAME = "onnx_tutorial_argument_types"
    print("  building the C++ extension: about a minute the first time, cached after")
    started = time.time()
    cpp_extension.load_inline(
        name=EXTENSION_NAME,
        cpp_sources=[ALL_KINDS_CPP],
        is_python_module=False,  # the op registers itself when the library loads: no Python module
        verbose=False,
    )
    (library,) = [path for path in torch.ops.loaded_libraries if EXTENSION_NAME in path]
    if os.path.getmtime(library) >= started:  # the build wrote the library after `started`
        print(f"  built {library} in {time.time() - started:.0f} s")
    else:
        print(f"  reused the cached build {library} ({time.time() - started:.1f} s)")
    print("  C++ schema:", torch.ops.argdemo.all_kinds.default._schema)
    unexpected = [line for line in noise[0].splitlines() if line.strip() and "No CUDA runtime is found" not in line]
    assert not unexpected, f"importing torch.utils.cpp_extension printed: {unexpected}"
    schema = str(torch.ops.argdemo.all_kinds.default._schema)
    assert schema == (
        "argdemo::all_kinds(Tensor x, Tensor? bias, float alpha, int k, bool flag, str mode, int[] dims, "
        "float[] scales) -> Tensor"
    ), schema
    x = torch.randn(2, 3, 4, 5)
    with expect_error('all_kinds: mode must be "sum" or "max"'):
        torch.ops.argdemo.all_kinds(x, None, 1.0, 0, False, "mean", [2, 3], [1.0, 1.0, 1.0])
    # The kernel's C++ types receive each kind: here None for bias, and plain values for the rest.
    y = torch.ops.argdemo.all_kinds(x, None, 1.0, 0, False, "sum", [2, 3], [1.0, 1.0, 1.0])
    torch.testing.assert_close(y, x.sum((2, 3), keepdim=True))


# ---------------------------------------------------------------------------------------------
# 2. The same op in Python: torch.library.custom_op annotations
# ---------------------------------------------------------------------------------------------


def step2_custom_op() -> None:
    print("== 2. The same op in Python: torch.library.custom_op annotations ==")

    def define_with_builtin_lists():  # the README's block: list[int] and list[float]
        # Before torch 2.7 custom_op refuses list[int] and list[float]: annotate typing.List[int], typing.List[float].
        @torch.library.custom_op("argdemo::all_kinds_py", mutates_args=())
        def all_kinds_py(
            x: torch.Tensor,
            bias: torch.Tensor | None,
            alpha: float,
            k: int,
            flag: bool,
            mode: str,
            dims: list[int],
            scales: list[float],
        ) -> torch.Tensor:
            y = x * alpha
            if bias is not None:
                y = y + bias
            y = y * torch.tensor(scales, dtype=x.dtype).view(1, -1, *[1] * (x.dim() - 2))
            if flag:
                y = y.relu()
            y = y.sum(dims, keepdim=True) if mode == "sum" else y.amax(dims, keepdim=True)
            return y + k

        return all_kinds_py

    if TORCH >= (2, 7):
        all_kinds_py = define_with_builtin_lists()
    else:  # infer_schema knows typing.List[int] and typing.Sequence[int], not list[int] (pytorch/pytorch#146594)
        differs("custom_op refuses list[int] and list[float] before torch 2.7: typing.List[int] gives the same schema")
        with expect_error("Parameter dims has unsupported type list[int]"):
            define_with_builtin_lists()

        @torch.library.custom_op("argdemo::all_kinds_py", mutates_args=())
        def all_kinds_py(
            x: torch.Tensor,
            bias: torch.Tensor | None,
            alpha: float,
            k: int,
            flag: bool,
            mode: str,
            dims: typing.List[int],  # noqa: UP006 - torch < 2.7 refuses list[int]
            scales: typing.List[float],  # noqa: UP006
        ) -> torch.Tensor:
            y = x * alpha
            if bias is not None:
                y = y + bias
            y = y * torch.tensor(scales, dtype=x.dtype).view(1, -1, *[1] * (x.dim() - 2))
            if flag:
                y = y.relu()
            y = y.sum(dims, keepdim=True) if mode == "sum" else y.amax(dims, keepdim=True)
            return y + k

    print("  custom_op schema:", torch.ops.argdemo.all_kinds_py.default._schema)
    schema = str(torch.ops.argdemo.all_kinds_py.default._schema)
    # The surprise: `int` and `list[int]` become SymInt and SymInt[] (they may be symbolic sizes).
    assert schema == (
        "argdemo::all_kinds_py(Tensor x, Tensor? bias, float alpha, SymInt k, bool flag, str mode, "
        "SymInt[] dims, float[] scales) -> Tensor"
    ), schema
    if not hasattr(torch.ops.argdemo, "all_kinds"):
        print("  (no C++ op to compare with: step 1 was skipped)")
        return
    seeds = 5
    for _ in range(seeds):
        x, bias = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5)
        for b, flag, mode in [(bias, True, "sum"), (None, False, "max")]:
            expected = torch.ops.argdemo.all_kinds(x, b, 0.5, 2, flag, mode, [2, 3], [1.0, 2.0, 3.0])
            torch.testing.assert_close(all_kinds_py(x, b, 0.5, 2, flag, mode, [2, 3], [1.0, 2.0, 3.0]), expected)
    print(f"  the Python twin and the C++ kernel agree ({2 * seeds} calls, with and without bias)")


# ---------------------------------------------------------------------------------------------
# 3. The ONNX node: one schema for every exporter
# ---------------------------------------------------------------------------------------------


def step3_onnx_schema() -> None:
    print("== 3. The ONNX node argdemo::AllKinds: one schema for both exporters ==")
    optional = onnx.defs.OpSchema.FormalParameterOption.Optional
    attr = onnx.defs.OpSchema.Attribute
    AttrType = onnx.defs.OpSchema.AttrType
    onnx.defs.register_schema(
        onnx.defs.OpSchema(
            "AllKinds",
            "argdemo",
            1,
            inputs=[
                onnx.defs.OpSchema.FormalParameter("x", "T"),
                onnx.defs.OpSchema.FormalParameter("bias", "T", param_option=optional),
            ],
            outputs=[onnx.defs.OpSchema.FormalParameter("y", "T")],
            type_constraints=[("T", ["tensor(float)"], "float32 tensors")],
            attributes=[
                attr("alpha", AttrType.FLOAT, "float"),
                attr("k", AttrType.INT, "int"),
                attr("flag", AttrType.INT, "bool: ONNX has no bool attribute, so 0 or 1"),
                attr("mode", AttrType.STRING, "str: sum or max"),
                attr("dims", AttrType.INTS, "int[]"),
                attr("scales", AttrType.FLOATS, "float[]"),
            ],
        )
    )
    schema = onnx.defs.get_schema("AllKinds", 1, "argdemo")
    attribute_types = {name: schema.attributes[name].type.name for name in ATTRIBUTE_TYPES}
    assert attribute_types == ATTRIBUTE_TYPES and len(schema.attributes) == 6, schema.attributes
    print(f"  registered argdemo::AllKinds(x, bias?) with attributes {attribute_types}")
    # What the registration buys: the full checker now checks each attribute's type.
    with expect_error("Mismatched attribute type in ' : alpha'. Expected: 'FLOAT', actual: 'INT'"):
        onnx.checker.check_model(one_node_model(alpha=1), full_check=True)


# ---------------------------------------------------------------------------------------------
# 4. dynamo=False: a symbolic with parse_args
# ---------------------------------------------------------------------------------------------

# Two sets of values for the non-tensor arguments, so each attribute in a file can be traced back to
# the model that wrote it.
WITH_BIAS = dict(alpha=0.5, k=2, flag=True, mode="sum", dims=[2, 3], scales=[1.0, 2.0, 3.0])
NO_BIAS = dict(alpha=-1.5, k=-3, flag=False, mode="max", dims=[1, 3], scales=[0.5, 1.0, 2.0])


class AllKindsModel(torch.nn.Module):
    """One call of `op`; its non-tensor arguments are fixed when the model is built, as in most models."""

    def __init__(self, op, alpha, k, flag, mode, dims, scales):
        super().__init__()
        self.op = op
        self.arguments = (alpha, k, flag, mode, dims, scales)

    def forward(self, x, bias=None):
        return self.op(x, bias, *self.arguments)


def kinds(*args):
    """The Python type of each argument a mechanism hands you: 'Value', 'float', 'list[int]', ..."""
    return ", ".join(f"list[{type(a[0]).__name__}]" if isinstance(a, list) else type(a).__name__ for a in args)


def output_type(x, dims):
    # A custom node has no shape inference: say what comes out (x's dtype, the reduced dims of size 1).
    return x.type().with_sizes([1 if axis in dims else size for axis, size in enumerate(x.type().sizes())])


# One parse_args descriptor per schema argument, in schema order.
@parse_args("v", "v", "f", "i", "b", "s", "is", "fs")
def all_kinds_symbolic(g, x, bias, alpha, k, flag, mode, dims, scales):
    print("  all_kinds_symbolic received:", kinds(x, bias, alpha, k, flag, mode, dims, scales))
    inputs = [x] if bias.node().mustBeNone() else [x, bias]  # an omitted Tensor? still arrives as a Value
    y = g.op(
        "argdemo::AllKinds",
        *inputs,
        alpha_f=alpha,  # float -> FLOAT
        k_i=k,  # int -> INT
        flag_i=flag,  # bool -> INT (ONNX has no bool attribute)
        mode_s=mode,  # str -> STRING
        dims_i=dims,  # list of ints -> INTS
        scales_f=scales,  # list of floats -> FLOATS
    )
    y.setType(output_type(x, dims))
    return y


def print_node(path):
    """The full checker (with step 3's schema it checks every attribute's type), then the model's one node."""
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    print(f"  {path}: {onnx.printer.to_text(model.graph.node[0]).strip()}")


def all_kinds_numpy(x, bias, alpha, k, flag, mode, dims, scales):
    y = x * np.float32(alpha)
    if bias is not None:
        y = y + bias
    y = y * np.asarray(scales, dtype=np.float32).reshape(1, -1, 1, 1)
    if flag:
        y = np.maximum(y, np.float32(0))
    reduce = np.sum if mode == "sum" else np.max
    return (reduce(y, axis=tuple(dims), keepdims=True) + np.float32(k)).astype(np.float32)


# The node's meaning, for onnx.reference: it hands each attribute over as a Python value.
class AllKinds(OpRun):
    op_domain = "argdemo"

    def _run(self, x, bias=None, alpha=None, k=None, flag=None, mode=None, dims=None, scales=None):
        return (all_kinds_numpy(x, bias, alpha, k, flag, mode, dims, scales),)


def compare(path, actual, expected, runtime, rtol=1e-5, atol=1e-5):
    """assert_allclose, then one line that names the model, the runtime and the largest difference."""
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=path)
    diff = np.abs(actual - expected).max()
    print(f"  {path}: {runtime} matches PyTorch (max abs diff {diff:.1e}; rtol={rtol}, atol={atol})")


def step4_parse_args() -> None:
    print("== 4. dynamo=False: a symbolic with parse_args ==")
    need_the_op()  # step 1's C++ op; the checker also uses step 3's ONNX schema
    register_custom_op_symbolic("argdemo::all_kinds", all_kinds_symbolic, 18)
    x, bias = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5)
    model = AllKindsModel(torch.ops.argdemo.all_kinds, **WITH_BIAS).eval()
    model_no_bias = AllKindsModel(torch.ops.argdemo.all_kinds, **NO_BIAS).eval()
    torch.onnx.export(
        model,
        (x, bias),
        "all_kinds.onnx",
        dynamo=False,
        opset_version=18,
        input_names=["x", "bias"],
        output_names=["y"],
        custom_opsets={"argdemo": 1},
    )
    torch.onnx.export(
        model_no_bias,
        (x,),
        "all_kinds_no_bias.onnx",
        dynamo=False,
        opset_version=18,
        input_names=["x"],
        output_names=["y"],
        custom_opsets={"argdemo": 1},
    )
    print_node("all_kinds.onnx")
    print_node("all_kinds_no_bias.onnx")
    check_node("all_kinds.onnx", ["x", "bias"], WITH_BIAS)
    check_node("all_kinds_no_bias.onnx", ["x"], NO_BIAS)

    (y,) = ReferenceEvaluator("all_kinds.onnx", new_ops=[AllKinds]).run(None, {"x": x.numpy(), "bias": bias.numpy()})
    compare("all_kinds.onnx", y, model(x, bias).numpy(), "onnx.reference")
    (y,) = ReferenceEvaluator("all_kinds_no_bias.onnx", new_ops=[AllKinds]).run(None, {"x": x.numpy()})
    compare("all_kinds_no_bias.onnx", y, model_no_bias(x).numpy(), "onnx.reference")


# ---------------------------------------------------------------------------------------------
# 5. dynamo=False: what an autograd.Function's symbolic receives
# ---------------------------------------------------------------------------------------------


class AllKindsFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, bias, alpha, k, flag, mode, dims, scales):
        return torch.ops.argdemo.all_kinds(x, bias, alpha, k, flag, mode, dims, scales)

    @staticmethod
    def symbolic(g, x, bias, alpha, k, flag, mode, dims, scales):
        # No parse_args: tensors arrive as Values, the other arguments as the Python objects forward
        # got, and an omitted Tensor? as None. Never hand None to g.op: it crashes the interpreter.
        print("  AllKindsFunction.symbolic received:", kinds(x, bias, alpha, k, flag, mode, dims, scales))
        inputs = [x] if bias is None else [x, bias]
        y = g.op(
            "argdemo::AllKinds",
            *inputs,
            alpha_f=alpha,
            k_i=k,
            flag_i=flag,
            mode_s=mode,
            dims_i=dims,
            scales_f=scales,
        )
        y.setType(output_type(x, dims))
        return y


def step5_function_symbolic() -> None:
    print("== 5. dynamo=False: what an autograd.Function's symbolic receives ==")
    need_the_op()  # the Function's forward calls step 1's C++ op
    x, bias = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5)
    model = AllKindsModel(AllKindsFunction.apply, **WITH_BIAS).eval()
    model_no_bias = AllKindsModel(AllKindsFunction.apply, **NO_BIAS).eval()
    torch.onnx.export(
        model,
        (x, bias),
        "all_kinds_function.onnx",
        dynamo=False,
        opset_version=18,
        input_names=["x", "bias"],
        output_names=["y"],
        custom_opsets={"argdemo": 1},
    )
    torch.onnx.export(
        model_no_bias,
        (x,),
        "all_kinds_function_no_bias.onnx",
        dynamo=False,
        opset_version=18,
        input_names=["x"],
        output_names=["y"],
        custom_opsets={"argdemo": 1},
    )
    print_node("all_kinds_function.onnx")
    print_node("all_kinds_function_no_bias.onnx")

    check_node("all_kinds_function.onnx", ["x", "bias"], WITH_BIAS, same_as="all_kinds.onnx")
    check_node("all_kinds_function_no_bias.onnx", ["x"], NO_BIAS, same_as="all_kinds_no_bias.onnx")
    reference_matches("all_kinds_function.onnx", model, x, bias)
    reference_matches("all_kinds_function_no_bias.onnx", model_no_bias, x)


# ---------------------------------------------------------------------------------------------
# 6. dynamo=True: a fake kernel and a custom_translation_table translation
# ---------------------------------------------------------------------------------------------

argdemo = onnxscript.values.Opset("argdemo", 1)


def all_kinds_translation(
    x, bias, alpha: float, k: int, flag: bool, mode: str, dims: Sequence[int], scales: Sequence[float]
):
    print("  all_kinds_translation received:", kinds(x, bias, alpha, k, flag, mode, dims, scales))
    # bias=None leaves the optional input out. The attribute types come from the ONNX schema of step 3.
    return argdemo.AllKinds(x, bias, alpha=alpha, k=k, flag=flag, mode=mode, dims=dims, scales=scales)


def step6_translation() -> None:
    print("== 6. dynamo=True: a fake kernel and a custom_translation_table translation ==")
    need_the_op()  # step 1's C++ op; onnxscript builds the node from step 3's ONNX schema

    @torch.library.register_fake("argdemo::all_kinds")
    def _(x, bias, alpha, k, flag, mode, dims, scales):
        return x.new_empty([1 if axis in dims else size for axis, size in enumerate(x.shape)])

    if TORCH < (2, 6):  # the fake kernel above registers on 2.4 too; the translation table needs 2.6
        raise NeedsTorch("2.6", NO_TRANSLATION_TABLE)
    x, bias = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5)
    # Needs torch >= 2.6: torch.onnx.export has no custom_translation_table before.
    model = AllKindsModel(torch.ops.argdemo.all_kinds, **WITH_BIAS).eval()
    model_no_bias = AllKindsModel(torch.ops.argdemo.all_kinds, **NO_BIAS).eval()
    table = {torch.ops.argdemo.all_kinds.default: all_kinds_translation}
    onnx_program = torch.onnx.export(
        model,
        (x, bias),
        dynamo=True,
        opset_version=18,
        verbose=False,
        output_names=["y"],
        custom_translation_table=table,
    )
    onnx_program.save("all_kinds_dynamo.onnx")
    onnx_program = torch.onnx.export(
        model_no_bias,
        (x,),
        dynamo=True,
        opset_version=18,
        verbose=False,
        output_names=["y"],
        custom_translation_table=table,
    )
    onnx_program.save("all_kinds_dynamo_no_bias.onnx")
    print_node("all_kinds_dynamo.onnx")
    print_node("all_kinds_dynamo_no_bias.onnx")

    check_node("all_kinds_dynamo.onnx", ["x", "bias"], WITH_BIAS, same_as="all_kinds.onnx")
    check_node("all_kinds_dynamo_no_bias.onnx", ["x"], NO_BIAS, same_as="all_kinds_no_bias.onnx")
    reference_matches("all_kinds_dynamo.onnx", model, x, bias)
    reference_matches("all_kinds_dynamo_no_bias.onnx", model_no_bias, x)


# ---------------------------------------------------------------------------------------------
# 7. dynamo=True in standard ONNX: arguments as constants and as Python decisions
# ---------------------------------------------------------------------------------------------


def all_kinds_standard(
    x, bias, alpha: float, k: int, flag: bool, mode: str, dims: Sequence[int], scales: Sequence[float]
):
    y = op.Mul(x, op.CastLike(alpha, x))  # a Python float becomes a constant; CastLike gives it x's dtype
    if bias is not None:  # decided in Python while translating: the model has no If node
        y = op.Add(y, bias)
    per_channel = op.Reshape(op.CastLike(op.Constant(value_floats=scales), x), op.Constant(value_ints=[1, -1, 1, 1]))
    y = op.Mul(y, per_channel)
    if flag:
        y = op.Relu(y)
    axes = op.Constant(value_ints=dims)  # int[] as a tensor input: ReduceSum and ReduceMax take axes as an input
    y = op.ReduceSum(y, axes, keepdims=1) if mode == "sum" else op.ReduceMax(y, axes, keepdims=1)
    return op.Add(y, op.CastLike(k, y))


def step7_standard_onnx() -> None:
    print("== 7. dynamo=True in standard ONNX: op.Constant(value_ints=...) and Python decisions ==")
    need_the_op()  # step 1's C++ op and step 6's fake kernel
    if TORCH < (2, 6):
        raise NeedsTorch("2.6", NO_TRANSLATION_TABLE)
    x, bias = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5)
    # Needs torch >= 2.6: torch.onnx.export has no custom_translation_table before.
    model = AllKindsModel(torch.ops.argdemo.all_kinds, **WITH_BIAS).eval()
    model_no_bias = AllKindsModel(torch.ops.argdemo.all_kinds, **NO_BIAS).eval()
    table = {torch.ops.argdemo.all_kinds.default: all_kinds_standard}
    onnx_program = torch.onnx.export(
        model,
        (x, bias),
        dynamo=True,
        opset_version=18,
        verbose=False,
        output_names=["y"],
        custom_translation_table=table,
    )
    onnx_program.save("all_kinds_standard.onnx")
    onnx_program = torch.onnx.export(
        model_no_bias,
        (x,),
        dynamo=True,
        opset_version=18,
        verbose=False,
        output_names=["y"],
        custom_translation_table=table,
    )
    onnx_program.save("all_kinds_standard_no_bias.onnx")
    for path in ["all_kinds_standard.onnx", "all_kinds_standard_no_bias.onnx"]:
        print(f"  {path}:", " ".join(node.op_type for node in onnx.load(path).graph.node))

    ops_with = [n.op_type for n in checked("all_kinds_standard.onnx").graph.node]
    ops_without = [n.op_type for n in checked("all_kinds_standard_no_bias.onnx").graph.node]
    assert ops_with == ["Mul", "Add", "Mul", "Relu", "ReduceSum", "Add"], ops_with
    assert ops_without == ["Mul", "Mul", "ReduceMax", "Add"], ops_without
    check_constants("all_kinds_standard.onnx", WITH_BIAS)
    check_constants("all_kinds_standard_no_bias.onnx", NO_BIAS)

    session = ort.InferenceSession("all_kinds_standard.onnx", providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"x": x.numpy(), "bias": bias.numpy()})
    compare("all_kinds_standard.onnx", y, model(x, bias).numpy(), "ONNX Runtime")
    session = ort.InferenceSession("all_kinds_standard_no_bias.onnx", providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"x": x.numpy()})
    compare("all_kinds_standard_no_bias.onnx", y, model_no_bias(x).numpy(), "ONNX Runtime")


# ---------------------------------------------------------------------------------------------
# 8. ONNX Runtime with a Python kernel: what PyCustomOpDef can read
# ---------------------------------------------------------------------------------------------


def step8_python_kernel() -> None:
    print("== 8. ONNX Runtime with an onnxruntime-extensions Python kernel ==")
    need_the_op()  # runs step 4's models (all_kinds.onnx), which need step 1's C++ op
    if onnx_op is None:
        raise Skip(ortx_problem())

    @onnx_op(
        op_type="argdemo::AllKinds",
        inputs=[PyCustomOpDef.dt_float, PyCustomOpDef.dt_float],  # x and bias: a fixed count, none optional
        outputs=[PyCustomOpDef.dt_float],
        # Scalars only: PyCustomOpDef has no type for INTS or FLOATS, and an ONNX bool is an INT.
        attrs={
            "alpha": PyCustomOpDef.dt_float,
            "k": PyCustomOpDef.dt_int64,
            "flag": PyCustomOpDef.dt_int64,
            "mode": PyCustomOpDef.dt_string,
        },
    )
    def all_kinds_kernel(x, bias, alpha, k, flag, mode):
        print("  all_kinds_kernel received:", kinds(alpha, k, flag, mode), (alpha, k, flag, mode))
        # The node's dims and scales never reach a Python kernel: this test double takes them from the
        # model it stands in for. A C++ kernel reads them (KernelInfoGetAttributeArray_int64, ..._float).
        return all_kinds_numpy(x, bias, alpha, k, flag, mode, WITH_BIAS["dims"], WITH_BIAS["scales"])

    x, bias = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5)
    model = AllKindsModel(torch.ops.argdemo.all_kinds, **WITH_BIAS).eval()
    options = ort.SessionOptions()
    options.register_custom_ops_library(get_library_path())
    session = ort.InferenceSession("all_kinds.onnx", options, providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"x": x.numpy(), "bias": bias.numpy()})
    compare("all_kinds.onnx", y, model(x, bias).numpy(), "ONNX Runtime with the Python kernel")

    # No optional input: the kernel declared two inputs, so the one-input node is refused.
    with expect_error("has input size 1 not in range [min=2, max=2]"):
        ort.InferenceSession("all_kinds_no_bias.onnx", options, providers=["CPUExecutionProvider"])


# ---------------------------------------------------------------------------------------------

# Every model this example writes, relative to --out: the ones each step keeps (each checked, and its
# meaning matched against PyTorch; the models of a step skipped for the installed torch are not required)
# and the failure demonstrations (none: every error here is raised before a file is written).
KEPT = {
    4: ("all_kinds.onnx", "all_kinds_no_bias.onnx"),
    5: ("all_kinds_function.onnx", "all_kinds_function_no_bias.onnx"),
    6: ("all_kinds_dynamo.onnx", "all_kinds_dynamo_no_bias.onnx"),
    7: ("all_kinds_standard.onnx", "all_kinds_standard_no_bias.onnx"),
}
FAILURES = ()
STEPS = (
    step1_cpp_op,
    step2_custom_op,
    step3_onnx_schema,
    step4_parse_args,
    step5_function_symbolic,
    step6_translation,
    step7_standard_onnx,
    step8_python_kernel,
)



# What ERRORS.md says of each error this example reproduces: part of expect_error's expected text ->
# (what raises it, its cause in one line[, the step that fixes it when that is a later step than the one
# that reproduces it]). recording() fails the run on an error not explained here.
CAUSES = {
    'all_kinds: mode must be "sum" or "max"': (
        "PyTorch",
        'the op\'s C++ kernel checks its `str mode` argument (`TORCH_CHECK`) and refuses "mean"',
    ),
    "Parameter dims has unsupported type list[int]": (
        "PyTorch",
        "`torch.library.custom_op` before torch 2.7 knows `typing.List[int]` and `typing.Sequence[int]`, not "
        "the builtin `list[int]`",
    ),
    "Mismatched attribute type in ' : alpha'. Expected: 'FLOAT', actual: 'INT'": (
        "onnx.checker",
        "an attribute written with the wrong type (an int for `alpha`) against the registered schema, which "
        "says FLOAT",
    ),
    "has input size 1 not in range [min=2, max=2]": (
        "ONNX Runtime",
        "onnxruntime-extensions' `PyCustomOpDef` has no optional input: a kernel declared with two inputs "
        "refuses the node without `bias`",
    ),
}


def main(argv: list[str] | None = None) -> int:
    # expect_error also notes what each step reproduced, in steps.json, for ERRORS.md (see recording())
    globals()["expect_error"] = recording(expect_error)
    args = parse_command_line(argv)
    out = args.out.resolve()
    owned = tuple(m for models in KEPT.values() for m in models) + FAILURES
    problem = prepare_out(out, owned)
    if problem:
        print(f"FAIL: cannot write models under {out}: {problem}")
        return 1
    quiet_the_libraries()
    skipped: list[str] = []
    home = os.getcwd()
    os.chdir(out)  # the lesson's code writes "x.onnx" and "failures/x.onnx", as the README does
    try:
        torch.manual_seed(0)
        for number, step in enumerate(STEPS, start=1):
            STEP_STATUS[number] = {"status": "runs", "why": ""}
            CURRENT_STEP[0] = number
            try:
                step()
            except NeedsTorch as reason:  # a newer torch's feature: this step only; the example still passes
                print(f"SKIP step {number}: {reason}")
                STEP_STATUS[number].update(status=f"needs torch >= {reason.version}", why=reason.why)
            except Skip as reason:  # this machine cannot run it (no compiler, ...): exit 77 at the end
                print(f"SKIP step {number}: {reason}")
                STEP_STATUS[number].update(status="skipped", why=str(reason))
                skipped.append(f"step {number}: {reason}")
            except BaseException:
                STEP_STATUS[number].update(status="fails")
                raise
    except AssertionError as exc:
        print(f"\nFAIL: {exc}")
        return 1
    except OSError as exc:
        print(f"\nFAIL: cannot write models under {out}: {exc}")
        return 1
    except Exception as exc:  # noqa: BLE001 - an unexpected error: one line, the traceback with -v
        print(f"\nFAIL: unexpected {type(exc).__name__}: {first_line(exc)}")
        if VERBOSE:
            traceback.print_exc(file=sys.stdout)
        return 1
    finally:
        os.chdir(home)
        summary_problem = write_step_summary(out)
    if summary_problem:
        print(f"\nFAIL: cannot write models under {out}: {summary_problem}")
        return 1
    foreign = foreign_models(out, owned)
    if foreign:
        print(f"\nFAIL: {out} holds models this example did not write: {', '.join(foreign)} (remove them)")
        return 1
    if skipped:
        print(f"\nSKIP: {'; '.join(skipped)}")
        return SKIP
    ran = [n for n, s in STEP_STATUS.items() if s["status"] in ("runs", "differs")]
    missing = [m for n in ran for m in KEPT.get(n, ()) if not (out / m).is_file()]
    if missing:
        print(f"\nFAIL: these models were not written: {', '.join(missing)}")
        return 1
    print(f"\nPASS: every model in {out} checked and matched PyTorch (ONNX Runtime or onnx.reference)")
    return 0


# =============================================================================================
# Helpers: safe to skip on a first read. The command line, the output folder, and the checks that
# run around the lesson's code: the ONNX checker, ONNX Runtime against PyTorch, captured output.
# =============================================================================================

HERE = pathlib.Path(__file__).resolve().parent
SKIP = 77  # exit status for "cannot run here", as in automake
VERBOSE = False  # -v: print every exported graph in full

# What each attribute of argdemo::AllKinds must be in every exported model: its ONNX type, and how
# the model's Python value reads back from the file.
ATTRIBUTE_TYPES = {"alpha": "FLOAT", "k": "INT", "flag": "INT", "mode": "STRING", "dims": "INTS", "scales": "FLOATS"}


def quiet_the_libraries() -> None:
    ort.set_default_logger_severity(4)  # ORT logs each refused session before raising; the error is shown anyway
    # Each dynamo=False export warns that the TorchScript-based exporter is deprecated; the top README says so.
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.onnx")
    warnings.filterwarnings("ignore", message=".*legacy TorchScript-based ONNX export.*")
    warnings.filterwarnings("ignore", message="The feature will be removed.*")
    # torch 2.8 logs "Missing annotation for parameter 'x' ... Treating as an Input." at WARNING for each
    # unannotated translation parameter (x and bias in steps 6 and 7); torch 2.14 logs it at DEBUG.
    logging.getLogger("torch.onnx._internal.exporter._schemas").setLevel(logging.ERROR)


class Skip(Exception):
    """Raised by a step that cannot run on this machine (no C++ compiler, ...): the reason is printed."""


# Why steps 6 and 7 need torch >= 2.6 (see "Versions" in the README).
NO_TRANSLATION_TABLE = (
    "torch.onnx.export has no custom_translation_table before 2.6;"
    " on 2.4, dynamo=True is the old torch.onnx.dynamo_export"
)

# What each step did on the installed torch (steps.json, for the version table of the top README).
STEP_STATUS: dict[int, dict[str, str]] = {}
CURRENT_STEP = [0]


class NeedsTorch(Exception):
    """Raised by a step that needs a newer torch: `SKIP step N: needs torch >= X (why)`; the example goes on."""

    def __init__(self, version: str, why: str) -> None:
        super().__init__(f"needs torch >= {version} ({why})")
        self.version, self.why = version, why


def differs(why: str) -> None:
    """Mark the running step as behaving differently (and validly) on the installed torch; print why."""
    print(f"  on torch {torch.__version__}: {why}")
    STEP_STATUS[CURRENT_STEP[0]].update(status="differs", why=why)


def ortx_problem() -> str:
    """Why onnxruntime-extensions is unusable (not installed, or installed but failing to import), as a SKIP
    reason: the page's import leaves only onnx_op = None."""
    try:
        import onnxruntime_extensions  # noqa: F401 - imported again only to read its error
    except ImportError as error:
        why = f"{type(error).__name__}: {error}"
        return f"onnxruntime-extensions cannot be imported ({why}): pip install onnxruntime-extensions"
    return "onnxruntime-extensions failed to import when the example started"


def write_step_summary(out: pathlib.Path) -> str | None:
    """DIR/steps.json: what each step did on this torch, for the version table in the top README. Returns why it
    could not be written (an OSError: DIR full, steps.json a directory, ...), or None."""
    import json

    summary = {"torch": torch.__version__.split("+")[0], "steps": {str(n): s for n, s in STEP_STATUS.items()}}
    try:
        (out / "steps.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    except OSError as exc:
        return f"steps.json: {exc}"
    return None


def build_problem() -> str:
    """Why step 1 cannot build its C++ extension here, or ''."""
    import sysconfig

    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        return f"no C++ compiler: {compiler!r} is not on PATH (install g++, or set CXX)"
    if not pathlib.Path(sysconfig.get_paths()["include"], "Python.h").is_file():
        return "no Python headers (Python.h): install your Python's development package"
    return ninja_problem()


def need_the_op() -> None:
    if not hasattr(torch.ops.argdemo, "all_kinds"):
        raise Skip("needs step 1's C++ op argdemo::all_kinds, which was not built")


def one_node_model(**attributes) -> onnx.ModelProto:
    """A one-node argdemo.AllKinds model with the given attributes over good defaults (for the checker)."""
    values = {**WITH_BIAS, "flag": 1, **attributes}
    node = onnx.helper.make_node("AllKinds", ["x"], ["y"], domain="argdemo", **values)
    graph = onnx.helper.make_graph(
        [node],
        "one_node",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3, 4, 5])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3, 1, 1])],
    )
    opsets = [onnx.helper.make_opsetid("", 18), onnx.helper.make_opsetid("argdemo", 1)]
    return onnx.helper.make_model(graph, opset_imports=opsets)


def attribute_table(node: onnx.NodeProto) -> dict[str, tuple[str, object]]:
    """{name: (ONNX attribute type, value)}; floats rounded to float32 precision, strings decoded."""
    table = {}
    for a in node.attribute:
        value = onnx.helper.get_attribute_value(a)
        if isinstance(value, bytes):
            value = value.decode()
        elif isinstance(value, float):
            value = float(np.float32(value))
        elif isinstance(value, list):
            value = [float(np.float32(v)) if isinstance(v, float) else v for v in value]
        table[a.name] = (onnx.AttributeProto.AttributeType.Name(a.type), value)
    return table


def check_node(path: str, inputs: list[str], values: dict, same_as: str = "") -> None:
    """One argdemo.AllKinds node on `inputs`, each attribute of the right ONNX type and value (and, with
    same_as, the very node another exporter wrote). print_node already ran the full checker."""
    model = onnx.load(path)
    (node,) = model.graph.node
    assert (node.domain, node.op_type) == ("argdemo", "AllKinds"), (path, node.domain, node.op_type)
    assert list(node.input) == inputs, (path, list(node.input))
    assert [o.name for o in model.graph.output] == ["y"], path
    table = attribute_table(node)
    expected = {name: (ATTRIBUTE_TYPES[name], int(v) if isinstance(v, bool) else v) for name, v in values.items()}
    assert table == expected, (path, table, expected)
    if same_as:
        other = onnx.load(same_as).graph.node[0]
        assert list(other.input) == inputs and attribute_table(other) == table, (path, same_as)
        print(f"  {path}: the very node of {same_as} (inputs, attribute types and values)")
    if VERBOSE:
        print(textwrap.indent(onnx.printer.to_text(model.graph), "    "))


def checked(path: str) -> onnx.ModelProto:
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    if VERBOSE:
        print(textwrap.indent(onnx.printer.to_text(model.graph), "    "))
    return model


def check_constants(path: str, values: dict) -> None:
    """In the standard-ONNX model each non-tensor argument is a constant of the right dtype and value."""
    constants = [onnx.numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer]

    def found(dtype, value) -> bool:
        return any(c.dtype == dtype and np.array_equal(c.reshape(-1), np.asarray(value, dtype)) for c in constants)

    assert found(np.int64, values["dims"]), (path, "dims", constants)
    assert found(np.float32, values["scales"]), (path, "scales", constants)
    assert found(np.float32, [values["alpha"]]) and found(np.float32, [values["k"]]), (path, constants)


def reference_matches(path: str, model: torch.nn.Module, *tensors: torch.Tensor) -> None:
    """The model's meaning: onnx.reference with the AllKinds reference op against PyTorch."""
    names = [i.name for i in onnx.load(path).graph.input]
    feeds = {name: t.numpy() for name, t in zip(names, tensors, strict=True)}
    (y,) = ReferenceEvaluator(path, new_ops=[AllKinds]).run(None, feeds)
    compare(path, y, model(*tensors).numpy(), "onnx.reference")


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def parse_command_line(argv: list[str] | None) -> argparse.Namespace:
    global VERBOSE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=non_empty_path,
        default=HERE / "output",
        metavar="DIR",
        help="write the models under DIR, failure demonstrations under DIR/failures (default: output/ here)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="print every exported graph in full")
    args = parser.parse_args(argv)
    VERBOSE = args.verbose
    return args


def non_empty_path(text: str) -> pathlib.Path:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty (it would write into the current directory)")
    return pathlib.Path(text)


def prepare_out(out: pathlib.Path, owned: tuple[str, ...]) -> str:
    """Make DIR and DIR/failures and remove this example's models of an earlier run: '' or why it cannot."""
    if out.exists() and not out.is_dir():
        return "it exists and is not a directory"
    try:
        (out / "failures").mkdir(parents=True, exist_ok=True)
        for name in owned:
            (out / name).unlink(missing_ok=True)
        for folder in (out, out / "failures"):
            with tempfile.TemporaryFile(dir=folder):
                pass  # can we write there?
    except OSError as exc:
        return f"{type(exc).__name__}: {exc.strerror or exc}"
    return ""


def foreign_models(out: pathlib.Path, owned: tuple[str, ...]) -> list[str]:
    """The .onnx files in DIR and DIR/failures that this example did not write (it never deletes them)."""
    found = [*out.glob("*.onnx"), *(out / "failures").glob("*.onnx")]
    return sorted(p.relative_to(out).as_posix() for p in found if p.relative_to(out).as_posix() not in owned)


def flush_stdio():
    """Flush Python's buffers and C's: C++ code (the TorchScript exporter, RKNN) prints through C's stdout, which
    is block-buffered when stdout is a file or a pipe, so text left in it would cross a redirect of the descriptors
    (unless PYTHONUNBUFFERED is set). fflush(NULL) flushes every C stream."""
    sys.stdout.flush()
    sys.stderr.flush()
    ctypes.CDLL(None).fflush(None)


@contextlib.contextmanager
def captured(sink: list[str]):
    """Capture file descriptors 1 and 2 and Python warnings into sink[0]: C++ code (the exporter, ORT, the
    compiler) writes to the descriptors directly. Check what the lesson depends on; drop the rest."""
    flush_stdio()
    saved = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile() as tmp, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        os.dup2(tmp.fileno(), 1)
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            flush_stdio()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            tmp.seek(0)
            text = tmp.read().decode(errors="replace")
            sink.append(text + "".join(f"{w.category.__name__}: {w.message}\n" for w in caught))


def ninja_problem() -> str:
    """torch.utils.cpp_extension runs `ninja` from PATH. A venv used without activation has it only beside
    its python, where activation would have put it on PATH: look there too. '' or what to do."""
    import sysconfig

    scripts = sysconfig.get_path("scripts")
    if shutil.which("ninja") is None and shutil.which("ninja", path=scripts):
        os.environ["PATH"] = scripts + os.pathsep + os.environ.get("PATH", "")
    if shutil.which("ninja") is None:
        return f"ninja is not installed for {sys.executable}: run `{sys.executable} -m pip install ninja`"
    return ""


def recording(expect_error):
    """expect_error that also notes, in the current step's entry of steps.json, what it reproduced: the lines
    it printed and the cause CAUSES gives for its expected text. `python run_stacks.py --write-table` writes
    ERRORS.md from those notes. An error CAUSES does not explain fails the run."""
    if getattr(expect_error, "records", False):
        return expect_error

    @contextlib.contextmanager
    def recorded(expected):
        printed: list[str] = []
        saved = sys.stdout
        sys.stdout = Tee(saved, printed)
        try:
            with expect_error(expected):
                yield
        finally:
            sys.stdout = saved
        record_reproduced(expected, "".join(printed))

    recorded.records = True
    return recorded


class Tee:
    """A stdout that also keeps what is written to it; everything else (encoding, flush, ...) is the stream's."""

    def __init__(self, stream, kept: list[str]):
        self.stream, self.kept = stream, kept

    def write(self, text: str) -> int:
        self.kept.append(text)
        return self.stream.write(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)


def record_reproduced(expected: str, printed: str) -> None:
    step = CURRENT_STEP[0]
    lines = printed.splitlines()
    first = [line.split("reproduced: ", 1)[1] for line in lines if line.startswith("  reproduced: ")]
    further = [line.split("further down: ", 1)[1] for line in lines if line.startswith("  reproduced, further down: ")]
    keys = [key for key in CAUSES if key in expected]
    assert first, f"step {step}: expect_error({expected!r}) printed no 'reproduced:' line"
    assert len(keys) == 1, f"step {step}: CAUSES must explain {expected!r} once, not {len(keys)} times"
    raised_by, cause, *fixed_in = CAUSES[keys[0]]  # a third element: the step that fixes it, when a later one
    entry = {"error": first[-1], "further_down": further[-1] if further else "", "raised_by": raised_by, "cause": cause}
    entry["fixed_in"] = fixed_in[0] if fixed_in else step
    STEP_STATUS[step].setdefault("reproduced", []).append(entry)


if __name__ == "__main__":
    sys.exit(main())
