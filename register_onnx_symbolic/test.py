"""Symbolic functions for PyTorch ops that exist but will not export to ONNX.

Run: python test.py [--out DIR] [-v]

Every step first reproduces the error a reader meets, then fixes it, exports, checks the model with
onnx.checker and runs it in ONNX Runtime against PyTorch. Steps 1-6 use the TorchScript-based exporter
(dynamo=False), the only one that reads register_custom_op_symbolic; step 7 uses the torch.export-based
exporter (dynamo=True), the default since torch 2.9; step 8 finds the op to key a translation on when
dynamo=True names a decomposed one; step 9 exports ONNX Runtime's own com.microsoft::CDist both ways.
Each step holds the README's code word for word, with the checks around it.
"""

import contextlib
import os
import re

import numpy as np
import onnx
import onnxruntime as ort
import onnxscript
import torch
import torchvision
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun
from torch.onnx import register_custom_op_symbolic, unregister_custom_op_symbolic
from torch.onnx.symbolic_helper import parse_args

try:  # only steps 1 and 7 need it: they run the custom node in ONNX Runtime
    from onnxruntime_extensions import PyCustomOpDef, get_library_path, onnx_op
except ImportError:  # pip install onnxruntime-extensions
    onnx_op = None

import argparse
import ctypes
import pathlib
import sys
import tempfile
import textwrap
import traceback
import warnings

TORCH = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])  # e.g. (2, 14)
# What the TorchScript-based exporter prints (from C++) before a failing export raises. torch 2.8 and 2.14
# keep its ONNX log on during every export, so it dumps 'Torch IR graph at exception: graph(...)';
# torch 2.4 keeps the log off unless torch.onnx.enable_log() was called (see the README's Versions).
IR_DUMP = ("Torch IR graph at exception",) if TORCH >= (2, 8) else ()


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
# 1. Threshold as one custom-domain node
# ---------------------------------------------------------------------------------------------


class ThresholdModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.threshold = torch.nn.Threshold(0.1, 20)  # y = x if x > 0.1 else 20

    def forward(self, x):
        return self.threshold(x)


# Style A: no attributes. The node keeps only the tensor; 0.1 and 20 are lost.
@parse_args("v", "f", "f")
def threshold_no_attributes(g, x, threshold, value):
    return g.op("rknn_cst::cstThreshold", x)


# Style B: one attribute per scalar. The suffix names the ONNX attribute type: _f is a float.
@parse_args("v", "f", "f")
def threshold_named_attributes(g, x, threshold, value):
    return g.op("rknn_cst::cstThreshold", x, threshold_f=threshold, value_f=value)


# Style C: both scalars in one float-list attribute (_f given a list makes a FLOATS attribute).
@parse_args("v", "f", "f")
def threshold_float_list(g, x, threshold, value):
    return g.op("rknn_cst::cstThreshold", x, param_f=[threshold, value])


# A common slip: "_fs" looks like parse_args' "fs" descriptor, but g.op has no such suffix.
@parse_args("v", "f", "f")
def threshold_wrong_suffix(g, x, threshold, value):
    return g.op("rknn_cst::cstThreshold", x, param_fs=[threshold, value])


# Style B plus setType: a custom node has no shape inference, so tell the exporter what comes out.
@parse_args("v", "f", "f")
def threshold_typed(g, x, threshold, value):
    y = g.op("rknn_cst::cstThreshold", x, threshold_f=threshold, value_f=value)
    y.setType(x.type())  # same dtype and shape as the input
    return y


# Style C's meaning, checked without ONNX Runtime: the ONNX reference evaluator runs a Python op
# that reads the list. The class name is the op_type.
class cstThreshold(OpRun):
    op_domain = "rknn_cst"

    def _run(self, x, param=None):
        threshold, value = param
        return (np.where(x > np.float32(threshold), x, np.float32(value)).astype(x.dtype),)


def step1_custom_domain_node():
    print("\n== 1. Threshold as one custom-domain node (dynamo=False) ==")
    with native_output(*IR_DUMP):  # test.py only: see native_output()
        os.makedirs("failures", exist_ok=True)  # the models that show a failure go here
        torch.manual_seed(0)
        model, x = ThresholdModel().eval(), torch.randn(1, 3, 10, 10)
        with expect_error("Unsupported: ONNX export of operator threshold, non-zero threshold"):
            torch.onnx.export(model, (x,), "failures/threshold.onnx", dynamo=False, opset_version=12)

    # Why three styles: they differ in what survives into the file; only B and C keep 0.1 and 20.
    with native_output() as warned:
        for symbolic, path in [
            (threshold_no_attributes, "failures/threshold_no_attributes.onnx"),
            (threshold_float_list, "failures/threshold_float_list.onnx"),
            (threshold_named_attributes, "threshold_untyped.onnx"),
        ]:
            register_custom_op_symbolic("aten::threshold", symbolic, 12)  # replaces the one before
            torch.onnx.export(model, (x,), path, dynamo=False, opset_version=12, custom_opsets={"rknn_cst": 1})
            (node,) = onnx.load(path).graph.node
            attributes = [onnx.helper.printable_attribute(a) for a in node.attribute]
            print(f"  {path}: one {node.domain}.{node.op_type} node, attributes {attributes}")
    # Why: without setType the exporter warns (from C++, on stderr) and makes up the output's sizes.
    warning = "Warning: The shape inference of rknn_cst::cstThreshold type is missing"
    assert warned[0].count(warning) == 3, warned[0]
    print(f"  the exporter printed '{warning} ...' for each of the 3 exports")
    for path in [
        "failures/threshold_no_attributes.onnx",
        "failures/threshold_float_list.onnx",
        "threshold_untyped.onnx",
    ]:
        dims = output_dims(show(path))
        assert len(dims) == 4 and all(isinstance(d, str) for d in dims), dims  # rank kept, sizes made up

    with native_output(*IR_DUMP):
        register_custom_op_symbolic("aten::threshold", threshold_wrong_suffix, 12)
        with expect_error("Invalid attribute specifier 'param_fs'"):
            torch.onnx.export(model, (x,), "failures/threshold.onnx", dynamo=False, opset_version=12)

    with native_output() as warned:
        register_custom_op_symbolic("aten::threshold", threshold_typed, 12)
        torch.onnx.export(
            model, (x,), "threshold_custom.onnx", dynamo=False, opset_version=12, custom_opsets={"rknn_cst": 1}
        )
        output = onnx.load("threshold_custom.onnx").graph.output[0]
        print(f"  with setType the output is {[d.dim_value for d in output.type.tensor_type.shape.dim]}")
    # Why setType: it removes the warning and gives the graph output its shape.
    assert "shape inference" not in warned[0], warned[0]
    assert output_dims(show("threshold_custom.onnx")) == [1, 3, 10, 10]
    print("  with setType the exporter printed no shape-inference warning")

    (actual,) = ReferenceEvaluator("failures/threshold_float_list.onnx", new_ops=[cstThreshold]).run(
        None, {"input": x.numpy()}
    )
    np.testing.assert_array_equal(actual, model(x).numpy())  # a selection, no arithmetic: exact
    print("  failures/threshold_float_list.onnx matches PyTorch in onnx.reference (ONNX Runtime cannot run it)")

    # ONNX Runtime has no kernel for rknn_cst::cstThreshold; your runtime would bring one. Here a Python
    # function stands in for it, registered with onnxruntime-extensions (only if it is installed).
    if onnx_op is not None:

        @onnx_op(
            op_type="rknn_cst::cstThreshold",
            inputs=[PyCustomOpDef.dt_float],
            outputs=[PyCustomOpDef.dt_float],
            attrs={"threshold": PyCustomOpDef.dt_float, "value": PyCustomOpDef.dt_float},
        )
        def cst_threshold(x, threshold, value):
            return np.where(x > np.float32(threshold), x, np.float32(value)).astype(np.float32)

    if onnx_op is not None:
        custom_ops = ort.SessionOptions()
        custom_ops.register_custom_ops_library(get_library_path())  # runs the kernels declared with @onnx_op
        for path in ["threshold_untyped.onnx", "threshold_custom.onnx"]:
            (actual,) = run_ort(path, {"input": x.numpy()}, custom_ops)
            compare(path, actual, model(x), rtol=0, atol=0)  # a selection, no arithmetic: exact
        with expect_error("Unable to find attribute 'threshold'"):  # Style A: 0.1 and 20 are not in the file
            run_ort("failures/threshold_no_attributes.onnx", {"input": x.numpy()}, custom_ops)
        with expect_error("Unable to find attribute 'threshold'"):  # Style C: this kernel cannot read a list
            run_ort("failures/threshold_float_list.onnx", {"input": x.numpy()}, custom_ops)
    if onnx_op is None:
        raise Skip(ortx_problem())


# ---------------------------------------------------------------------------------------------
# 2. Threshold with standard ops only
# ---------------------------------------------------------------------------------------------


@parse_args("v", "f", "f")
def threshold_standard_ops(g, x, threshold, value):
    # y = x where x > threshold, else value. Constants are float32 to match a float32 model;
    # opset 12 has no CastLike to follow the input's dtype.
    threshold_c = g.op("Constant", value_t=torch.tensor(threshold, dtype=torch.float32))
    value_c = g.op("Constant", value_t=torch.tensor(value, dtype=torch.float32))
    return g.op("Where", g.op("Greater", x, threshold_c), x, value_c)


def step2_standard_ops():
    print("\n== 2. Threshold with standard ops only (dynamo=False) ==")
    # Why: a model of standard ops runs on any ONNX runtime, with no kernel to ship.
    register_custom_op_symbolic("aten::threshold", threshold_standard_ops, 12)  # replaces step 1's
    model, x = ThresholdModel().eval(), torch.randn(1, 3, 10, 10)
    torch.onnx.export(model, (x,), "threshold_standard.onnx", dynamo=False, opset_version=12)
    assert [n.op_type for n in show("threshold_standard.onnx").graph.node] == [
        "Constant",
        "Greater",
        "Constant",
        "Where",
    ]
    (actual,) = run_ort("threshold_standard.onnx", {"input": x.numpy()})
    compare("threshold_standard.onnx", actual, model(x), rtol=0, atol=0)  # a selection: exact


# ---------------------------------------------------------------------------------------------
# 3. Override a built-in rule
# ---------------------------------------------------------------------------------------------


# aten::elu(Tensor self, Scalar alpha, Scalar scale, Scalar input_scale)
@parse_args("v", "f", "f", "f")
def elu_from_primitives(g, x, alpha, scale, input_scale):
    # ELU(x) = scale * (x if x > 0 else alpha * (exp(input_scale * x) - 1)), written out in
    # primitives for a runtime that lacks Elu.
    def const(v):
        return g.op("Constant", value_t=torch.tensor(v, dtype=torch.float32))

    negative = g.op("Mul", const(alpha), g.op("Sub", g.op("Exp", g.op("Mul", x, const(input_scale))), const(1.0)))
    chosen = g.op("Where", g.op("Greater", x, const(0.0)), x, negative)
    return g.op("Mul", chosen, const(scale))


def step3_override_builtin():
    print("\n== 3. Override a built-in rule: aten::elu (dynamo=False) ==")
    # Why register instead of editing torch/onnx/symbolic_opset9.py: an edit is lost on every
    # upgrade and changes every model in the environment; a registration is yours and reversible.
    model, x = torch.nn.ELU(alpha=0.5).eval(), torch.randn(2, 3, 8)
    torch.onnx.export(model, (x,), "elu_builtin.onnx", dynamo=False, opset_version=12)
    register_custom_op_symbolic("aten::elu", elu_from_primitives, 12)
    torch.onnx.export(model, (x,), "elu_override.onnx", dynamo=False, opset_version=12)
    unregister_custom_op_symbolic("aten::elu", 12)  # back to the built-in rule
    assert [n.op_type for n in show("elu_builtin.onnx").graph.node] == ["Elu"]
    show("elu_override.onnx")

    ops = sorted({node.op_type for node in onnx.load("elu_override.onnx").graph.node})
    assert "Elu" not in ops
    print(f"  the override was used: {ops}, no Elu")
    for path in ["elu_builtin.onnx", "elu_override.onnx"]:
        (actual,) = run_ort(path, {"input": x.numpy()})
        compare(path, actual, model(x), rtol=1e-5, atol=1e-6)  # exp in two libraries: last-bit differences
    assert {"Exp", "Where"} <= set(ops), ops


# ---------------------------------------------------------------------------------------------
# 4. aten::asinh at opset 9
# ---------------------------------------------------------------------------------------------


class AsinhModel(torch.nn.Module):
    def forward(self, x):
        return torch.asinh(x)


def asinh_symbolic(g, x):
    return g.op("Asinh", x)  # ONNX has had Asinh since opset 9; the TorchScript exporter never mapped it


def step4_asinh():
    print("\n== 4. aten::asinh at opset 9 (dynamo=False) ==")
    # Why two opsets: the TorchScript exporter has no asinh rule at any opset, not only at 9.
    with native_output(*IR_DUMP):
        model, x = AsinhModel().eval(), torch.randn(2, 3) * 4
        for opset in (9, 17):
            with expect_error(f"Exporting the operator 'aten::asinh' to ONNX opset version {opset} is not supported"):
                torch.onnx.export(model, (x,), "failures/asinh.onnx", dynamo=False, opset_version=opset)

    register_custom_op_symbolic("aten::asinh", asinh_symbolic, 9)

    for opset, path in [(9, "asinh_opset9.onnx"), (17, "asinh_opset17.onnx")]:
        torch.onnx.export(model, (x,), path, dynamo=False, opset_version=opset, input_names=["x"])
        (actual,) = run_ort(path, {"x": x.numpy()})
        compare(path, actual, model(x), rtol=1e-5, atol=1e-6)  # two asinh implementations: last-bit differences
    # Registered at opset 9, the symbolic served opset 17 too.
    for path, opset in [("asinh_opset9.onnx", 9), ("asinh_opset17.onnx", 17)]:
        exported = show(path)
        assert [n.op_type for n in exported.graph.node] == ["Asinh"] and opsets_of(exported) == {"": opset}


# ---------------------------------------------------------------------------------------------
# 5. torchvision::deform_conv2d with nothing registered
# ---------------------------------------------------------------------------------------------


class DeformConvModel(torch.nn.Module):
    def forward(self, x, offset, weight, bias, mask):
        return torchvision.ops.deform_conv2d(x, offset, weight, bias, stride=2, padding=1, mask=mask)


def deform_conv_inputs():
    """x, offset, weight, bias, mask: 2 images of 4 channels, 9x9, into 6 channels with a 3x3 kernel."""
    n, c_in, c_out, size, k = 2, 4, 6, 9, 3
    out_size = (size + 2 * 1 - k) // 2 + 1  # stride 2, padding 1
    x = torch.randn(n, c_in, size, size)
    offset = torch.randn(n, 2 * k * k, out_size, out_size)  # a (dy, dx) per kernel tap and output pixel
    weight = torch.randn(c_out, c_in, k, k)
    bias = torch.randn(c_out)
    mask = torch.rand(n, k * k, out_size, out_size)  # a weight in [0, 1) per kernel tap and output pixel
    return x, offset, weight, bias, mask


def step5_operator_export_type():
    print("\n== 5. torchvision::deform_conv2d with nothing registered (dynamo=False) ==")
    model, inputs = DeformConvModel().eval(), deform_conv_inputs()
    names = ["x", "offset", "weight", "bias", "mask"]
    with native_output(*IR_DUMP):
        if TORCH == (2, 8):  # torch 2.8.0's message has a literal {op_name}: errors.py lacks an f-prefix
            differs("UnsupportedOperatorError says 'unrecognized namespace {op_name}': the op's name is missing")
            with expect_error("ONNX export failed on an operator with unrecognized namespace {op_name}."):
                torch.onnx.export(model, inputs, "failures/deform_conv2d.onnx", dynamo=False, opset_version=19)
        else:
            with expect_error("unrecognized namespace torchvision::deform_conv2d"):
                torch.onnx.export(model, inputs, "failures/deform_conv2d.onnx", dynamo=False, opset_version=19)

    # Why show them: both "succeed", but each only moves the failure from export to the runtime.
    for mode, path in [
        (torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH, "failures/deform_conv2d_onnx_fallthrough.onnx"),
        (torch.onnx.OperatorExportTypes.ONNX_ATEN_FALLBACK, "failures/deform_conv2d_onnx_aten_fallback.onnx"),
    ]:
        torch.onnx.export(
            model, inputs, path, dynamo=False, opset_version=19, input_names=names, operator_export_type=mode
        )
    for path, node in [
        ("failures/deform_conv2d_onnx_fallthrough.onnx", "torchvision.deform_conv2d"),
        ("failures/deform_conv2d_onnx_aten_fallback.onnx", "org.pytorch.aten.ATen"),
    ]:
        exported = show(path)
        assert [f"{n.domain}.{n.op_type}" for n in exported.graph.node if n.op_type != "Constant"] == [node]

    feeds = {name: tensor.numpy() for name, tensor in zip(names, inputs, strict=True)}
    with expect_error("torchvision:deform_conv2d(-1) is not a registered function/op"):
        run_ort("failures/deform_conv2d_onnx_fallthrough.onnx", feeds)
    with expect_error("org.pytorch.aten:ATen(-1) is not a registered function/op"):
        run_ort("failures/deform_conv2d_onnx_aten_fallback.onnx", feeds)


# ---------------------------------------------------------------------------------------------
# 6. torchvision::deform_conv2d: a symbolic
# ---------------------------------------------------------------------------------------------


# A placeholder like MMDeploy's: a made-up op that keeps some of the tensors (here three of five).
@parse_args("v", "v", "v", "v", "v", "i", "i", "i", "i", "i", "i", "i", "i", "none")
def deform_conv2d_placeholder(g, x, weight, offset, mask, bias, *unused):
    return g.op("custom::deform_conv2d", x, weight, offset)


@parse_args("v", "v", "v", "v", "v", "i", "i", "i", "i", "i", "i", "i", "i", "b")
def deform_conv2d_symbolic(
    g, x, weight, offset, mask, bias, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups, offset_groups, use_mask
):
    # ONNX DeformConv (opset 19) takes X, W, offset, B, mask: a different order from torchvision's.
    inputs = [x, weight, offset, bias] + ([mask] if use_mask else [])
    return g.op(
        "DeformConv",
        *inputs,
        strides_i=[stride_h, stride_w],
        pads_i=[pad_h, pad_w, pad_h, pad_w],  # ONNX lists begins then ends
        dilations_i=[dil_h, dil_w],
        group_i=groups,
        offset_group_i=offset_groups,
    )


def step6_deform_conv2d():
    print("\n== 6. torchvision::deform_conv2d: a symbolic (dynamo=False) ==")
    # Why show the placeholder: it exports, which looks like success, but it drops mask and bias
    # and names an op no runtime has. The exporter warns from C++ that it has no shape for it.
    with native_output("The shape inference of custom::deform_conv2d type is missing"):
        model, inputs = DeformConvModel().eval(), deform_conv_inputs()
        names = ["x", "offset", "weight", "bias", "mask"]
        feeds = {name: tensor.numpy() for name, tensor in zip(names, inputs, strict=True)}
        register_custom_op_symbolic("torchvision::deform_conv2d", deform_conv2d_placeholder, 19)
        torch.onnx.export(
            model, inputs, "failures/deform_conv2d_placeholder.onnx", dynamo=False, opset_version=19, input_names=names
        )
        kept = [i.name for i in onnx.load("failures/deform_conv2d_placeholder.onnx").graph.input]
        print(f"  the placeholder model's inputs are {kept}: bias and mask are gone")
        with expect_error("custom:deform_conv2d(-1) is not a registered function/op"):
            run_ort("failures/deform_conv2d_placeholder.onnx", {name: feeds[name] for name in kept})
    assert kept == ["x", "offset", "weight"], kept
    show("failures/deform_conv2d_placeholder.onnx")

    # Re-registering replaces the placeholder. (Do not unregister instead: see the README.)
    register_custom_op_symbolic("torchvision::deform_conv2d", deform_conv2d_symbolic, 19)
    torch.onnx.export(model, inputs, "deform_conv2d.onnx", dynamo=False, opset_version=19, input_names=names)
    (node,) = show("deform_conv2d.onnx").graph.node
    assert list(node.input) == ["x", "weight", "offset", "bias", "mask"], node.input  # ONNX's order

    expected = model(*inputs)
    (actual,) = run_ort("deform_conv2d.onnx", feeds)
    # Two float32 sums over C_in*k*k taps, perhaps in another order: allow 1e-5 of the largest output.
    compare("deform_conv2d.onnx", actual, expected, rtol=0, atol=round(1e-5 * float(expected.abs().max()), 6))


# ---------------------------------------------------------------------------------------------
# 7. The torch.export-based exporter (dynamo=True)
# ---------------------------------------------------------------------------------------------


rknn_cst = onnxscript.values.Opset("rknn_cst", 1)


def threshold_translation(x, threshold: float, value: float):
    return rknn_cst.cstThreshold(x, threshold=threshold, value=value)


def step7_dynamo():
    print("\n== 7. The torch.export-based exporter (dynamo=True) ==")
    if TORCH < (2, 9):  # one line for the step, whatever differs below (steps.json keeps one reason per step)
        differs(
            "torch.onnx.export defaults to dynamo=False before 2.9, so the source's call uses the symbolic"
            + ("; dynamo=True exports at opset 18 by default (20 since 2.9)" if TORCH >= (2, 6) else "")
        )
    if TORCH >= (2, 6):  # torch 2.4 runs only the first export below (with dynamo=False), then skips
        print("  (this step exports 5 models with dynamo=True: torch.export traces each, a few seconds apiece)")
    # Why first: this is Rockchip's export call as written, and since torch 2.9 it means dynamo=True.
    # The export logs, among progress lines, a 14-line traceback from onnxscript's version converter:
    # capture it, check what the lesson relies on (it could not reach opset 12), and drop the rest.
    print("  Rockchip's call, as written: torch.onnx.export(model, (x,), path, opset_version=12)")
    noise: list[str] = []
    with captured(noise):
        register_custom_op_symbolic("aten::threshold", threshold_typed, 12)  # step 1's cstThreshold symbolic
        model, x = ThresholdModel().eval(), torch.randn(1, 3, 10, 10)
        torch.onnx.export(model, (x,), "threshold_source_as_written.onnx", opset_version=12)
    if VERBOSE:
        print(textwrap.indent(noise[0].rstrip(), "    | "))
    if TORCH < (2, 9):
        # Before 2.9 the call means dynamo=False: the symbolic is used, as the source expects. Nothing is
        # ignored; the model is step 1's (the input is called "input"), run with step 1's Python kernel.
        exported = show("threshold_source_as_written.onnx")
        ops = [f"{n.domain}.{n.op_type}" for n in exported.graph.node]
        assert ops == ["rknn_cst.cstThreshold"] and opsets_of(exported) == {"": 12, "rknn_cst": 1}, exported
        print(f"  the symbolic was used (dynamo=False is the default before 2.9): ops {ops}, opset 12")
        if onnx_op is not None:
            custom_ops = ort.SessionOptions()
            custom_ops.register_custom_ops_library(get_library_path())
            (actual,) = run_ort("threshold_source_as_written.onnx", {"input": x.numpy()}, custom_ops)
            compare("threshold_source_as_written.onnx", actual, model(x), rtol=0, atol=0)
    else:
        for logged in [
            "Setting ONNX exporter to use operator set version 18 because the requested opset_version 12",
            "Failed to convert the model to the target version 12 using the ONNX C API. The model was not modified",
            "No Adapter From Version $13 for Cast",
        ]:
            assert logged in noise[0], f"the export no longer logs {logged!r}:\n{noise[0]}"
        print("  the exporter logged: 'Setting ONNX exporter to use operator set version 18 because ...'")
        print("  the version converter logged: 'Failed to convert the model to the target version 12 ...'")
        print("    (its traceback ends in 'No Adapter From Version $13 for Cast'), and the export went on")

        # torch >= 2.9 (dynamo=True by default); before 2.9 the call above used the symbolic instead.
        exported = onnx.load("threshold_source_as_written.onnx")
        ops, opset = [n.op_type for n in exported.graph.node], {o.domain: o.version for o in exported.opset_import}[""]
        print(f"  SILENTLY IGNORED: the symbolic was not used; ops {ops}, opset {opset} instead of 12")
        (actual,) = run_ort("threshold_source_as_written.onnx", {"x": x.numpy()})
        compare("threshold_source_as_written.onnx", actual, model(x), rtol=0, atol=0)
        assert "cstThreshold" not in ops and opset == 18, (ops, opset)
        show("threshold_source_as_written.onnx")
    if TORCH < (2, 6):
        raise NeedsTorch(
            "2.6", "custom_translation_table came with 2.6; on 2.4, dynamo=True is the old torch.onnx.dynamo_export"
        )

    # Why: the three ops that failed above export here with nothing registered. aten::threshold still
    # has threshold_typed registered (above), and torchvision::deform_conv2d step 6's symbolic.
    with native_output():  # torch 2.8 logs 'Missing annotation for parameter ...' for torchvision's ops: held back
        # On torch 2.8, DeformConv needs opset_version=19 or 20 here (the default there is opset 18).
        x, deform_inputs = torch.randn(1, 3, 10, 10), deform_conv_inputs()
        # external_data=False: each model in one file (by default, an empty NAME.onnx.data comes too)
        for model, inputs, path in [
            (ThresholdModel().eval(), (x,), "threshold_dynamo.onnx"),
            (AsinhModel().eval(), (x * 4,), "asinh_dynamo.onnx"),
            (DeformConvModel().eval(), deform_inputs, "deform_conv2d_dynamo.onnx"),
        ]:
            torch.onnx.export(model, inputs, path, dynamo=True, verbose=False, external_data=False)
    if TORCH < (2, 9):
        # Before 2.9 dynamo=True exports at opset 18 by default, and ONNX has DeformConv only since opset 19:
        # the export "succeeds" and writes a model that neither the checker nor ORT accepts. Keep it under
        # failures/ and export again with opset_version=20 (what 2.9 and later use by default).
        print("  deform_conv2d_dynamo.onnx came out at opset 18, the default here; the checker refuses it:")
        with expect_error("No Op registered for DeformConv with domain_version of 18"):
            onnx.checker.check_model(onnx.load("deform_conv2d_dynamo.onnx"), full_check=True)
        os.replace("deform_conv2d_dynamo.onnx", "failures/deform_conv2d_dynamo_opset18.onnx")
        print("  kept as failures/deform_conv2d_dynamo_opset18.onnx; exporting again with opset_version=20")
        with native_output():
            model = DeformConvModel().eval()
            torch.onnx.export(
                model,
                deform_inputs,
                "deform_conv2d_dynamo.onnx",
                dynamo=True,
                verbose=False,
                external_data=False,
                opset_version=20,
            )
    for path, ops in [
        ("threshold_dynamo.onnx", ["LessOrEqual", "Where"]),
        ("asinh_dynamo.onnx", ["Asinh"]),
        ("deform_conv2d_dynamo.onnx", ["DeformConv"]),
    ]:
        exported = show(path)
        assert [n.op_type for n in exported.graph.node] == ops and all(n.domain == "" for n in exported.graph.node)
    print("  register_custom_op_symbolic had no effect under dynamo=True: no cstThreshold node")

    (actual,) = run_ort("threshold_dynamo.onnx", {"x": x.numpy()})
    compare("threshold_dynamo.onnx", actual, ThresholdModel()(x), rtol=0, atol=0)
    (actual,) = run_ort("asinh_dynamo.onnx", {"x": (x * 4).numpy()})
    compare("asinh_dynamo.onnx", actual, AsinhModel()(x * 4), rtol=1e-5, atol=1e-6)
    feeds = {
        name: tensor.numpy()
        for name, tensor in zip(["x", "offset", "weight", "bias", "mask"], deform_inputs, strict=True)
    }
    expected = DeformConvModel()(*deform_inputs)
    (actual,) = run_ort("deform_conv2d_dynamo.onnx", feeds)
    compare("deform_conv2d_dynamo.onnx", actual, expected, rtol=0, atol=round(1e-5 * float(expected.abs().max()), 6))

    # Why: to keep the custom node, the new exporter takes a translation per torch op instead.
    with native_output():  # torch 2.8 logs 'Missing annotation for parameter ...': held back
        model = ThresholdModel().eval()
        table = {torch.ops.aten.threshold.default: threshold_translation}
        with expect_error("No schema registered for 'cstThreshold' version '1' and domain 'rknn_cst'"):
            torch.onnx.export(model, (x,), dynamo=True, verbose=False, custom_translation_table=table)

    schema = onnx.defs.OpSchema(
        "cstThreshold",
        "rknn_cst",
        1,
        inputs=[onnx.defs.OpSchema.FormalParameter("X", "T")],
        outputs=[onnx.defs.OpSchema.FormalParameter("Y", "T")],
        type_constraints=[("T", ["tensor(float)"], "float32 tensors")],
        attributes=[
            onnx.defs.OpSchema.Attribute("threshold", onnx.defs.OpSchema.AttrType.FLOAT, "keep x above this"),
            onnx.defs.OpSchema.Attribute("value", onnx.defs.OpSchema.AttrType.FLOAT, "written elsewhere"),
        ],
    )
    onnx.defs.register_schema(schema)  # once per process: a second registration of the same op fails

    with native_output():
        torch.onnx.export(
            model,
            (x,),
            "threshold_custom_dynamo.onnx",
            dynamo=True,
            verbose=False,
            external_data=False,
            custom_translation_table=table,
        )
        (node,) = onnx.load("threshold_custom_dynamo.onnx").graph.node
        attributes = [onnx.helper.printable_attribute(a) for a in node.attribute]
        print(f"  threshold_custom_dynamo.onnx: one {node.domain}.{node.op_type} node, attributes {attributes}")
        if onnx_op is not None:  # the Python kernel that step 1 registered with @onnx_op runs this node too
            custom_ops = ort.SessionOptions()
            custom_ops.register_custom_ops_library(get_library_path())
            (actual,) = run_ort("threshold_custom_dynamo.onnx", {"x": x.numpy()}, custom_ops)
            compare("threshold_custom_dynamo.onnx", actual, model(x), rtol=0, atol=0)
    exported = show("threshold_custom_dynamo.onnx")
    assert opsets_of(exported).get("rknn_cst") == 1, opsets_of(exported)
    if onnx_op is None:
        raise Skip(ortx_problem())


# ---------------------------------------------------------------------------------------------
# 8. dynamo=True: the error names an op the model never calls (decompositions)
# ---------------------------------------------------------------------------------------------


class CholeskyModel(torch.nn.Module):
    def forward(self, a):
        return torch.linalg.cholesky(a)  # a: a batch of symmetric positive-definite matrices


op = onnxscript.opset18  # ONNX's standard ops, for translations


def cholesky_translation(self, upper: bool = False):
    # Cholesky-Banachiewicz, one column at a time, unrolled for the matrix size known at export time.
    n = self.shape[-1]
    columns = []
    for j in range(n):
        column = op.Gather(self, op.Constant(value_int=j), axis=-1)  # A[..., :, j]
        for done in columns:  # minus L[:, k] * L[j, k] for every column k < j
            column = op.Sub(column, op.Mul(done, op.Gather(done, op.Constant(value_ints=[j]), axis=-1)))
        pivot = op.Sqrt(op.Gather(column, op.Constant(value_ints=[j]), axis=-1))  # L[j, j]
        below = op.Constant(value_floats=[0.0] * j + [1.0] * (n - j))  # rows above j are 0 in L
        columns.append(op.Mul(op.Div(column, pivot), below))
    lower = op.Concat(*[op.Unsqueeze(column, [-1]) for column in columns], axis=-1)
    if upper:  # U = L transposed
        rank = len(self.shape)
        return op.Transpose(lower, perm=[*range(rank - 2), rank - 1, rank - 2])
    return lower


# What a reader writes after reading the error: a translation for the op it names (L and an info code).
def cholesky_ex_translation(self, upper: bool = False, check_errors: bool = False):
    return cholesky_translation(self, upper), op.Constant(value_int=0)


def step8_decompositions():
    print("\n== 8. dynamo=True: the error names an op the model never calls ==")
    torch.manual_seed(0)
    x = torch.randn(2, 4, 4)
    a = x @ x.mT + 4 * torch.eye(4)  # symmetric positive definite: the Cholesky factor exists
    model = CholeskyModel().eval()
    if TORCH >= (2, 6):  # custom_translation_table came with 2.6 (see step 7); on 2.4, dynamo=True is dynamo_export
        with native_output():
            with expect_error("No ONNX function found for <OpOverload(op='aten.linalg_cholesky_ex'"):
                torch.onnx.export(model, (a,), dynamo=True, verbose=False)

    # Why: the graph before and after run_decompositions() shows which op the error came from.
    exported = torch.export.export(model, (a,))
    print("  the model calls:", [str(n.target) for n in exported.graph.nodes if n.op == "call_function"])
    decomposed = exported.run_decompositions()
    print("  after run_decompositions():", [str(n.target) for n in decomposed.graph.nodes if n.op == "call_function"])
    before = [str(n.target) for n in exported.graph.nodes if n.op == "call_function"]
    after = [str(n.target) for n in decomposed.graph.nodes if n.op == "call_function"]
    assert before == ["aten.linalg_cholesky.default"], before
    assert "aten.linalg_cholesky_ex.default" in after and "aten.linalg_cholesky.default" not in after, after
    # torch 2.14 keeps the error check as an effectful node (pytorch#184111); older ones drop it.
    effectful = "with_effects" in after
    if TORCH < (2, 6):
        raise NeedsTorch(
            "2.6", "custom_translation_table came with 2.6; on 2.4, dynamo=True is the old torch.onnx.dynamo_export"
        )

    if effectful:
        with native_output():
            table = {torch.ops.aten.linalg_cholesky_ex.default: cholesky_ex_translation}
            with expect_error("KeyError: <bound method OpOverload.name of <OpOverload(op='aten._linalg_check_errors'"):
                torch.onnx.export(model, (a,), dynamo=True, verbose=False, custom_translation_table=table)
    else:
        differs(
            "run_decompositions() drops aten._linalg_check_errors (no with_effects node), so keying on "
            "linalg_cholesky_ex exports too, without the error check"
        )
        with native_output():
            table = {torch.ops.aten.linalg_cholesky_ex.default: cholesky_ex_translation}
            torch.onnx.export(
                model,
                (a,),
                "failures/cholesky_ex_dynamo.onnx",
                dynamo=True,
                verbose=False,
                external_data=False,
                custom_translation_table=table,
            )
        show("failures/cholesky_ex_dynamo.onnx")
        (actual,) = run_ort("failures/cholesky_ex_dynamo.onnx", {"a": a.numpy()})
        compare("failures/cholesky_ex_dynamo.onnx", actual, model(a), rtol=1e-5, atol=1e-5)
        print("  keyed on the decomposed op, it exports here (the same graph); torch 2.14 refuses that key")

    with native_output():  # torch 2.8 logs 'Missing annotation for parameter ...': held back
        table = {torch.ops.aten.linalg_cholesky.default: cholesky_translation}
        torch.onnx.export(
            model,
            (a,),
            "cholesky_dynamo.onnx",
            dynamo=True,
            verbose=False,
            external_data=False,
            custom_translation_table=table,
        )
        ops = sorted({node.op_type for node in onnx.load("cholesky_dynamo.onnx").graph.node})
        print(f"  cholesky_dynamo.onnx: linalg_cholesky kept whole and translated to standard ops {ops}")
        (actual,) = run_ort("cholesky_dynamo.onnx", {"a": a.numpy()})
        compare("cholesky_dynamo.onnx", actual, model(a), rtol=1e-5, atol=1e-5)
    exported = show("cholesky_dynamo.onnx")
    assert all(n.domain == "" for n in exported.graph.node) and "Sqrt" in ops, ops


# ---------------------------------------------------------------------------------------------
# 9. A node ONNX Runtime implements itself: com.microsoft::CDist
# ---------------------------------------------------------------------------------------------


class CDistModel(torch.nn.Module):
    def forward(self, x1, x2):
        return torch.cdist(x1, x2)  # the euclidean distance from every row of x1 to every row of x2


# aten::cdist(Tensor x1, Tensor x2, float p=2, int? compute_mode=None)
@parse_args("v", "v", "f", "none")
def cdist_contrib(g, x1, x2, p, compute_mode):
    if p != 2.0:  # ORT's CDist has the euclidean (and squared euclidean) metric only
        raise ValueError(f"com.microsoft::CDist has no p={p} metric")
    y = g.op("com.microsoft::CDist", x1, x2, metric_s="euclidean")
    y.setType(x1.type().with_sizes([x1.type().sizes()[0], x2.type().sizes()[0]]))  # [rows of x1, rows of x2]
    return y


def cdist_tolerance(x1, x2):
    # ORT's CDist computes |a|^2 + |b|^2 - 2 a.b with a matrix product, then the square root: float32
    # rounding of that sum is at most 2 (k + 2) 2^-24 (|a|^2 + |b|^2), k the row length, and the square
    # root turns an error e of a distance near 0 into up to sqrt(e).
    k = x1.shape[-1]
    largest = float((x1**2).sum(-1).max() + (x2**2).sum(-1).max())
    return float(np.sqrt(2 * (k + 2) * 2.0**-24 * largest))


msft = onnxscript.values.Opset("com.microsoft", 1)


def cdist_translation(x1, x2, p: float = 2.0, compute_mode=None):
    if p != 2.0:
        raise ValueError(f"com.microsoft::CDist has no p={p} metric")
    return msft.CDist(x1, x2, metric="euclidean")


def step9_contrib_op():
    print("\n== 9. A node ONNX Runtime implements itself: com.microsoft::CDist ==")
    torch.manual_seed(0)
    model, x1, x2 = CDistModel().eval(), torch.randn(5, 3), torch.randn(7, 3)
    names = ["x1", "x2"]
    torch.onnx.export(model, (x1, x2), "cdist_builtin.onnx", dynamo=False, opset_version=17, input_names=names)
    register_custom_op_symbolic("aten::cdist", cdist_contrib, 9)  # replaces the built-in rule
    torch.onnx.export(
        model,
        (x1, x2),
        "cdist_contrib.onnx",
        dynamo=False,
        opset_version=17,
        input_names=names,
        custom_opsets={"com.microsoft": 1},
    )
    for path in ["cdist_builtin.onnx", "cdist_contrib.onnx"]:
        ops = [f"{n.domain}.{n.op_type}" if n.domain else n.op_type for n in onnx.load(path).graph.node]
        print(f"  {path}: {len(ops)} node(s), {sorted(set(ops))}")
    # Why: onnx knows no com.microsoft schema, so its checker passes that node without checking it.
    assert not onnx.defs.has("CDist", "com.microsoft")
    exported = show("cdist_contrib.onnx")
    assert [f"{n.domain}.{n.op_type}" for n in exported.graph.node] == ["com.microsoft.CDist"]
    assert opsets_of(exported) == {"": 17, "com.microsoft": 1} and output_dims(exported) == [5, 7]
    show("cdist_builtin.onnx")

    print("  onnx.defs has a schema for com.microsoft CDist:", onnx.defs.has("CDist", "com.microsoft"))
    atol = round(cdist_tolerance(x1, x2), 6)
    for path in ["cdist_builtin.onnx", "cdist_contrib.onnx"]:
        (actual,) = run_ort(path, {"x1": x1.numpy(), "x2": x2.numpy()})  # plain ORT: no custom-op library
        compare(path, actual, model(x1, x2), rtol=0, atol=atol)
    if TORCH < (2, 6):
        raise NeedsTorch(
            "2.6", "custom_translation_table came with 2.6; on 2.4, dynamo=True is the old torch.onnx.dynamo_export"
        )

    # Why: under dynamo=True, cdist is decomposed too (step 8), into an op with no ONNX function.
    with native_output():
        with expect_error("No ONNX function found for <OpOverload(op='aten._cdist_forward'"):
            torch.onnx.export(model, (x1, x2), dynamo=True, verbose=False)
        table = {torch.ops.aten.cdist.default: cdist_translation}
        with expect_error("No schema registered for 'CDist' version '1' and domain 'com.microsoft'"):
            torch.onnx.export(model, (x1, x2), dynamo=True, verbose=False, custom_translation_table=table)

    # ORT's documentation of CDist (ContribOperators.md), as an ONNX schema: onnxscript needs one.
    schema = onnx.defs.OpSchema(
        "CDist",
        "com.microsoft",
        1,
        inputs=[onnx.defs.OpSchema.FormalParameter("A", "T"), onnx.defs.OpSchema.FormalParameter("B", "T")],
        outputs=[onnx.defs.OpSchema.FormalParameter("C", "T")],
        type_constraints=[("T", ["tensor(float)", "tensor(double)"], "float32 or float64 tensors")],
        attributes=[
            onnx.defs.OpSchema.Attribute("metric", onnx.defs.OpSchema.AttrType.STRING, "euclidean or sqeuclidean")
        ],
    )
    onnx.defs.register_schema(schema)  # once per process, as in step 7

    with native_output():
        torch.onnx.export(
            model,
            (x1, x2),
            "cdist_contrib_dynamo.onnx",
            dynamo=True,
            verbose=False,
            external_data=False,
            custom_translation_table=table,
        )
        (node,) = onnx.load("cdist_contrib_dynamo.onnx").graph.node
        attributes = [onnx.helper.printable_attribute(a) for a in node.attribute]
        print(f"  cdist_contrib_dynamo.onnx: one {node.domain}.{node.op_type} node, attributes {attributes}")
        (actual,) = run_ort("cdist_contrib_dynamo.onnx", {"x1": x1.numpy(), "x2": x2.numpy()})
        compare("cdist_contrib_dynamo.onnx", actual, model(x1, x2), rtol=0, atol=round(cdist_tolerance(x1, x2), 6))
    exported = show("cdist_contrib_dynamo.onnx")
    assert opsets_of(exported).get("com.microsoft") == 1 and output_dims(exported) == [5, 7], exported


HERE = pathlib.Path(__file__).resolve().parent
SKIP = 77  # exit status for "cannot run here", as in automake
VERBOSE = False  # -v: print every exported graph in full

# Every model this example writes, relative to --out: the ones each step keeps (each checked and run against
# PyTorch; a step skipped for its torch need not write them) and the failure demonstrations. main() removes
# them before a run and refuses to claim PASS while --out holds any other .onnx file.
KEPT = {
    1: ("threshold_untyped.onnx", "threshold_custom.onnx"),
    2: ("threshold_standard.onnx",),
    3: ("elu_builtin.onnx", "elu_override.onnx"),
    4: ("asinh_opset9.onnx", "asinh_opset17.onnx"),
    6: ("deform_conv2d.onnx",),
    7: (
        "threshold_source_as_written.onnx",
        "threshold_dynamo.onnx",
        "asinh_dynamo.onnx",
        "deform_conv2d_dynamo.onnx",
        "threshold_custom_dynamo.onnx",
    ),
    8: ("cholesky_dynamo.onnx",),
    9: ("cdist_builtin.onnx", "cdist_contrib.onnx", "cdist_contrib_dynamo.onnx"),
}
FAILURES = (
    "failures/threshold_no_attributes.onnx",
    "failures/threshold_float_list.onnx",
    "failures/deform_conv2d_onnx_fallthrough.onnx",
    "failures/deform_conv2d_onnx_aten_fallback.onnx",
    "failures/deform_conv2d_placeholder.onnx",
    "failures/deform_conv2d_dynamo_opset18.onnx",  # torch 2.8 only: DeformConv at opset 18 (step 7)
    "failures/cholesky_ex_dynamo.onnx",  # torch 2.8 only: keyed on the decomposed op (step 8)
)
STEPS = (
    step1_custom_domain_node,
    step2_standard_ops,
    step3_override_builtin,
    step4_asinh,
    step5_operator_export_type,
    step6_deform_conv2d,  # registers torchvision::deform_conv2d; nothing unregisters it
    step7_dynamo,
    step8_decompositions,
    step9_contrib_op,
)



# What ERRORS.md says of each error this example reproduces: part of expect_error's expected text ->
# (what raises it, its cause in one line[, the step that fixes it when that is a later step than the one
# that reproduces it]). recording() fails the run on an error not explained here.
CAUSES = {
    "Unsupported: ONNX export of operator threshold, non-zero threshold": (
        "dynamo=False",
        "the built-in symbolic for `aten::threshold` handles only `threshold == 0`: register your own for "
        "other values",
    ),
    "Invalid attribute specifier 'param_fs'": (
        "dynamo=False",
        "`g.op` attribute names end in a one-letter type suffix (`_i`, `_f`, `_s`, `_t`, ...), lists "
        "included: a list of floats is `param_f=[...]`, not `param_fs`",
    ),
    "Unable to find attribute 'threshold'": (
        "ONNX Runtime",
        "the onnxruntime-extensions kernel reads a scalar float attribute `threshold` that the node does not "
        "have (the symbolic dropped the arguments, or wrote them as one list)",
    ),
    "Exporting the operator 'aten::asinh' to ONNX opset version": (
        "dynamo=False",
        "PyTorch has no symbolic for `aten::asinh` at any opset, though ONNX has `Asinh` from opset 9: "
        "register one (a one-to-one mapping)",
    ),
    "unrecognized namespace {op_name}": (
        "dynamo=False",
        "torch 2.8.0's text for an op of a library namespace (`torchvision::deform_conv2d`) with no symbolic: "
        "its name is missing from the message",
        6,  # fixed in step 6
    ),
    "unrecognized namespace torchvision::deform_conv2d": (
        "dynamo=False",
        "a library's op (`torchvision::deform_conv2d`) with no symbolic: register one for its namespace and "
        "name",
        6,  # fixed in step 6
    ),
    "torchvision:deform_conv2d(-1) is not a registered function/op": (
        "ONNX Runtime",
        "`operator_export_type=ONNX_FALLTHROUGH` wrote the op as a `torchvision` node that no runtime "
        "implements",
        6,  # fixed in step 6
    ),
    "org.pytorch.aten:ATen(-1) is not a registered function/op": (
        "ONNX Runtime",
        "`operator_export_type=ONNX_ATEN_FALLBACK` wrote an `ATen` node, meant for a runtime linked with "
        "PyTorch",
        6,  # fixed in step 6
    ),
    "custom:deform_conv2d(-1) is not a registered function/op": (
        "ONNX Runtime",
        "a symbolic that writes a custom-domain node: ONNX Runtime has no kernel for it (and this placeholder "
        "dropped `bias` and `mask`)",
    ),
    "No Op registered for DeformConv with domain_version of 18": (
        "onnx.checker",
        "`dynamo=True` before torch 2.9 exports at opset 18 by default; ONNX has `DeformConv` only from opset "
        "19: pass `opset_version`",
    ),
    "No schema registered for 'cstThreshold' version '1' and domain 'rknn_cst'": (
        "dynamo=True",
        "an onnxscript translation writing a custom-domain op needs the op's schema: register an "
        "`onnx.defs.OpSchema` first",
    ),
    "No ONNX function found for <OpOverload(op='aten.linalg_cholesky_ex'": (
        "dynamo=True",
        "`torch.linalg.cholesky` was decomposed into `aten.linalg_cholesky_ex`, which has no translation: key "
        "`custom_translation_table` on the op the model calls",
    ),
    "KeyError: <bound method OpOverload.name of <OpOverload(op='aten._linalg_check_errors'": (
        "dynamo=True",
        "a translation keyed on the decomposed op (`aten.linalg_cholesky_ex`) leaves its error check behind a "
        "`with_effects` node the exporter cannot translate",
    ),
    "No ONNX function found for <OpOverload(op='aten._cdist_forward'": (
        "dynamo=True",
        "`torch.cdist` reaches the exporter as `aten._cdist_forward`, which has no translation",
    ),
    "No schema registered for 'CDist' version '1' and domain 'com.microsoft'": (
        "dynamo=True",
        "an onnxscript translation writing an ONNX Runtime contrib op still needs its schema registered with "
        "ONNX",
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
    # Each dynamo=False export and registration warns that the TorchScript-based exporter is deprecated
    # (the README says so); ORT logs a failed session to stderr before raising what expect_error prints.
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.onnx")
    warnings.filterwarnings("ignore", message=".*legacy TorchScript-based ONNX export.*")
    ort.set_default_logger_severity(4)
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
    print(f"\nPASS: every model in {out} checked and matched PyTorch in ONNX Runtime")
    return 0


# =============================================================================================
# Helpers: safe to skip on a first read. The command line, the output folder, and the checks that
# run around the lesson's code: the ONNX checker, ONNX Runtime against PyTorch, captured output.
# =============================================================================================


class Skip(Exception):
    """Raised by a step that cannot run on this machine (no C++ compiler, ...): the reason is printed."""


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


def show(path: str | os.PathLike) -> onnx.ModelProto:
    """The full ONNX checker, then one line: ops in order, opset imports, outputs (the whole graph with -v)."""
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    ops = [f"{n.domain}.{n.op_type}" if n.domain else n.op_type for n in model.graph.node]
    opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import)
    outputs = ", ".join(f"{o.name}: {type_text(o.type)}" for o in model.graph.output)
    print(f"  {pathlib.PurePath(path).as_posix()}: {' '.join(ops)} | opsets {opsets} | {outputs}")
    if VERBOSE:
        print(textwrap.indent(onnx.printer.to_text(model.graph), "    "))
    return model


def type_text(value_type: onnx.TypeProto) -> str:
    tensor = value_type.tensor_type
    dims = [str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in tensor.shape.dim]
    return f"{onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)}[{','.join(dims)}]"


def run_ort(path, feeds: dict[str, np.ndarray], options: ort.SessionOptions | None = None) -> list[np.ndarray]:
    session = ort.InferenceSession(str(path), options or ort.SessionOptions(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def compare(name: str, actual: np.ndarray, expected, rtol: float, atol: float) -> None:
    """assert_allclose, then one line that names the model (and output) and the largest difference."""
    expected = expected.detach().numpy() if isinstance(expected, torch.Tensor) else np.asarray(expected)
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=name)
    diff = float(np.max(np.abs(actual.astype(np.float64) - expected))) if expected.size else 0.0
    print(f"  {name}: ONNX Runtime matches PyTorch (max abs diff {diff:.1e}; rtol={rtol}, atol={atol})")


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


@contextlib.contextmanager
def native_output(*expected: str):
    """captured(), but what the README's code prints from Python still reaches the reader. Only what C++ code
    and loggers write to the descriptors is held back: the TorchScript exporter prints 'Torch IR graph at
    exception:' and the whole TorchScript graph before a failing export raises (its logging is always on
    during an export, on torch 2.14.1), and its shape-inference warnings. Yields the captured text (sink[0]),
    after checking that it holds each `expected` text; shown with -v."""
    sys.stdout.flush()
    python_stdout, sink = sys.stdout, []
    encoding = python_stdout.encoding or "utf-8"
    with open(os.dup(1), "w", encoding=encoding, errors="replace", buffering=1) as passthrough:
        with captured(sink):
            sys.stdout = passthrough  # print() still reaches the reader; C++ writes to fd 1 do not
            try:
                yield sink
            finally:
                sys.stdout = python_stdout
    missing = [text for text in expected if text not in sink[0]]
    assert not missing, f"expected the libraries to print {missing}; they printed:\n{sink[0]}"
    if VERBOSE and sink[0].strip():
        print(textwrap.indent(sink[0].rstrip(), "    | "))


def output_dims(model: onnx.ModelProto) -> list[int | str]:
    dims = model.graph.output[0].type.tensor_type.shape.dim
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in dims]


def opsets_of(model: onnx.ModelProto) -> dict[str, int]:
    return {o.domain: o.version for o in model.opset_import}


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
