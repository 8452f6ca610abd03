"""Run the rknn_cst custom nodes in OpenVINO on the CPU: OpenVINO's own ops, a Python op, C++.

Run: python test.py [--out DIR] [-v]

The custom nodes the other folders export (rknn_cst::cstThreshold, rknn_cst::cstDualResidual,
rknn_cst::Foo with a float-list attribute), each alone and between Convs, with dynamo=True, are
read by OpenVINO's ONNX frontend: first without an extension (it refuses them, and the Conv after
each), then with a ConversionExtension that rebuilds each node from OpenVINO's opset ops (saved as
OpenVINO IR that loads with no extension), then with an openvino.Op subclass per op in Python, then
with the same ops in C++ (ov::op::Op and ov::frontend::onnx::OpExtension), compiled with ninja
against the openvino wheel's own headers and library into DIR/libcst_ops.so, run at fixed and at
open input sizes, and loaded by a C++ program, DIR/cst_host. Last, the same nodes from the
deprecated dynamo=False exporter run with every extension.
Every python block of README.md is in this file; the lines around them are the checks.
"""

import pathlib
import platform
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # the repository's harness.py
import harness  # the runner: the command line, the steps, the checks (harness.py)
from page_helpers import expect_error, compare  # the page's helpers, written once

# The page's imports, then its helpers, word for word (a pasted page starts with them) ---------

# region imports
import contextlib
import os
import pathlib
import re
import subprocess
import time
import typing

import ml_dtypes
import ninja
import numpy as np
import onnx
import onnxscript
import openvino as ov
import openvino.opset13 as ops
import torch
from openvino.frontend.onnx import ConversionExtension
from torch.onnx import register_custom_op_symbolic
from torch.onnx.symbolic_helper import parse_args
# endregion

# ---------------------------------------------------------------------------------------------
# 1. The custom nodes, exported with dynamo=True
# ---------------------------------------------------------------------------------------------


if hasattr(torch.library, "custom_op"):  # torch.library.custom_op came with torch 2.4
    # region dual_residual
    # cst_py, not register_pytorch_op's cst: that folder's C++ ops can load in the same process
    @torch.library.custom_op("cst_py::dual_residual", mutates_args=())
    def dual_residual(
        x: torch.Tensor, y: torch.Tensor, alpha: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return x * alpha - y, y * alpha - x


    @dual_residual.register_fake
    def _(x, y, alpha):
        return torch.empty_like(x), torch.empty_like(y)


    @torch.library.custom_op("cst_py::foo_forward", mutates_args=())
    def foo_forward(
        x: torch.Tensor,
        y: torch.Tensor,
        alpha: float,
        beta: int,
        mode: str,
        scales: typing.Sequence[float],
        dims: typing.Sequence[int],
    ) -> torch.Tensor:
        z = x * alpha - y * beta if mode == "sub" else x * alpha + y * beta
        per_channel = torch.tensor(scales, dtype=z.dtype).view(1, -1, 1, 1)
        return (z * per_channel).sum(dims, keepdim=True)


    @foo_forward.register_fake
    def _(x, y, alpha, beta, mode, scales, dims):
        return x.new_empty([1 if axis in dims else size for axis, size in enumerate(x.shape)])
    # endregion


# region DualResidual
class DualResidual(torch.nn.Module):
    def forward(self, x, y):
        return dual_residual(x, y, 0.5)


class Foo(torch.nn.Module):
    def forward(self, x, y):
        return foo_forward(x, y, 0.5, 2, "sub", [1.0, 2.0, 3.0], [2, 3])


class MidGraph(torch.nn.Module):
    """The op between standard ops: a Conv before each of its inputs, one Conv after it."""

    def __init__(self, op, inputs, outputs):
        super().__init__()
        self.op = op
        self.before = torch.nn.ModuleList(
            [torch.nn.Conv2d(3, 3, 3, padding=1) for _ in range(inputs)]
        )
        self.after = torch.nn.Conv2d(3 * outputs, 3, 3, padding=1)

    def forward(self, x):
        y = self.op(*[conv(x) for conv in self.before])
        return self.after(torch.cat(y, dim=1) if isinstance(y, tuple) else y)
# endregion



# region schema
Schema = onnx.defs.OpSchema
FLOAT_ANY = [("T", ["tensor(float)", "tensor(float16)", "tensor(bfloat16)"], "f32, f16, bf16")]
rknn_cst = onnxscript.values.Opset("rknn_cst", 1)


def schema(name, inputs, outputs, attributes):
    return Schema(
        name, "rknn_cst", 1,
        inputs=[Schema.FormalParameter(i, "T") for i in inputs],
        outputs=[Schema.FormalParameter(o, "T") for o in outputs],
        type_constraints=FLOAT_ANY,
        attributes=[Schema.Attribute(a, kind, a) for a, kind in attributes.items()],
    )


Attr = Schema.AttrType
cstThreshold = onnxscript.values.Op(
    rknn_cst, "cstThreshold",
    schema("cstThreshold", ["X"], ["Y"], {"threshold": Attr.FLOAT, "value": Attr.FLOAT}),
)
cstDualResidual = onnxscript.values.Op(
    rknn_cst, "cstDualResidual",
    schema("cstDualResidual", ["X", "Y"], ["X_res", "Y_res"], {"alpha": Attr.FLOAT}),
)
FooOp = onnxscript.values.Op(
    rknn_cst, "Foo",
    schema("Foo", ["X", "Y"], ["Z"], {
        "alpha": Attr.FLOAT, "beta": Attr.INT, "mode": Attr.STRING,
        "scales": Attr.FLOATS, "dims": Attr.INTS,
    }),
)
# endregion


if hasattr(torch.library, "custom_op"):  # the translations name step 1's custom ops
    # region threshold_translation
    # `self`, as aten::threshold names its input: torch 2.8 matches a translation by its names
    def threshold_translation(self, threshold: float, value: float):
        return cstThreshold(self, threshold=threshold, value=value)


    def dual_residual_translation(x, y, alpha: float):
        return cstDualResidual(x, y, alpha=alpha)


    def foo_translation(x, y, alpha: float, beta: int, mode: str, scales, dims):
        return FooOp(x, y, alpha=alpha, beta=beta, mode=mode, scales=scales, dims=dims)


    TRANSLATIONS = {
        torch.ops.aten.threshold.default: threshold_translation,
        torch.ops.cst_py.dual_residual.default: dual_residual_translation,
        torch.ops.cst_py.foo_forward.default: foo_translation,
    }
    # endregion



MODELS: dict = {}  # name -> (PyTorch model, inputs): step 1 fills it
CUSTOM_OP = "torch.library.custom_op came with torch 2.4"  # step 1's dual_residual, foo_forward
EXPORTED: dict = {}  # ONNX file -> (PyTorch model, inputs): what the OpenVINO steps run


@harness.needs_torch("2.4", CUSTOM_OP)
def step1_export_dynamo_true():
    """The custom nodes, exported with dynamo=True"""
    global MODELS, EXPORTED
    # region step1
    torch.manual_seed(0)
    x, y = torch.randn(1, 3, 16, 16), torch.randn(1, 3, 16, 16)
    torch.library.opcheck(dual_residual, (x, y, 0.5))
    torch.library.opcheck(foo_forward, (x, y, 0.5, 2, "sub", [1.0, 2.0, 3.0], [2, 3]))
    # endregion

    # region step1-2
    MODELS = {  # name -> (PyTorch model, its inputs)
        "threshold": (torch.nn.Threshold(0.1, 20).eval(), (x,)),
        "threshold_net": (MidGraph(torch.nn.Threshold(0.1, 20), 1, 1).eval(), (x,)),
        "dual_residual": (DualResidual().eval(), (x, y)),
        "dual_residual_net": (MidGraph(DualResidual(), 2, 2).eval(), (x,)),
        "foo": (Foo().eval(), (x, y)),
        "foo_net": (MidGraph(Foo(), 2, 1).eval(), (x,)),
    }
    EXPORTED = {}  # ONNX file -> (PyTorch model, inputs), for the steps that run them
    # endregion

    if harness.TORCH < (2, 6):  # torch.onnx.export has no custom_translation_table before 2.6
        harness.differs("no dynamo=True export before 2.6: steps 2 to 4 and 6 to 8 skip")
        return
    print("  (six dynamo=True exports: torch.export traces each, a second or two apiece)")
    # region step1-3
    for name, (model, inputs) in MODELS.items():
        program = torch.onnx.export(
            model, inputs, dynamo=True, verbose=False, custom_translation_table=TRANSLATIONS
        )
        program.save(f"dynamo_{name}.onnx")
        EXPORTED[f"dynamo_{name}.onnx"] = (model, inputs)
    # endregion

    for name in MODELS:
        path = f"dynamo_{name}.onnx"
        written = harness.show(path)
        custom = [n for n in written.graph.node if n.domain == "rknn_cst"]
        assert len(custom) == 1, f"{path}: {harness.op_types(path)}"
        assert not onnx.defs.has(custom[0].op_type, "rknn_cst")  # nothing was registered
    assert harness.op_types("dynamo_threshold_net.onnx") == [
        "Conv", "rknn_cst.cstThreshold", "Conv"
    ], harness.op_types("dynamo_threshold_net.onnx")
    (foo_node,) = onnx.load("dynamo_foo.onnx").graph.node
    kinds = {a.name: onnx.AttributeProto.AttributeType.Name(a.type) for a in foo_node.attribute}
    print("  rknn_cst.Foo's attributes:", ", ".join(f"{k} {v}" for k, v in kinds.items()))
    assert kinds == {
        "alpha": "FLOAT", "beta": "INT", "mode": "STRING", "scales": "FLOATS", "dims": "INTS"
    }, kinds
    if harness.TORCH < (2, 9):
        harness.differs("dynamo=True writes opset 18 here, 20 from torch 2.9")


# ---------------------------------------------------------------------------------------------
# 2. OpenVINO without an extension
# ---------------------------------------------------------------------------------------------

DYNAMO = "they run step 1's dynamo=True models, which need custom_translation_table"


@harness.needs_torch("2.6", DYNAMO)
def step2_no_extension():
    """OpenVINO without an extension"""
    # region step2
    core = ov.Core()
    with expect_error("No conversion rule found for operations: rknn_cst.cstThreshold"):
        core.read_model("dynamo_threshold.onnx")
    with expect_error("Conversion is failed for: Conv-"):
        core.read_model("dynamo_threshold_net.onnx")
    with expect_error("The input data tensor's rank has to be known (static)"):
        core.compile_model("dynamo_threshold_net.onnx", "CPU")
    # endregion


# ---------------------------------------------------------------------------------------------
# 3. OpenVINO's own ops: a ConversionExtension that rebuilds each node
# ---------------------------------------------------------------------------------------------


# region threshold_from_ops
def like(value, x):
    """A constant VALUE of X's element type (f32, or f16 or bf16 when the model is)."""
    return ops.convert(ops.constant(np.float32(value)), x.get_element_type())


def threshold_from_ops(node):  # torch's rule: x <= threshold -> value, NaN kept
    x = node.get_input(0)
    threshold = ops.constant(np.float32(node.get_attribute("threshold")))
    below = ops.less_equal(ops.convert(x, "f32"), threshold)  # in f32, as PyTorch compares
    return ops.select(below, like(node.get_attribute("value"), x), x).outputs()


def dual_residual_from_ops(node):
    x, y = node.get_input(0), node.get_input(1)
    alpha = like(node.get_attribute("alpha"), x)
    x_res = ops.subtract(ops.multiply(x, alpha), y)
    y_res = ops.subtract(ops.multiply(y, alpha), x)
    return [x_res.output(0), y_res.output(0)]


def foo_from_ops(node):
    x, y = node.get_input(0), node.get_input(1)
    x_alpha = ops.multiply(x, like(node.get_attribute("alpha"), x))
    y_beta = ops.multiply(y, like(node.get_attribute("beta"), y))
    sub = node.get_attribute("mode") == "sub"
    z = ops.subtract(x_alpha, y_beta) if sub else ops.add(x_alpha, y_beta)
    scales = np.float32(node.get_attribute("scales")).reshape(1, -1, 1, 1)
    z = ops.multiply(z, ops.convert(ops.constant(scales), x.get_element_type()))
    dims = ops.constant(np.int64(node.get_attribute("dims")))
    return ops.reduce_sum(z, dims, keep_dims=True).outputs()
# endregion


# region run_openvino
F32 = {"INFERENCE_PRECISION_HINT": "f32"}


def run_openvino(core, path, inputs, config=F32):
    """Read PATH with CORE's extensions, compile it for the CPU, run it: the outputs."""
    compiled = core.compile_model(path, "CPU", config)
    results = compiled([tensor.numpy() for tensor in inputs])
    return [results[output] for output in compiled.outputs]


def pytorch_outputs(model, inputs):
    outputs = model(*inputs)
    return outputs if isinstance(outputs, tuple) else (outputs,)
# endregion


@harness.needs_torch("2.6", DYNAMO)
def step3_opset_ops():
    """OpenVINO's own ops: a ConversionExtension that rebuilds each node"""
    global opset_ops
    # region step3
    opset_ops = ov.Core()
    opset_ops.add_extension(ConversionExtension("cstThreshold", "rknn_cst", threshold_from_ops))
    opset_ops.add_extension(
        ConversionExtension("cstDualResidual", "rknn_cst", dual_residual_from_ops)
    )
    opset_ops.add_extension(ConversionExtension("Foo", "rknn_cst", foo_from_ops))

    for path, (model, inputs) in EXPORTED.items():
        outputs = run_openvino(opset_ops, path, inputs)
        expected = pytorch_outputs(model, inputs)
        for number, (actual, wanted) in enumerate(zip(outputs, expected, strict=True)):
            compare(f"{path}[{number}]", actual, wanted, rtol=1e-5, atol=1e-5)
    # endregion

    # region step3-2
    for hint in ("f32", "bf16", "f16"):  # the layers depend on the CPU (step 7)
        config = {"INFERENCE_PRECISION_HINT": hint}
        compiled = opset_ops.compile_model("dynamo_threshold_net.onnx", "CPU", config)
        layers = [op.get_rt_info()["layerType"].astype(str)
                  for op in compiled.get_runtime_model().get_ordered_ops()]
        shown = [layer for layer in layers if layer not in ("Const", "Reshape")]
        print(f"  this CPU, {hint} hint: {' '.join(shown)}")
    # endregion

    for hint in ("f32", "bf16", "f16"):  # no kernel of ours at any hint: every layer is the plugin's
        compiled = opset_ops.compile_model("dynamo_threshold_net.onnx", "CPU", {"INFERENCE_PRECISION_HINT": hint})
        runtime = [op.get_rt_info()["layerType"].astype(str) for op in compiled.get_runtime_model().get_ordered_ops()]
        assert "Reference" not in runtime, (hint, runtime)

    # region step3-3
    network = opset_ops.read_model("dynamo_foo_net.onnx")
    ov.save_model(network, "foo_net.xml", compress_to_fp16=False)  # True: f16 weights
    plain = ov.Core()  # no extension
    model, inputs = EXPORTED["dynamo_foo_net.onnx"]
    (actual,) = run_openvino(plain, "foo_net.xml", inputs)
    compare("foo_net.xml", actual, model(*inputs), rtol=1e-5, atol=1e-5)
    # endregion

    types = {op.get_type_name() for op in plain.read_model("foo_net.xml").get_ops()}
    assert {"ReduceSum", "Convolution"} <= types and not types & {"Foo", "FooOv"}, types
    assert os.path.isfile("foo_net.bin")


opset_ops = None  # step 3's Core, with the nodes rebuilt from OpenVINO's ops


# ---------------------------------------------------------------------------------------------
# 4. The ops in Python: openvino.Op and a ConversionExtension
# ---------------------------------------------------------------------------------------------


# region as_float32
# The element types the CPU plugin may hand a custom op (step 7): f32; f16 where it infers in
# f16; bf16 where the model itself is bf16. The ops compute in float32, round each result once.
FLOAT_TYPES = (ov.Type.f32, ov.Type.f16, ov.Type.bf16)


def as_float32(tensor):
    """A tensor's values as float32, whether it holds f32, f16 or bf16."""
    data = tensor.data
    if tensor.element_type == ov.Type.bf16:  # .data shows bf16's bits as float16: view them
        data = data.view(np.uint16).view(ml_dtypes.bfloat16)
    return data.astype(np.float32)


def store(tensor, result):
    """Put RESULT into TENSOR, rounded once to the tensor's element type."""
    tensor.shape = result.shape
    if tensor.element_type == ov.Type.bf16:
        tensor.data.view(np.uint16)[:] = result.astype(ml_dtypes.bfloat16).view(np.uint16)
    else:
        tensor.data[:] = result
# endregion


# region CstThreshold
class CstThreshold(ov.Op):
    """rknn_cst::cstThreshold for OpenVINO: y = value if x <= threshold else x (NaN stays NaN)."""

    def __init__(self, inputs=None, threshold=0.0, value=0.0):
        self.threshold, self.value = threshold, value
        super().__init__(self, inputs)  # sets the inputs, then validate_and_infer_types()

    def validate_and_infer_types(self):  # the output's type and shape: the input's
        self.set_output_type(0, self.get_input_element_type(0), self.get_input_partial_shape(0))

    def clone_with_new_inputs(self, new_inputs):
        return CstThreshold(new_inputs, self.threshold, self.value)

    def visit_attributes(self, visitor):
        visitor.on_attributes({"threshold": self.threshold, "value": self.value})
        return True

    def has_evaluate(self):  # the element types evaluate() reads
        return self.get_input_element_type(0) in FLOAT_TYPES

    def evaluate(self, outputs, inputs):  # torch's rule, NaN included: x <= threshold -> value
        x = as_float32(inputs[0])
        below = x <= np.float32(self.threshold)
        store(outputs[0], np.where(below, np.float32(self.value), x))
        return True
# endregion


# region CstDualResidual
class CstDualResidual(ov.Op):
    """rknn_cst::cstDualResidual: (x * alpha - y, y * alpha - x), two outputs."""

    def __init__(self, inputs=None, alpha=0.0):
        self.alpha = alpha
        super().__init__(self, inputs)

    def validate_and_infer_types(self):
        self.set_output_type(0, self.get_input_element_type(0), self.get_input_partial_shape(0))
        self.set_output_type(1, self.get_input_element_type(1), self.get_input_partial_shape(1))

    def clone_with_new_inputs(self, new_inputs):
        return CstDualResidual(new_inputs, self.alpha)

    def visit_attributes(self, visitor):
        visitor.on_attributes({"alpha": self.alpha})
        return True

    def has_evaluate(self):  # the element types evaluate() reads
        return self.get_input_element_type(0) in FLOAT_TYPES

    def evaluate(self, outputs, inputs):
        x, y = as_float32(inputs[0]), as_float32(inputs[1])
        alpha = np.float32(self.alpha)
        store(outputs[0], x * alpha - y)
        store(outputs[1], y * alpha - x)
        return True
# endregion


# region FooOv
class FooOv(ov.Op):
    """rknn_cst::Foo: ((x * alpha -/+ y * beta) * scales per channel).sum(dims, keepdim)."""

    def __init__(self, inputs=None, alpha=0.0, beta=0, mode="", scales=(), dims=()):
        self.alpha, self.beta, self.mode = alpha, beta, mode
        self.scales, self.dims = list(scales), list(dims)
        super().__init__(self, inputs)

    def validate_and_infer_types(self):  # the summed dimensions become 1
        shape = self.get_input_partial_shape(0)
        if shape.rank.is_static:
            for axis in self.dims:
                shape[axis] = 1
        self.set_output_type(0, self.get_input_element_type(0), shape)

    def clone_with_new_inputs(self, new_inputs):
        args = self.alpha, self.beta, self.mode, self.scales, self.dims
        return FooOv(new_inputs, *args)

    def visit_attributes(self, visitor):
        visitor.on_attributes({
            "alpha": self.alpha, "beta": self.beta, "mode": self.mode,
            "scales": self.scales, "dims": self.dims,
        })
        return True

    def has_evaluate(self):  # the element types evaluate() reads
        return self.get_input_element_type(0) in FLOAT_TYPES

    def evaluate(self, outputs, inputs):
        x, y = as_float32(inputs[0]), as_float32(inputs[1])
        sign = np.float32(-1.0 if self.mode == "sub" else 1.0)
        z = x * np.float32(self.alpha) + sign * (y * np.float32(self.beta))
        z = z * np.asarray(self.scales, dtype=np.float32).reshape(1, -1, 1, 1)
        result = z.sum(axis=tuple(self.dims), keepdims=True, dtype=np.float64)
        store(outputs[0], result.astype(np.float32))  # float32 first, as the C++ op
        return True
# endregion


# region convert_threshold
def convert_threshold(node):
    threshold, value = node.get_attribute("threshold"), node.get_attribute("value")
    return CstThreshold([node.get_input(0)], threshold, value).outputs()


def convert_dual_residual(node):
    inputs = [node.get_input(0), node.get_input(1)]
    return CstDualResidual(inputs, node.get_attribute("alpha")).outputs()


def convert_foo(node):
    names = ("alpha", "beta", "mode", "scales", "dims")
    attributes = [node.get_attribute(name) for name in names]
    return FooOv([node.get_input(0), node.get_input(1)], *attributes).outputs()
# endregion


@harness.needs_torch("2.6", DYNAMO)
def step4_python_ops():
    """The ops in Python: openvino.Op and a ConversionExtension"""
    global python_ops, python_results
    # region step4
    generic = ov.Core()
    generic.add_extension(ov.frontend.ConversionExtension("cstThreshold", convert_threshold))
    with expect_error("No conversion rule found for operations: rknn_cst.cstThreshold"):
        generic.read_model("dynamo_threshold.onnx")
    # endregion

    # region step4-2
    python_ops = ov.Core()
    python_ops.add_extension(ConversionExtension("cstThreshold", "rknn_cst", convert_threshold))
    python_ops.add_extension(
        ConversionExtension("cstDualResidual", "rknn_cst", convert_dual_residual)
    )
    python_ops.add_extension(ConversionExtension("Foo", "rknn_cst", convert_foo))

    python_results = {}
    for path, (model, inputs) in EXPORTED.items():
        outputs = run_openvino(python_ops, path, inputs)
        expected = pytorch_outputs(model, inputs)
        for number, (actual, wanted) in enumerate(zip(outputs, expected, strict=True)):
            compare(f"{path}[{number}]", actual, wanted, rtol=1e-5, atol=1e-5)
        python_results[path] = outputs  # for step 6
    # endregion

    network = python_ops.read_model("dynamo_threshold_net.onnx")
    assert "CstThreshold" in [op.get_type_name() for op in network.get_ops()]


python_ops = None  # step 4's Core, with the Python ops
python_results: dict = {}

# ---------------------------------------------------------------------------------------------
# 5. The ops in C++, compiled against the wheel
# ---------------------------------------------------------------------------------------------

# region step5
CPP_HEADER = r"""
#include <openvino/core/extension.hpp>
#include <openvino/core/op_extension.hpp>
#include <openvino/frontend/onnx/extension/op.hpp>
#include <openvino/op/op.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

// The ONNX frontend hands a FLOATS attribute over as std::vector<double> (a FLOAT as a double,
// which OpenVINO narrows to a float member by itself; a list it does not narrow).
using FloatList = std::vector<double>;

// The element types the CPU plugin may hand an op (step 7): f32, f16, bf16. with_type calls
// compute(T{}) with T the matching C++ type. The ops read each value as a float, compute in
// float (not in T, whose operators round after each one) and store rounded<T>(result).
inline bool is_float_type(const ov::element::Type& type) {
    return type == ov::element::f32 || type == ov::element::f16 || type == ov::element::bf16;
}
template <typename Compute>
bool with_type(const ov::element::Type& type, Compute compute) {
    if (type == ov::element::f32) return compute(float{});
    if (type == ov::element::f16) return compute(ov::float16{});
    if (type == ov::element::bf16) return compute(ov::bfloat16{});
    return false;
}

// float -> T, to the nearest, ties to even, as NumPy and PyTorch round. ov::float16(float) and
// ov::bfloat16(float) round some values otherwise (bf16 truncates when the last bit it keeps is
// 0; f16 doubles some subnormals), so these make the bits.
template <typename T>
T rounded(float value) { return value; }
template <>
inline ov::float16 rounded<ov::float16>(float value) {
    uint32_t x;
    std::memcpy(&x, &value, sizeof x);
    const uint32_t sign = (x >> 16) & 0x8000, magnitude = x & 0x7FFFFFFF;
    uint32_t bits;
    if (magnitude > 0x7F800000) bits = 0x7E00;  // NaN
    else if (magnitude >= 0x477FF000) bits = 0x7C00;  // from 65520 up: infinity
    else if (magnitude < 0x38800000)  // below 2^-14: a subnormal, a multiple of 2^-24
        bits = static_cast<uint32_t>(std::nearbyint(std::fabs(value) * 0x1p24f));
    else  // the exponent less 112, then the rounding
        bits = (magnitude + 0xC8000FFF + ((magnitude >> 13) & 1)) >> 13;
    return ov::float16::from_bits(static_cast<uint16_t>(sign | bits));
}
template <>
inline ov::bfloat16 rounded<ov::bfloat16>(float value) {
    uint32_t x;
    std::memcpy(&x, &value, sizeof x);
    if (std::isnan(value)) x |= 0x400000;  // a quiet NaN stays NaN after the cut
    else x += 0x7FFF + ((x >> 16) & 1);
    return ov::bfloat16::from_bits(static_cast<uint16_t>(x >> 16));
}
"""
# endregion

# region step5-2
THRESHOLD_CPP = r"""
// rknn_cst::cstThreshold: y = value if x <= threshold else x (torch's rule: NaN stays NaN).
class CstThreshold : public ov::op::Op {
public:
    OPENVINO_OP("CstThreshold", "rknn_cst");  // the type's name and "version" in OpenVINO

    CstThreshold() = default;  // OpExtension creates it empty, then sets inputs and attributes
    CstThreshold(const ov::OutputVector& args, float threshold, float value)
        : Op(args), threshold_(threshold), value_(value) {
        constructor_validate_and_infer_types();
    }
    void validate_and_infer_types() override {  // the output: the input's type and shape
        set_output_type(0, get_input_element_type(0), get_input_partial_shape(0));
    }
    std::shared_ptr<ov::Node> clone_with_new_inputs(const ov::OutputVector& args) const override
    {
        return std::make_shared<CstThreshold>(args, threshold_, value_);
    }
    bool visit_attributes(ov::AttributeVisitor& visitor) override {  // names as in ONNX
        visitor.on_attribute("threshold", threshold_);
        visitor.on_attribute("value", value_);
        return true;
    }
    bool has_evaluate() const override { return is_float_type(get_input_element_type(0)); }
    bool evaluate(ov::TensorVector& outputs, const ov::TensorVector& inputs) const override {
        outputs[0].set_shape(inputs[0].get_shape());
        return with_type(inputs[0].get_element_type(), [&](auto zero) {
            using T = decltype(zero);  // float, ov::float16 or ov::bfloat16
            const T* x = inputs[0].data<const T>();
            T* y = outputs[0].data<T>();
            const size_t size = inputs[0].get_size();
            for (size_t i = 0; i < size; ++i)
                y[i] = static_cast<float>(x[i]) <= threshold_ ? rounded<T>(value_) : x[i];
            return true;
        });
    }

private:
    float threshold_ = 0.0f, value_ = 0.0f;
};
"""
# endregion

# region step5-3
DUAL_RESIDUAL_CPP = r"""
// rknn_cst::cstDualResidual: (x * alpha - y, y * alpha - x), two outputs.
class CstDualResidual : public ov::op::Op {
public:
    OPENVINO_OP("CstDualResidual", "rknn_cst");

    CstDualResidual() = default;
    CstDualResidual(const ov::OutputVector& args, float alpha) : Op(args), alpha_(alpha) {
        constructor_validate_and_infer_types();
    }
    void validate_and_infer_types() override {
        NODE_VALIDATION_CHECK(this, get_input_element_type(0) == get_input_element_type(1),
                              "X and Y must have one element type");
        set_output_size(2);
        set_output_type(0, get_input_element_type(0), get_input_partial_shape(0));
        set_output_type(1, get_input_element_type(1), get_input_partial_shape(1));
    }
    std::shared_ptr<ov::Node> clone_with_new_inputs(const ov::OutputVector& args) const override
    {
        return std::make_shared<CstDualResidual>(args, alpha_);
    }
    bool visit_attributes(ov::AttributeVisitor& visitor) override {
        visitor.on_attribute("alpha", alpha_);
        return true;
    }
    bool has_evaluate() const override { return is_float_type(get_input_element_type(0)); }
    bool evaluate(ov::TensorVector& outputs, const ov::TensorVector& inputs) const override {
        outputs[0].set_shape(inputs[0].get_shape());
        outputs[1].set_shape(inputs[1].get_shape());
        return with_type(inputs[0].get_element_type(), [&](auto zero) {
            using T = decltype(zero);
            const T* x = inputs[0].data<const T>();
            const T* y = inputs[1].data<const T>();
            T* x_res = outputs[0].data<T>();
            T* y_res = outputs[1].data<T>();
            const size_t size = inputs[0].get_size();
            for (size_t i = 0; i < size; ++i) {
                const float xi = x[i], yi = y[i];
                x_res[i] = rounded<T>(xi * alpha_ - yi);
                y_res[i] = rounded<T>(yi * alpha_ - xi);
            }
            return true;
        });
    }

private:
    float alpha_ = 0.0f;
};
"""
# endregion

# region step5-4
FOO_CPP = r"""
// rknn_cst::Foo: ((x * alpha -/+ y * beta) * scales[channel]).sum(dims, keepdim=True)
class Foo : public ov::op::Op {
public:
    OPENVINO_OP("Foo", "rknn_cst");

    Foo() = default;
    Foo(const ov::OutputVector& args, float alpha, int64_t beta, std::string mode,
        FloatList scales, std::vector<int64_t> dims)
        : Op(args), alpha_(alpha), beta_(beta), mode_(mode), scales_(scales), dims_(dims) {
        constructor_validate_and_infer_types();
    }
    bool reduces(size_t axis) const {
        return std::count(dims_.begin(), dims_.end(), static_cast<int64_t>(axis)) > 0;
    }
    void validate_and_infer_types() override {  // the summed dimensions become 1
        auto shape = get_input_partial_shape(0);
        NODE_VALIDATION_CHECK(this, shape.rank().compatible(4), "Foo takes N, C, H, W inputs");
        NODE_VALIDATION_CHECK(this, get_input_element_type(0) == get_input_element_type(1),
                              "X and Y must have one element type");
        for (size_t axis = 0; shape.rank().is_static() && axis < 4; ++axis)
            if (reduces(axis)) shape[axis] = 1;
        set_output_type(0, get_input_element_type(0), shape);
    }
    std::shared_ptr<ov::Node> clone_with_new_inputs(const ov::OutputVector& args) const override
    {
        return std::make_shared<Foo>(args, alpha_, beta_, mode_, scales_, dims_);
    }
    bool visit_attributes(ov::AttributeVisitor& visitor) override {
        visitor.on_attribute("alpha", alpha_);
        visitor.on_attribute("beta", beta_);
        visitor.on_attribute("mode", mode_);
        visitor.on_attribute("scales", scales_);
        visitor.on_attribute("dims", dims_);
        return true;
    }
    bool has_evaluate() const override { return is_float_type(get_input_element_type(0)); }
    bool evaluate(ov::TensorVector& outputs, const ov::TensorVector& inputs) const override {
        const ov::Shape shape = inputs[0].get_shape();  // N, C, H, W
        ov::Shape reduced = shape;
        for (size_t axis = 0; axis < 4; ++axis)
            if (reduces(axis)) reduced[axis] = 1;
        outputs[0].set_shape(reduced);
        // step[axis]: how far the output element moves when the input's index on axis grows
        std::vector<size_t> step = ov::row_major_strides(reduced);
        for (size_t axis = 0; axis < 4; ++axis)
            if (reduces(axis)) step[axis] = 0;
        const float sign = mode_ == "sub" ? -1.0f : 1.0f;
        return with_type(inputs[0].get_element_type(), [&](auto zero) {
            using T = decltype(zero);
            const T* x = inputs[0].data<const T>();
            const T* y = inputs[1].data<const T>();
            std::vector<double> sums(outputs[0].get_size(), 0.0);  // summed in double
            for (size_t n = 0, i = 0; n < shape[0]; ++n)
                for (size_t c = 0; c < shape[1]; ++c) {
                    const float scale = static_cast<float>(scales_[c]);
                    const size_t nc = n * step[0] + c * step[1];
                    for (size_t h = 0; h < shape[2]; ++h)
                        for (size_t w = 0; w < shape[3]; ++w, ++i) {
                            const size_t o = nc + h * step[2] + w * step[3];
                            const float xi = x[i], yi = y[i];
                            sums[o] += (xi * alpha_ + sign * (yi * beta_)) * scale;
                        }
                }
            T* z = outputs[0].data<T>();
            for (size_t o = 0; o < sums.size(); ++o)
                z[o] = rounded<T>(static_cast<float>(sums[o]));
            return true;
        });
    }

private:
    float alpha_ = 0.0f;
    int64_t beta_ = 0;
    std::string mode_;
    FloatList scales_;
    std::vector<int64_t> dims_;
};
"""
# endregion

# region step5-5
EXTENSIONS_CPP = r"""
// Attribute names: OpenVINO's -> ONNX's (the same here, listed anyway).
using AttributeNames = std::map<std::string, std::string>;
OPENVINO_CREATE_EXTENSIONS(std::vector<ov::Extension::Ptr>({
    std::make_shared<ov::OpExtension<CstThreshold>>(),
    std::make_shared<ov::frontend::onnx::OpExtension<CstThreshold>>(
        "cstThreshold", "rknn_cst",
        AttributeNames{{"threshold", "threshold"}, {"value", "value"}}),
    std::make_shared<ov::OpExtension<CstDualResidual>>(),
    std::make_shared<ov::frontend::onnx::OpExtension<CstDualResidual>>(
        "cstDualResidual", "rknn_cst", AttributeNames{{"alpha", "alpha"}}),
    std::make_shared<ov::OpExtension<Foo>>(),
    std::make_shared<ov::frontend::onnx::OpExtension<Foo>>(
        "Foo", "rknn_cst",
        AttributeNames{{"alpha", "alpha"}, {"beta", "beta"}, {"mode", "mode"},
                       {"scales", "scales"}, {"dims", "dims"}}),
}));
"""
# endregion


# region ninja_file
def ninja_file():
    """build.ninja: the compiler's commands, the three libraries, and step 8's program, which
    `ninja` builds only when asked (`ninja cst_host`)."""
    openvino_dir = pathlib.Path(ov.__file__).parent
    (libopenvino,) = openvino_dir.glob("libs/libopenvino.so.*")  # e.g. libopenvino.so.2641
    return f"""
cxx = {os.environ.get("CXX", "c++")}
flags = -std=c++17 -O3 -I{openvino_dir / "include"}
link = {libopenvino} -Wl,-rpath,{openvino_dir / "libs"}
rule shared_library
  command = $cxx $flags -fPIC -shared $in -o $out $link
  description = compiling $out
rule program
  command = $cxx $flags $in -o $out $link
  description = compiling $out
build libcst_ops.so: shared_library cst_ops.cpp
build failures/libcst_ops_float_list.so: shared_library failures/cst_ops_float_list.cpp
build failures/libcst_ops_f32_only.so: shared_library failures/cst_ops_f32_only.cpp
build cst_host: program cst_host.cpp
default libcst_ops.so failures/libcst_ops_float_list.so failures/libcst_ops_f32_only.so
"""


def write_if_changed(path, text):
    """Write TEXT to PATH unless PATH holds it: ninja rebuilds what is newer than its .so."""
    path = pathlib.Path(path)
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
# endregion


def step5_build_cpp():
    """The ops in C++, compiled against the wheel"""
    problem = harness.build_problem(python_headers=False)
    if problem:
        raise harness.Skip(problem)

    # region step5-6
    CST_OPS_CPP = CPP_HEADER + THRESHOLD_CPP + DUAL_RESIDUAL_CPP + FOO_CPP + EXTENSIONS_CPP
    os.makedirs("failures", exist_ok=True)
    write_if_changed("cst_ops.cpp", CST_OPS_CPP)
    float_list = CST_OPS_CPP.replace("std::vector<double>;", "std::vector<float>;")
    write_if_changed("failures/cst_ops_float_list.cpp", float_list)
    f32_only = CST_OPS_CPP  # step 7's mistake: has_evaluate and evaluate take f32 only
    for f16_and_bf16 in (" || type == ov::element::f16 || type == ov::element::bf16",
                         "    if (type == ov::element::f16) return compute(ov::float16{});\n",
                         "    if (type == ov::element::bf16) return compute(ov::bfloat16{});\n"):
        assert f16_and_bf16 in f32_only, f16_and_bf16
        f32_only = f32_only.replace(f16_and_bf16, "")
    write_if_changed("failures/cst_ops_f32_only.cpp", f32_only)
    write_if_changed("build.ninja", ninja_file())

    print("  compiling with ninja: about 10 s, then only when a source changes", flush=True)
    started = time.time()
    ninja_path = os.path.join(ninja.BIN_DIR, "ninja")  # the ninja package's own binary
    build = subprocess.run([ninja_path], capture_output=True, text=True)
    seconds = time.time() - started
    if build.returncode != 0:
        raise RuntimeError(f"the build failed:\n{build.stdout}")
    if "no work to do" in build.stdout:
        print(f"  ninja: no work to do, libcst_ops.so is up to date ({seconds:.1f} s)")
    else:
        print(f"  ninja: built the three libraries in {seconds:.0f} s")
    # endregion

    assert float_list != CST_OPS_CPP and f32_only != CST_OPS_CPP
    for path in ("libcst_ops.so", "failures/libcst_ops_float_list.so", "failures/libcst_ops_f32_only.so"):
        assert os.path.isfile(path), path


# ---------------------------------------------------------------------------------------------
# 6. Load the library and run it
# ---------------------------------------------------------------------------------------------


@harness.needs_torch("2.6", DYNAMO)
def step6_run_cpp():
    """Load the library with add_extension and run it"""
    problem = harness.build_problem(python_headers=False)
    if problem:
        raise harness.Skip("needs step 5's library")
    global cpp_ops

    # region step6
    float_list_ops = ov.Core()
    float_list_ops.add_extension(os.path.abspath("failures/libcst_ops_float_list.so"))
    with expect_error("Bad cast from: St6vectorIdSaIdEE to: St6vectorIfSaIfEE"):
        float_list_ops.read_model("dynamo_foo.onnx")
    # endregion

    # region step6-2
    cpp_ops = ov.Core()
    cpp_ops.add_extension(os.path.abspath("libcst_ops.so"))
    for path, (model, inputs) in EXPORTED.items():
        cpp_results = run_openvino(cpp_ops, path, inputs)
        expected = pytorch_outputs(model, inputs)
        for number, (actual, wanted) in enumerate(zip(cpp_results, expected, strict=True)):
            compare(f"{path}[{number}]", actual, wanted, rtol=1e-5, atol=1e-5)
        for actual, python in zip(cpp_results, python_results[path], strict=True):  # step 4's
            np.testing.assert_allclose(actual, python, rtol=1e-6, atol=0, err_msg=path)
    print(f"  the C++ and the Python ops agree on all {len(EXPORTED)} models (rtol=1e-6)")
    # endregion

    ops = {op.get_type_name(): op for op in cpp_ops.read_model("dynamo_foo.onnx").get_ops()}
    attributes = ops["Foo"].get_attributes()
    print(f"  Foo in OpenVINO: scales {attributes['scales']}, dims {attributes['dims']}")
    assert attributes["scales"] == [1.0, 2.0, 3.0] and attributes["dims"] == [2, 3], attributes

    # region step6-3
    for name in ("threshold_net", "dual_residual_net", "foo_net"):
        path = f"dynamo_{name}.onnx"
        model = EXPORTED[path][0]
        for label, core in (("Python", python_ops), ("C++", cpp_ops)):
            network = core.read_model(path)
            name = network.input(0).get_any_name()
            network.reshape({name: ov.PartialShape([-1, 3, -1, -1])})
            compiled = core.compile_model(network, "CPU", F32)
            for shape in ((1, 3, 16, 16), (2, 3, 8, 24)):
                any_x = torch.randn(shape)
                (actual,) = compiled([any_x.numpy()]).values()
                compare(f"{path} {label} {shape}", actual, model(any_x), rtol=1e-5, atol=1e-5)
    # endregion

    assert str(network.input(0).get_partial_shape()) == "[?,3,?,?]", network.input(0)


cpp_ops = None  # step 6's Core, with the C++ ops
HONOURED: dict = {}  # step 7's: precision hint -> what this CPU computes in when asked for it


# ---------------------------------------------------------------------------------------------
# 7. bf16 and f16: every element type the CPU plugin hands a kernel
# ---------------------------------------------------------------------------------------------


@harness.needs_torch("2.6", DYNAMO)
def step7_precision():
    """bf16 and f16: every element type the CPU plugin hands a kernel"""
    global HONOURED
    if cpp_ops is None:
        raise harness.Skip("needs step 5's library")

    # region step7
    capabilities = cpp_ops.get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    default = cpp_ops.compile_model("dynamo_threshold_net.onnx", "CPU")  # no config: the defaults
    precision = default.get_property("INFERENCE_PRECISION_HINT").get_type_name()
    print(f"  this CPU: {' '.join(capabilities)}; the plugin infers in {precision} by default")
    honoured = {}
    for hint in ("bf16", "f16"):
        config = {"INFERENCE_PRECISION_HINT": hint}
        compiled = cpp_ops.compile_model("dynamo_threshold_net.onnx", "CPU", config)
        honoured[hint] = compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()
        print(f"  this CPU, asked for {hint}: {honoured[hint]}")
    # endregion

    rule = plugin_rule(capabilities)  # what OpenVINO's source says this CPU does
    why = f"this CPU ({' '.join(capabilities)}) against plugin_rule's {rule}"
    listed = set(capabilities) & {"FP16", "WINOGRAD"}  # what the rule reads from /proc/cpuinfo
    assert listed == rule["capabilities"], f"the CPU's flags and its capabilities disagree: {why}"
    assert precision == rule["default"], f"the default precision is {precision}: {why}"
    assert honoured == rule["honoured"], f"the hints give {honoured}: {why}"

    HONOURED = honoured  # for step 9
    x = EXPORTED["dynamo_threshold.onnx"][1][0]
    # region step7-2
    LOW_PRECISION = {  # model -> (its element type, the config to compile it with)
        "threshold_bf16.onnx": (torch.bfloat16, {}),
        "threshold_f16.onnx": (torch.float16, {"INFERENCE_PRECISION_HINT": "f16"}),
    }
    for path, (dtype, _) in LOW_PRECISION.items():
        program = torch.onnx.export(
            torch.nn.Threshold(0.1, 20).eval(), (x.to(dtype),), dynamo=True, verbose=False,
            custom_translation_table=TRANSLATIONS,
        )
        program.save(path)
    # endregion

    for path, elem_type in (("threshold_bf16.onnx", "BFLOAT16"), ("threshold_f16.onnx", "FLOAT16")):
        written = harness.show(path)
        assert harness.op_types(path) == ["rknn_cst.cstThreshold"], harness.op_types(path)
        for value in [*written.graph.input, *written.graph.output]:
            elem = onnx.TensorProto.DataType.Name(value.type.tensor_type.elem_type)
            assert elem == elem_type, (path, value.name, elem)

    # region step7-3
    f32_only = ov.Core()
    f32_only.add_extension(os.path.abspath("failures/libcst_ops_f32_only.so"))
    for path in LOW_PRECISION:  # each node's evaluate, in the model's own types: on any CPU
        network = f32_only.read_model(path)  # (evaluate refuses the type before reading a value)
        feed = ov.Tensor(network.input(0).get_element_type(), list(x.shape))
        with expect_error("Evaluation failed on rknn_cst::CstThreshold"):
            network.evaluate([ov.Tensor(feed.get_element_type(), [1])], [feed])
    # endregion

    # region step7-4
    handed = {}
    for path, (_, config) in LOW_PRECISION.items():
        handed[path] = kernel_type(cpp_ops, path, config)
        hint = config.get("INFERENCE_PRECISION_HINT", "no")
        print(f"  this CPU, {path}, {hint} hint: the plugin hands the node {handed[path]}")
        if handed[path] == "f32":
            continue
        try:  # compile_model asks the node's has_evaluate() about that type
            f32_only.compile_model(path, "CPU", config)
        except RuntimeError as error:
            assert "Unsupported operation of type: CstThreshold" in str(error), error
            print("  this CPU, the f32-only library: Unsupported operation of type: CstThreshold")
        else:
            raise AssertionError(f"the f32-only library compiled {path}")
    # endregion

    assert handed == rule["handed"], f"the plugin hands the node {handed}: {why}"

    # region step7-5
    for path, (dtype, config) in LOW_PRECISION.items():
        low_x = x.to(dtype)
        expected = torch.nn.Threshold(0.1, 20)(low_x.float())  # x or 20: both exact in dtype
        for label, core in (("Python", python_ops), ("C++", cpp_ops)):
            (actual,) = run_typed(core, path, [low_x], config)
            compare(f"{path} {label}", actual, expected, rtol=0, atol=0)
    # endregion

    # region step7-6
    model, inputs = EXPORTED["dynamo_threshold_net.onnx"]
    expected = model(*inputs).detach().numpy()
    bf16_hint = {"INFERENCE_PRECISION_HINT": "bf16"}  # the default on a CPU with AVX512_BF16
    (bf16,) = run_openvino(cpp_ops, "dynamo_threshold_net.onnx", inputs, bf16_hint)
    diff = np.abs(bf16 - expected)
    print(f"  this CPU, bf16 hint: max abs diff {diff.max():.2f}, median {np.median(diff):.3f}")
    # endregion

    if honoured["bf16"] == "bf16":  # most outputs within a few bf16 roundings; a flip moves some far
        assert not np.allclose(bf16, expected, rtol=1e-5, atol=1e-5)  # outside the tolerance
        assert np.median(diff) < 0.05, np.median(diff)
        flipped = threshold_flips(model, inputs, bf16_hint)
        print(f"  this CPU, bf16 hint: the threshold took the other branch for {flipped} input(s)")
    elif honoured["bf16"] == "f32":  # ignored, and f32 is the default: f32's results
        print("  this CPU, bf16 hint: ignored, the results are f32's")
        np.testing.assert_allclose(bf16, expected, rtol=1e-5, atol=1e-5)
    else:  # ignored for the default, f16 (an Arm CPU): every_model_at checks f16's below
        print(f"  this CPU, bf16 hint: ignored, the results are {honoured['bf16']}'s")

    # region step7-7
    accuracy = {"EXECUTION_MODE_HINT": "ACCURACY"}  # the model's own precision, f32 here
    for label, config in (("f32", F32), ("ACCURACY", accuracy)):
        (result,) = run_openvino(cpp_ops, "dynamo_threshold_net.onnx", inputs, config)
        compare(f"dynamo_threshold_net.onnx, {label}", result, expected, rtol=1e-5, atol=1e-5)
    # endregion

    every_model_in_each_precision(EXPORTED)


# region kernel_type
def kernel_type(core, path, config):
    """The element type the CPU plugin hands PATH's custom node, compiled with CONFIG."""
    compiled = core.compile_model(path, "CPU", config)
    for layer in compiled.get_runtime_model().get_ordered_ops():
        if layer.get_rt_info()["layerType"].astype(str) == "Reference":  # the custom node
            return layer.get_rt_info()["runtimePrecision"].astype(str)
    raise AssertionError(f"{path}: no Reference layer")


def run_typed(core, path, inputs, config):
    """Run PATH with inputs of its own element types (f32, f16 or bf16): outputs as float32."""
    compiled = core.compile_model(path, "CPU", config)
    request = compiled.create_infer_request()
    for port, value in zip(compiled.inputs, inputs, strict=True):
        tensor = ov.Tensor(port.get_element_type(), port.get_shape())
        store(tensor, value.float().numpy())
        request.set_tensor(port, tensor)
    request.infer()
    return [as_float32(request.get_tensor(port)) for port in compiled.outputs]
# endregion


EPSILON = {"bf16": 2.0**-8, "f16": 2.0**-11}  # half the gap between 1 and the next number


def every_model_at(hint, exported):
    """Every model of EXPORTED (step 1's or step 9's) compiled with HINT (one this CPU honours),
    with both op libraries: each runs, the C++ and the Python ops agree to a rounding of their results, and
    the outputs stay near PyTorch's: the median difference within 2 roundings of the largest
    output (HINT rounds every Conv's inputs; a flipped threshold moves a few outputs far)."""
    config, eps = {"INFERENCE_PRECISION_HINT": hint}, EPSILON[hint]
    worst = 0.0
    for path, (model, inputs) in exported.items():
        python = run_openvino(python_ops, path, inputs, config)
        cpp = run_openvino(cpp_ops, path, inputs, config)
        for got, other, wanted in zip(cpp, python, pytorch_outputs(model, inputs), strict=True):
            wanted = wanted.detach().numpy()
            scale = float(np.abs(wanted).max())
            np.testing.assert_allclose(got, other, rtol=2 * eps, atol=2 * eps * scale, err_msg=path)
            median = float(np.median(np.abs(got - wanted))) / scale
            assert median <= 2 * eps, (path, hint, median)
            worst = max(worst, median / eps)
    print(f"  this CPU, {hint} hint: {len(exported)} models, C++ and Python ops agree; the median")
    print(f"  this CPU, {hint} hint: difference from PyTorch is {worst:.1f} roundings at most")


def every_model_in_each_precision(exported):
    """every_model_at each precision hint this CPU honours (step 7's HONOURED); one line if none."""
    hints = sorted(hint for hint, got in HONOURED.items() if got == hint)
    for hint in hints:
        every_model_at(hint, exported)
    if not HONOURED:  # torch 2.4 and 2.5: step 7 did not run
        print("  this CPU: step 7 did not run, so these models ran in f32 only")
    elif not hints:
        print("  this CPU, bf16 and f16 hints: both ignored, every model ran in f32 above")


# ---------------------------------------------------------------------------------------------
# 8. Your own C++ program: add_extension, and the libraries to ship
# ---------------------------------------------------------------------------------------------

# region step8
HOST_CPP = r"""
// cst_host LIBRARY MODEL: load the custom ops, compile MODEL for the CPU in f32, fill each
// input with a ramp (-1 to 0.875 in steps of 0.125, repeating), run it, print each output.
#include <openvino/openvino.hpp>

#include <iostream>

int main(int argc, char* argv[]) {
    if (argc != 3) {
        std::cerr << "usage: cst_host libcst_ops.so model.onnx\n";
        return 2;
    }
    ov::Core core;
    core.add_extension(argv[1]);  // before the model is read: the ONNX frontend needs the ops
    ov::CompiledModel compiled =
        core.compile_model(argv[2], "CPU", ov::hint::inference_precision(ov::element::f32));
    ov::InferRequest request = compiled.create_infer_request();
    for (const ov::Output<const ov::Node>& input : compiled.inputs()) {
        ov::Tensor tensor(input.get_element_type(), input.get_shape());
        float* x = tensor.data<float>();
        for (size_t i = 0; i < tensor.get_size(); ++i) x[i] = (i % 16) / 8.0f - 1.0f;
        request.set_tensor(input, tensor);
    }
    request.infer();
    std::cout.precision(9);  // enough digits to read a float back exactly
    for (const ov::Output<const ov::Node>& output : compiled.outputs()) {
        const ov::Tensor result = request.get_tensor(output);
        const float* y = result.data<float>();
        std::cout << result.get_shape();  // e.g. [1,3,16,16]
        for (size_t i = 0; i < result.get_size(); ++i) std::cout << ' ' << y[i];
        std::cout << '\n';
    }
    return 0;
}
"""
# endregion


# region host_outputs
def host_outputs(path):
    """Run cst_host on PATH with the library: each output it prints, as an array."""
    host = [os.path.abspath("cst_host"), os.path.abspath("libcst_ops.so"), path]
    printed = subprocess.run(host, capture_output=True, text=True, check=True).stdout
    outputs = []
    for line in printed.splitlines():
        shape, *values = line.split()
        dims = [int(size) for size in shape.strip("[]").split(",")]
        outputs.append(np.array(values, dtype=np.float32).reshape(dims))
    return outputs
# endregion


@harness.needs_torch("2.6", DYNAMO)
def step8_cpp_program():
    """Your own C++ program: add_extension, and the libraries to ship"""
    if cpp_ops is None:
        raise harness.Skip("needs step 5's library")
    ninja_path = os.path.join(ninja.BIN_DIR, "ninja")  # as in step 5

    # region step8-2
    write_if_changed("cst_host.cpp", HOST_CPP)
    build = subprocess.run([ninja_path, "cst_host"], capture_output=True, text=True)
    if build.returncode != 0:
        raise RuntimeError(f"the build failed:\n{build.stdout}")

    for path in ("dynamo_threshold_net.onnx", "dynamo_dual_residual.onnx", "dynamo_foo_net.onnx"):
        model, inputs = EXPORTED[path]
        ramps = [torch.arange(t.numel()).remainder(16).div(8).sub(1).view(t.shape) for t in inputs]
        expected = pytorch_outputs(model, ramps)
        for number, (actual, wanted) in enumerate(zip(host_outputs(path), expected, strict=True)):
            compare(f"cst_host {path}[{number}]", actual, wanted, rtol=1e-5, atol=1e-5)
    # endregion

    # region step8-3
    libs = pathlib.Path(ov.__file__).parent / "libs"
    host = [os.path.abspath("cst_host"), os.path.abspath("libcst_ops.so")]
    host.append("dynamo_threshold_net.onnx")
    traced = subprocess.run(
        host, env=dict(os.environ, LD_DEBUG="libs"), capture_output=True, text=True, check=True
    )
    loaded = [line.split()[-1] for line in traced.stderr.splitlines() if "calling init:" in line]
    print(f"  cst_host loaded, from {libs.parent.name}/{libs.name}/:")
    for name in sorted(pathlib.Path(path).name for path in loaded if path.startswith(str(libs))):
        print("   ", name)
    # endregion

    from_wheel = " ".join(pathlib.Path(p).name for p in loaded if p.startswith(str(libs)))
    for part in ("libopenvino.so.", "libopenvino_onnx_frontend.so.", "_cpu_plugin.so", "libtbb"):
        assert part in from_wheel, (part, from_wheel)
    assert any(p.endswith("/libcst_ops.so") for p in loaded), loaded



# ---------------------------------------------------------------------------------------------
# 9. Code that still uses dynamo=False: the same nodes from symbolics
# ---------------------------------------------------------------------------------------------


# region threshold_symbolic
@parse_args("v", "f", "f")
def threshold_symbolic(g, x, threshold, value):
    y = g.op("rknn_cst::cstThreshold", x, threshold_f=threshold, value_f=value)
    return y.setType(x.type())


@parse_args("v", "v", "f")
def dual_residual_symbolic(g, x, y, alpha):
    x_res, y_res = g.op("rknn_cst::cstDualResidual", x, y, alpha_f=alpha, outputs=2)
    return x_res.setType(x.type()), y_res.setType(y.type())


@parse_args("v", "v", "f", "i", "s", "fs", "is")
def foo_symbolic(g, x, y, alpha, beta, mode, scales, dims):
    z = g.op(
        "rknn_cst::Foo", x, y,
        alpha_f=alpha, beta_i=beta, mode_s=mode, scales_f=scales, dims_i=dims,
    )
    shape = [1 if axis in dims else size for axis, size in enumerate(x.type().sizes())]
    return z.setType(x.type().with_sizes(shape))
# endregion



@harness.needs_torch("2.4", "step 1's custom ops: " + CUSTOM_OP)
def step9_export_dynamo_false():
    """Code that still uses dynamo=False: the same nodes from symbolics"""
    # region step9
    register_custom_op_symbolic("aten::threshold", threshold_symbolic, 12)
    register_custom_op_symbolic("cst_py::dual_residual", dual_residual_symbolic, 12)
    register_custom_op_symbolic("cst_py::foo_forward", foo_symbolic, 12)
    for name, (model, inputs) in MODELS.items():
        torch.onnx.export(
            model, inputs, f"{name}.onnx", dynamo=False, opset_version=12,
            custom_opsets={"rknn_cst": 1},
        )
    # endregion

    for name in MODELS:
        written = harness.show(f"{name}.onnx")
        custom = [n for n in written.graph.node if n.domain == "rknn_cst"]
        assert len(custom) == 1, f"{name}.onnx: {harness.op_types(f'{name}.onnx')}"
    assert harness.op_types("threshold_net.onnx") == ["Conv", "rknn_cst.cstThreshold", "Conv"]
    (foo_node,) = onnx.load("foo.onnx").graph.node
    kinds = {a.name: onnx.AttributeProto.AttributeType.Name(a.type) for a in foo_node.attribute}
    assert kinds == {
        "alpha": "FLOAT", "beta": "INT", "mode": "STRING", "scales": "FLOATS", "dims": "INTS"
    }, kinds

    # region step9-2
    core = ov.Core()
    with expect_error("No conversion rule found for operations: rknn_cst.cstThreshold"):
        core.read_model("threshold.onnx")
    with expect_error("Conversion is failed for: Conv-"):
        core.read_model("threshold_net.onnx")
    # endregion

    global opset_ops, python_ops, cpp_ops
    if opset_ops is None:  # torch < 2.6: steps 3, 4 and 6 did not run; the same extensions
        harness.differs("steps 3, 4 and 6 skipped: test.py loads their extensions here")
        opset_ops = core_with(threshold_from_ops, dual_residual_from_ops, foo_from_ops)
        python_ops = core_with(convert_threshold, convert_dual_residual, convert_foo)
        if os.path.isfile("libcst_ops.so"):  # step 5 built it
            cpp_ops = ov.Core()
            cpp_ops.add_extension(os.path.abspath("libcst_ops.so"))
    # region step9-3
    cores = {"opset": opset_ops, "Python": python_ops, "C++": cpp_ops}
    for name, (model, inputs) in MODELS.items():
        expected = pytorch_outputs(model, inputs)
        for label, core in cores.items():
            if core is None:  # no C++ compiler: step 5 skipped
                continue
            outputs = run_openvino(core, f"{name}.onnx", inputs)
            for number, (actual, wanted) in enumerate(zip(outputs, expected, strict=True)):
                compare(f"{name}.onnx[{number}] {label}", actual, wanted, rtol=1e-5, atol=1e-5)
    # endregion

    if cpp_ops is not None:  # every model in each precision this CPU honours, as step 7 did
        every_model_in_each_precision({f"{name}.onnx": MODELS[name] for name in MODELS})

# ---------------------------------------------------------------------------------------------
# Test-only helpers
# ---------------------------------------------------------------------------------------------


def core_with(threshold, dual_residual, foo):
    """A Core with the three conversion functions, as steps 3 and 4 make theirs."""
    core = ov.Core()
    for name, function in (("cstThreshold", threshold), ("cstDualResidual", dual_residual),
                           ("Foo", foo)):
        core.add_extension(ConversionExtension(name, "rknn_cst", function))
    return core


def plugin_rule(capabilities, flags=None, machine=None) -> dict:
    """What OpenVINO's CPU plugin does on a CPU, by its source: the precision it infers in by
    default (config.cpp: bf16 on x86 with AVX512_BF16, f16 on Arm with f16 arithmetic, else
    f32), the precision each hint gives (config.cpp takes a bf16 or f16 hint only where
    utils/precision_support.cpp's hasHardwareSupport says so, else keeps the default), and the
    type step 7's custom node is handed (transformation_pipeline.cpp: a bf16 or f16 model
    becomes f32 where that type has no hardware support; f16 stays f16 only under the f16
    precision). FLAGS: /proc/cpuinfo's flags (read when None); MACHINE: platform.machine()."""
    machine = (machine or platform.machine()).lower()
    if machine in ("x86_64", "amd64"):
        if flags is None:
            flags = set(pathlib.Path("/proc/cpuinfo").read_text().split())
        avx512_core = {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags
        avx2_vnni_2 = {"avx_vnni_int8", "avx_ne_convert"} <= flags  # oneDNN's avx2_vnni_2
        bf16, f16 = avx512_core or avx2_vnni_2, "avx512_fp16" in flags or avx2_vnni_2
        default = "bf16" if "avx512_bf16" in flags else "f32"
    else:  # Arm: f16 where the CPU computes in it (OPTIMIZATION_CAPABILITIES lists FP16), no bf16
        avx512_core, bf16, f16 = False, False, "FP16" in capabilities
        default = "f16" if f16 else "f32"
    honoured = {"bf16": "bf16" if bf16 else default, "f16": "f16" if f16 else default}
    handed = {"threshold_bf16.onnx": "bf16" if bf16 else "f32",  # no hint
              "threshold_f16.onnx": "f16" if honoured["f16"] == "f16" else "f32"}  # f16 hint
    # plugin.cpp lists FP16 where f16 has hardware support, WINOGRAD where AVX-512 (avx512_core)
    listed = ({"FP16"} if f16 else set()) | ({"WINOGRAD"} if avx512_core else set())
    return {"default": default, "honoured": honoured, "handed": handed, "capabilities": listed}


def threshold_flips(model, inputs, config) -> int:
    """How many of the custom node's outputs in OpenVINO took the other branch than in PyTorch
    (one is `value`, the other not): the node's output made a model output, compiled with CONFIG.
    """
    network = cpp_ops.read_model("dynamo_threshold_net.onnx")
    (node,) = [op for op in network.get_ops() if op.get_type_name() == "CstThreshold"]
    network.add_outputs([node.output(0)])
    compiled = cpp_ops.compile_model(network, "CPU", config)
    in_openvino = compiled([t.numpy() for t in inputs])[compiled.outputs[-1]]
    in_pytorch = model.op(model.before[0](*inputs)).detach().numpy()
    return int(np.sum((in_openvino == 20.0) != (in_pytorch == 20.0)))


# ---------------------------------------------------------------------------------------------

_NAMES = ("threshold", "threshold_net", "dual_residual", "dual_residual_net", "foo", "foo_net")
KEPT = {  # what each step writes and claims valid; failure demonstrations below
    1: tuple(f"dynamo_{name}.onnx" for name in _NAMES) if harness.TORCH >= (2, 6) else (),
    7: ("threshold_bf16.onnx", "threshold_f16.onnx"),
    9: tuple(f"{name}.onnx" for name in _NAMES),
}
FAILURES = ()  # no failing model: step 6's failure is a library, failures/libcst_ops_float_list.so
# For ERRORS.md: part of each reproduced error -> (what raises it, its cause[, fixing step])
CAUSES = {
    "No conversion rule found for operations: rknn_cst.cstThreshold": (
        "OpenVINO",
        "the ONNX frontend has no conversion for the custom-domain node (or one registered "
        "without its domain): add `openvino.frontend.onnx.ConversionExtension(name, domain, fn)` "
        "or a C++ library's `OpExtension`",
        3,
    ),
    "Conversion is failed for: Conv-": (
        "OpenVINO",
        "follows from an unconverted custom node before the Conv: its output has no shape, so the "
        "Conv's input rank is unknown; the custom node's extension fixes both",
        3,
    ),
    "The input data tensor's rank has to be known (static)": (
        "OpenVINO",
        "the Conv after an unconverted custom node: that node's output has no shape; the custom "
        "node's extension fixes both",
        3,
    ),
    "Evaluation failed on rknn_cst::CstThreshold": (
        "OpenVINO",
        "`Model.evaluate` called the C++ op's `evaluate` on the model's own element type (bf16 or "
        "f16), which it refuses; `compile_model` fails the same way (`Unsupported operation of "
        "type`) where the CPU plugin hands the node that type: evaluate f32, f16 and bf16",
        7,
    ),
    "Bad cast from: St6vectorIdSaIdEE to: St6vectorIfSaIfEE": (
        "OpenVINO",
        "a C++ op declares a FLOATS attribute `std::vector<float>`; the ONNX frontend hands it "
        "over as `std::vector<double>`: declare that type",
        6,
    ),
}


def main(argv: list[str] | None = None) -> int:
    passed = "every model in {out} checked and matched PyTorch in OpenVINO"
    return harness.run(__file__, globals(), kept=KEPT, failures=FAILURES, causes=CAUSES, argv=argv,
                       passed=passed)


if __name__ == "__main__":
    sys.exit(main())
