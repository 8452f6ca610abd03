"""Symbolic functions for PyTorch ops that exist but will not export to ONNX.

Run: python test.py [--out DIR]

Every step first reproduces the error a reader meets, then fixes it, exports, checks the
model with onnx.checker and runs it in ONNX Runtime against PyTorch. Steps 1-6 use the
TorchScript-based exporter (dynamo=False), the only one that reads register_custom_op_symbolic;
step 7 uses the torch.export-based exporter (dynamo=True), the default since torch 2.9.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import sys
import tempfile
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import onnxscript
import torch
import torchvision
from onnxruntime_extensions import PyCustomOpDef, get_library_path, onnx_op

HERE = pathlib.Path(__file__).resolve().parent
SKIP = 77  # exit status for "cannot run here"

try:  # the TorchScript-based exporter's API; a future torch may drop it
    from torch.onnx import register_custom_op_symbolic, unregister_custom_op_symbolic
    from torch.onnx.symbolic_helper import parse_args
except ImportError as exc:  # pragma: no cover - depends on the installed torch
    TORCHSCRIPT_EXPORTER_MISSING = f"{type(exc).__name__}: {exc}"

    def parse_args(*_descriptors):  # lets this file import, so main() can report the SKIP
        return lambda fn: fn
else:
    TORCHSCRIPT_EXPORTER_MISSING = ""


# ---------------------------------------------------------------------------------------------
# Helpers: the same few checks run on every model the example keeps.
# ---------------------------------------------------------------------------------------------


def reproduce(what: str, call, expect: str) -> BaseException:
    """Run `call`, which must fail with `expect` in its message; print the exception type and first line."""
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - showing whatever the reader would see is the point
        message = str(exc).strip()
        cause = exc.__cause__
        while cause is not None:  # a wrapped error: its cause names the real problem
            message += f"\n{type(cause).__name__}: {cause}"
            cause = cause.__cause__
        first_line = message.splitlines()[0].split("  [Caused by")[0] if message else ""
        print(f"  reproduced ({what}): {type(exc).__name__}: {first_line}")
        assert expect in message, f"{what}: expected {expect!r} in the error, got {type(exc).__name__}: {message}"
        if expect not in first_line:  # the cause is further down: show the line that names it
            print("    ... " + next(line.strip() for line in message.splitlines() if expect in line))
        return exc
    raise AssertionError(f"expected a failure ({what}), but it succeeded")


def check_and_show(path: pathlib.Path) -> onnx.ModelProto:
    """The full ONNX checker (with shape inference), then the graph as text."""
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    print(onnx.printer.to_text(model.graph))
    return model


def run_ort(path: pathlib.Path, feeds: dict[str, np.ndarray], custom_ops: bool = False) -> list[np.ndarray]:
    options = ort.SessionOptions()
    if custom_ops:
        # The Python kernels declared with @onnx_op live in onnxruntime-extensions' library.
        options.register_custom_ops_library(get_library_path())
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def compare(actual: np.ndarray, expected: torch.Tensor, rtol: float, atol: float) -> None:
    np.testing.assert_allclose(actual, expected.detach().numpy(), rtol=rtol, atol=atol)
    print(f"  ONNX Runtime matches PyTorch (rtol={rtol}, atol={atol})")


@contextlib.contextmanager
def captured_stderr(sink: list[str]):
    """Capture file descriptor 2: the exporter's C++ warnings bypass Python's warnings module."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            sink.append(tmp.read().decode(errors="replace"))


def output_dims(model: onnx.ModelProto) -> list[int | str]:
    dims = model.graph.output[0].type.tensor_type.shape.dim
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in dims]


def opsets_of(model: onnx.ModelProto) -> dict[str, int]:
    return {o.domain: o.version for o in model.opset_import}


def input_feeds(path: pathlib.Path, tensors) -> dict[str, np.ndarray]:
    names = [i.name for i in onnx.load(str(path)).graph.input]
    return {name: t.numpy() for name, t in zip(names, tensors, strict=True)}


# ---------------------------------------------------------------------------------------------
# The models.
# ---------------------------------------------------------------------------------------------


class ThresholdModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.threshold = torch.nn.Threshold(0.1, 20)  # y = x if x > 0.1 else 20

    def forward(self, x):
        return self.threshold(x)


class EluModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.elu = torch.nn.ELU(alpha=0.5)

    def forward(self, x):
        return self.elu(x)


class AsinhModel(torch.nn.Module):
    def forward(self, x):
        return torch.asinh(x)


class DeformConvModel(torch.nn.Module):
    def forward(self, x, offset, weight, bias, mask):
        return torchvision.ops.deform_conv2d(x, offset, weight, bias, stride=2, padding=1, mask=mask)


def deform_conv_inputs() -> tuple[torch.Tensor, ...]:
    n, c_in, c_out, size, k = 2, 4, 6, 9, 3
    out_size = (size + 2 * 1 - k) // 2 + 1  # stride 2, padding 1
    x = torch.randn(n, c_in, size, size)
    offset = torch.randn(n, 2 * k * k, out_size, out_size)
    weight = torch.randn(c_out, c_in, k, k)
    bias = torch.randn(c_out)
    mask = torch.rand(n, k * k, out_size, out_size)
    return x, offset, weight, bias, mask


# ---------------------------------------------------------------------------------------------
# The ORT kernel for rknn_cst::cstThreshold: a test double standing in for the target runtime's.
# ---------------------------------------------------------------------------------------------


def register_threshold_kernel() -> None:
    @onnx_op(
        op_type="rknn_cst::cstThreshold",
        inputs=[PyCustomOpDef.dt_float],
        outputs=[PyCustomOpDef.dt_float],
        attrs={"threshold": PyCustomOpDef.dt_float, "value": PyCustomOpDef.dt_float},
    )
    def cst_threshold(x, threshold, value):
        return np.where(x > np.float32(threshold), x, np.float32(value)).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# 1. Threshold as one custom-domain node
# ---------------------------------------------------------------------------------------------


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


def step1_custom_domain_node(out: pathlib.Path) -> None:
    print("\n== 1. Threshold as one custom-domain node (dynamo=False) ==")
    model, x = ThresholdModel().eval(), torch.randn(1, 3, 10, 10)

    # Why: this is the error that brings a reader here.
    reproduce(
        "no symbolic for a non-zero threshold",
        lambda: torch.onnx.export(model, (x,), out / "failures" / "threshold.onnx", dynamo=False, opset_version=12),
        "Unsupported: ONNX export of operator threshold, non-zero threshold",
    )

    # Why three styles: they differ in what survives into the file, and only B and C keep 0.1 and 20.
    for symbolic, filename in [
        (threshold_no_attributes, "failures/threshold_no_attributes.onnx"),
        (threshold_float_list, "failures/threshold_float_list.onnx"),
        (threshold_named_attributes, "threshold_untyped.onnx"),
    ]:
        print(f"\n-- {symbolic.__name__} -> {filename}")
        register_custom_op_symbolic("aten::threshold", symbolic, 12)
        stderr: list[str] = []
        with captured_stderr(stderr):
            torch.onnx.export(
                model, (x,), out / filename, dynamo=False, opset_version=12, custom_opsets={"rknn_cst": 1}
            )
        exported = check_and_show(out / filename)
        # Why: without setType the exporter warns and the output shape is left symbolic.
        assert "shape inference of rknn_cst::cstThreshold type is missing" in stderr[0], stderr[0]
        dims = output_dims(exported)
        assert len(dims) == 4 and all(isinstance(d, str) for d in dims), dims  # rank kept, sizes made up
        print(f"  exporter warned: shape inference ... is missing; output dims {output_dims(exported)}")

    register_custom_op_symbolic("aten::threshold", threshold_wrong_suffix, 12)
    reproduce(
        "g.op with a _fs suffix",
        lambda: torch.onnx.export(model, (x,), out / "failures" / "threshold.onnx", dynamo=False, opset_version=12),
        "Invalid attribute specifier 'param_fs'",
    )

    # Why a kernel: ORT knows nothing of rknn_cst; onnx_op lets a Python function stand in for it.
    register_threshold_kernel()

    # Why the no-attribute model cannot be run faithfully: a kernel sees only x, not 0.1 or 20;
    # a kernel that hard-codes them would pass here and be wrong for every other Threshold.
    reproduce(
        "a kernel that needs threshold/value on the attribute-less node",
        lambda: run_ort(out / "failures/threshold_no_attributes.onnx", {"input": x.numpy()}, custom_ops=True),
        "Unable to find attribute 'threshold'",
    )
    # The float-list model fails too: the kernel asks for threshold and value. A Python kernel
    # cannot ask for `param` instead, since onnxruntime-extensions reads only scalar int, float and
    # string attributes (PyCustomOpDef has no list type). A C++ kernel could; this test double cannot.
    reproduce(
        "the Python kernel on the float-list attribute",
        lambda: run_ort(out / "failures/threshold_float_list.onnx", {"input": x.numpy()}, custom_ops=True),
        "Unable to find attribute 'threshold'",
    )
    # What the float-list node means is still checked: the ONNX reference evaluator reads FLOATS.
    run_float_list_with_reference_evaluator(out / "failures/threshold_float_list.onnx", model, x)

    # Why setType: it removes the warning and gives the graph output its shape.
    register_custom_op_symbolic("aten::threshold", threshold_typed, 12)
    stderr = []
    with captured_stderr(stderr):
        torch.onnx.export(
            model, (x,), out / "threshold_custom.onnx", dynamo=False, opset_version=12, custom_opsets={"rknn_cst": 1}
        )
    exported = check_and_show(out / "threshold_custom.onnx")
    assert "shape inference" not in stderr[0], stderr[0]
    assert output_dims(exported) == [1, 3, 10, 10], output_dims(exported)
    print(f"  with setType: no warning, output dims {output_dims(exported)}")

    for filename in ["threshold_untyped.onnx", "threshold_custom.onnx"]:
        (actual,) = run_ort(out / filename, {"input": x.numpy()}, custom_ops=True)
        compare(actual, model(x), rtol=0, atol=0)  # a selection, no arithmetic: exact


def run_float_list_with_reference_evaluator(path: pathlib.Path, model: torch.nn.Module, x: torch.Tensor) -> None:
    from onnx.reference import ReferenceEvaluator
    from onnx.reference.op_run import OpRun

    class cstThreshold(OpRun):  # noqa: N801 - the class name is the ONNX op_type
        op_domain = "rknn_cst"

        def _run(self, x, param=None):
            threshold, value = param
            return (np.where(x > np.float32(threshold), x, np.float32(value)).astype(x.dtype),)

    (actual,) = ReferenceEvaluator(str(path), new_ops=[cstThreshold]).run(None, {"input": x.numpy()})
    np.testing.assert_allclose(actual, model(x).numpy(), rtol=0, atol=0)
    print("  the float-list model matches PyTorch in onnx.reference.ReferenceEvaluator (not ORT)")


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


def step2_standard_ops(out: pathlib.Path) -> None:
    print("\n== 2. Threshold with standard ops only (dynamo=False) ==")
    model, x = ThresholdModel().eval(), torch.randn(1, 3, 10, 10)
    # Why: a model of standard ops runs on any ONNX runtime, with no kernel to ship.
    register_custom_op_symbolic("aten::threshold", threshold_standard_ops, 12)
    torch.onnx.export(model, (x,), out / "threshold_standard.onnx", dynamo=False, opset_version=12)
    check_and_show(out / "threshold_standard.onnx")
    (actual,) = run_ort(out / "threshold_standard.onnx", {"input": x.numpy()})
    compare(actual, model(x), rtol=0, atol=0)


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


def step3_override_builtin(out: pathlib.Path) -> None:
    print("\n== 3. Override a built-in rule: aten::elu (dynamo=False) ==")
    model, x = EluModel().eval(), torch.randn(2, 3, 8)
    torch.onnx.export(model, (x,), out / "elu_builtin.onnx", dynamo=False, opset_version=12)
    builtin = check_and_show(out / "elu_builtin.onnx")
    assert [n.op_type for n in builtin.graph.node] == ["Elu"]
    # Why register instead of editing torch/onnx/symbolic_opset9.py: an edit is lost on every
    # upgrade and changes every model in the environment; a registration is yours and reversible.
    register_custom_op_symbolic("aten::elu", elu_from_primitives, 12)
    torch.onnx.export(model, (x,), out / "elu_override.onnx", dynamo=False, opset_version=12)
    override = check_and_show(out / "elu_override.onnx")
    op_types = {n.op_type for n in override.graph.node}
    assert "Elu" not in op_types and {"Exp", "Where"} <= op_types, op_types
    print(f"  the override was used: {sorted(op_types)}, no Elu")
    (actual,) = run_ort(out / "elu_override.onnx", {"input": x.numpy()})
    compare(actual, model(x), rtol=1e-5, atol=1e-6)  # exp in two libraries: last-bit differences
    unregister_custom_op_symbolic("aten::elu", 12)  # back to the built-in rule


# ---------------------------------------------------------------------------------------------
# 4. aten::asinh at opset 9
# ---------------------------------------------------------------------------------------------


def asinh_symbolic(g, x):
    return g.op("Asinh", x)  # ONNX has had Asinh since opset 9; the TorchScript exporter never mapped it


def step4_asinh(out: pathlib.Path) -> None:
    print("\n== 4. aten::asinh at opset 9 (dynamo=False) ==")
    model, x = AsinhModel().eval(), torch.randn(2, 3) * 4
    # Why two opsets: the TorchScript exporter has no asinh rule at any opset, not only at 9.
    for opset in (9, 17):
        reproduce(
            f"asinh at opset {opset}",
            lambda o=opset: torch.onnx.export(model, (x,), out / "failures/asinh.onnx", dynamo=False, opset_version=o),
            f"Exporting the operator 'aten::asinh' to ONNX opset version {opset} is not supported",
        )
    # Registered at opset 9, the symbolic serves every opset from 9 up.
    register_custom_op_symbolic("aten::asinh", asinh_symbolic, 9)
    for opset in (9, 17):
        path = out / f"asinh_opset{opset}.onnx"
        torch.onnx.export(model, (x,), path, dynamo=False, opset_version=opset)
        check_and_show(path)
        (actual,) = run_ort(path, input_feeds(path, (x,)))
        compare(actual, model(x), rtol=1e-5, atol=1e-6)  # two asinh implementations: last-bit differences


# ---------------------------------------------------------------------------------------------
# 5. When you register nothing: operator_export_type
# ---------------------------------------------------------------------------------------------


def step5_operator_export_type(out: pathlib.Path) -> None:
    print("\n== 5. torchvision::deform_conv2d with nothing registered (dynamo=False) ==")
    model, inputs = DeformConvModel().eval(), deform_conv_inputs()
    names = ["x", "offset", "weight", "bias", "mask"]
    reproduce(
        "no symbolic for torchvision::deform_conv2d",
        lambda: torch.onnx.export(
            model, inputs, out / "failures" / "deform_conv2d.onnx", dynamo=False, opset_version=19
        ),
        "unrecognized namespace torchvision::deform_conv2d",
    )
    # Why show them: both "succeed", but each only moves the failure from export to the runtime.
    for mode, expected_error in [
        (torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH, "torchvision:deform_conv2d(-1) is not a registered"),
        (torch.onnx.OperatorExportTypes.ONNX_ATEN_FALLBACK, "org.pytorch.aten:ATen(-1) is not a registered"),
    ]:
        path = out / "failures" / f"deform_conv2d_{mode.name.lower()}.onnx"
        print(f"\n-- operator_export_type={mode.name}")
        torch.onnx.export(
            model, inputs, path, dynamo=False, opset_version=19, input_names=names, operator_export_type=mode
        )
        exported = check_and_show(path)
        print(f"  nodes: {[(n.domain, n.op_type) for n in exported.graph.node if n.op_type != 'Constant']}")
        reproduce(f"ORT on the {mode.name} model", lambda p=path: run_ort(p, input_feeds(p, inputs)), expected_error)


# ---------------------------------------------------------------------------------------------
# 6. torchvision::deform_conv2d: the real fix
# ---------------------------------------------------------------------------------------------

# torchvision's C++ schema, which the symbolic must follow (not the Python signature):
# deform_conv2d(Tensor input, Tensor weight, Tensor offset, Tensor mask, Tensor bias,
#               int stride_h, int stride_w, int pad_h, int pad_w, int dilation_h, int dilation_w,
#               int groups, int offset_groups, bool use_mask) -> Tensor


# The source's placeholder: a made-up op that keeps three of the five tensors.
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


def step6_deform_conv2d(out: pathlib.Path) -> None:
    print("\n== 6. torchvision::deform_conv2d: a symbolic (dynamo=False) ==")
    model, inputs = DeformConvModel().eval(), deform_conv_inputs()
    names = ["x", "offset", "weight", "bias", "mask"]
    # Why show the placeholder: it exports, which looks like success, but it drops mask and bias
    # and names an op no runtime has.
    register_custom_op_symbolic("torchvision::deform_conv2d", deform_conv2d_placeholder, 19)
    placeholder = out / "failures" / "deform_conv2d_placeholder.onnx"
    torch.onnx.export(model, inputs, placeholder, dynamo=False, opset_version=19, input_names=names)
    kept = [i.name for i in check_and_show(placeholder).graph.input]
    assert kept == ["x", "offset", "weight"], kept
    print(f"  the placeholder model's inputs are {kept}: bias and mask are gone")
    feeds = {name: t.numpy() for name, t in zip(names, inputs, strict=True) if name in kept}
    reproduce(
        "ORT on the placeholder op",
        lambda: run_ort(placeholder, feeds),
        "custom:deform_conv2d(-1) is not a registered function/op",
    )

    register_custom_op_symbolic("torchvision::deform_conv2d", deform_conv2d_symbolic, 19)
    path = out / "deform_conv2d.onnx"
    torch.onnx.export(model, inputs, path, dynamo=False, opset_version=19, input_names=names)
    check_and_show(path)
    (actual,) = run_ort(path, input_feeds(path, inputs))
    # Float32 sums of bilinear samples: allow last-bit differences in summation order.
    compare(actual, model(*inputs), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# 7. The torch.export-based exporter (dynamo=True)
# ---------------------------------------------------------------------------------------------


def register_threshold_schema() -> None:
    # Why: onnxscript looks the op up in ONNX's schema registry; without this the translation fails
    # with "No schema registered for 'cstThreshold' version '1' and domain 'rknn_cst'".
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
    onnx.defs.register_schema(schema)


rknn_cst = onnxscript.values.Opset("rknn_cst", 1)


def threshold_translation(x, threshold: float, value: float):
    return rknn_cst.cstThreshold(x, threshold=threshold, value=value)


def step7_dynamo(out: pathlib.Path) -> None:
    print("\n== 7. The torch.export-based exporter (dynamo=True) ==")
    x = torch.randn(1, 3, 10, 10)

    # Why first: this is the source's export call as written, and since torch 2.9 it means dynamo=True.
    # threshold_typed is still registered from step 1, yet no cstThreshold node appears, nothing warns
    # about it, and opset 12 cannot be reached (expect a logged traceback from the version converter).
    print("\n-- the source's call, as written: torch.onnx.export(m, (x,), path, opset_version=12)")
    model = ThresholdModel().eval()
    path = out / "threshold_source_as_written.onnx"
    torch.onnx.export(model, (x,), path, opset_version=12)
    exported = check_and_show(path)
    ops, opset = [n.op_type for n in exported.graph.node], opsets_of(exported)[""]
    assert "cstThreshold" not in ops and opset != 12, (ops, opset)
    print(f"  SILENTLY IGNORED: the symbolic was not used; ops {ops}, opset {opset} instead of 12")
    (actual,) = run_ort(path, input_feeds(path, (x,)))
    compare(actual, model(x), rtol=0, atol=0)
    deform_inputs = deform_conv_inputs()
    # Why: the three ops that failed above export here with nothing registered.
    for name, model, inputs, rtol, atol in [
        ("threshold", ThresholdModel(), (x,), 0, 0),
        ("asinh", AsinhModel(), (x * 4,), 1e-5, 1e-6),
        ("deform_conv2d", DeformConvModel(), deform_inputs, 1e-5, 1e-5),  # as in step 6
    ]:
        print(f"\n-- {name}")
        path = out / f"{name}_dynamo.onnx"
        # aten::threshold still has threshold_typed registered from step 1: dynamo=True ignores it.
        torch.onnx.export(model.eval(), inputs, dynamo=True, verbose=False).save(path)
        exported = check_and_show(path)
        print(f"  ops: {[n.op_type for n in exported.graph.node]}, opset {opsets_of(exported)['']}")
        (actual,) = run_ort(path, input_feeds(path, inputs))
        compare(actual, model(*inputs), rtol=rtol, atol=atol)
    threshold_ops = [n.op_type for n in onnx.load(str(out / "threshold_dynamo.onnx")).graph.node]
    assert "cstThreshold" not in threshold_ops, threshold_ops
    print("\n  register_custom_op_symbolic had no effect under dynamo=True: no cstThreshold node")

    # Why: to keep the custom node, the new exporter takes a translation per torch op instead.
    print("\n-- threshold -> rknn_cst::cstThreshold with custom_translation_table")
    model = ThresholdModel().eval()
    table = {torch.ops.aten.threshold.default: threshold_translation}
    reproduce(
        "the translation before the schema is registered",
        lambda: torch.onnx.export(model, (x,), dynamo=True, verbose=False, custom_translation_table=table),
        "No schema registered for 'cstThreshold' version '1' and domain 'rknn_cst'",
    )
    register_threshold_schema()
    onnx_program = torch.onnx.export(
        model,
        (x,),
        dynamo=True,
        verbose=False,
        custom_translation_table={torch.ops.aten.threshold.default: threshold_translation},
    )
    path = out / "threshold_custom_dynamo.onnx"
    onnx_program.save(path)
    check_and_show(path)
    (actual,) = run_ort(path, input_feeds(path, (x,)), custom_ops=True)
    compare(actual, model(x), rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=HERE / "output", help="where models are written")
    args = parser.parse_args(argv)
    if TORCHSCRIPT_EXPORTER_MISSING:
        print(f"SKIP: this torch has no TorchScript-based ONNX exporter ({TORCHSCRIPT_EXPORTER_MISSING})")
        return SKIP
    out = args.out.resolve()
    (out / "failures").mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    # ORT logs each failed session to stderr before raising; the exceptions are printed anyway.
    ort.set_default_logger_severity(4)
    # Each dynamo=False export and registration warns that the TorchScript exporter is deprecated.
    # That is known and stated in the README; keep the output readable.
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.onnx")
    warnings.filterwarnings("ignore", message=".*legacy TorchScript-based ONNX export.*")
    warnings.filterwarnings("ignore", message="The feature will be removed.*")
    try:
        step1_custom_domain_node(out)
        step2_standard_ops(out)
        step3_override_builtin(out)
        step4_asinh(out)
        step5_operator_export_type(out)
        step6_deform_conv2d(out)
        step7_dynamo(out)
    except AssertionError as exc:
        print(f"\nFAIL: {exc}")
        return 1
    print(f"\nPASS: every model in {out} checked and matched PyTorch in ONNX Runtime")
    return 0


if __name__ == "__main__":
    sys.exit(main())
