"""Deploy the rknn_cst custom nodes with RKNN-Toolkit2: convert them, run them in its simulator.

Run: python test.py [--out DIR] [-v] [--seed N]

Steps 1-3 run here, in the main environment: they export the models with dynamo=True (the
default), then with dynamo=False, each with its inputs and PyTorch's outputs beside it as .npy files. Steps 4-9 need
RKNN-Toolkit2, whose pins (torch<=2.4.0, numpy<=1.26.4, onnx<=1.18.0) cannot share it: test.py
starts itself again under $RKNN_PYTHON, else ../.venv-rknn/bin/python, with a hidden flag, and
folds that half's step statuses into DIR/steps.json; without that interpreter they are skipped
(exit 77) with the command that creates it.
Every python block of README.md is in this file; the lines around them are the checks.
"""

import contextlib
import json
import pathlib
import re
import subprocess
import sys
import textwrap
import time

RKNN_HALF = "--rknn-half"  # hidden: the first half starts this file again with it, in RKNN's venv
IN_RKNN = RKNN_HALF in sys.argv[1:]

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # the repository's harness.py
import harness  # the runner: the command line, the steps, the checks (harness.py)
from page_helpers import (  # the page's helpers, written once
    check_with_schemas,
    expect_error,
    ortx_options,
    ortx_session,
    run_ort_torch,
)

# Each page script's imports, word for word (a pasted script starts with them) -----------------

if IN_RKNN:  # the second script's (README: "In the RKNN environment")
    # region rknn_imports
    import contextlib
    import glob
    import os
    import re

    import numpy as np
    from rknn.api import RKNN
    from rknn.api.custom_op import get_node_attr
    # endregion
    # expect_error: page_helpers', imported above (this page's second script pastes it too)
else:  # the first script's (the main environment)
    # region imports
    import contextlib  # for expect_error (step 2)
    import os
    import re

    import numpy as np
    import onnx
    import onnxruntime as ort
    import onnxscript
    import torch
    import torchvision
    from torch.onnx import register_custom_op_symbolic
    from torch.onnx.symbolic_helper import parse_args
    try:  # public from torch 2.10; torch 2.6 to 2.9 have it under a private name
        from torch.onnx.testing import assert_onnx_program
    except ImportError:
        try:
            from torch.onnx._internal.exporter._testing import assert_onnx_program
        except ImportError:  # torch < 2.6: no dynamo=True step of this page runs
            assert_onnx_program = None

    try:  # step 2 runs the custom nodes in ONNX Runtime with it
        from onnxruntime_extensions import PyCustomOpDef, get_library_path, onnx_op
    except ImportError:  # pip install onnxruntime-extensions
        onnx_op = None
    # endregion
    # the symbolics other folders teach (lesson_code.py; on the page in step 3)
    from lesson_code import deform_conv2d_symbolic, dual_residual_symbolic


MODELS: list = []  # step 1's inputs and models, for steps 2 and 3
CUSTOM_OP = "torch.library.custom_op came with torch 2.4"  # step 1's cst::dual_residual

# 1. The models ----------------------------------------------------------------------------------


# region save_case
def save_case(path, model, inputs):
    """Save the inputs and PyTorch's outputs beside the model, NAME_input_I.npy and
    NAME_output_I.npy: what the RKNN half checks the converted model against."""
    stem = os.path.splitext(path)[0]
    with torch.no_grad():
        outputs = model(*inputs)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    for i, tensor in enumerate(inputs):
        np.save(f"{stem}_input_{i}.npy", tensor.numpy())
    for i, tensor in enumerate(outputs):
        np.save(f"{stem}_output_{i}.npy", tensor.numpy())


def print_nodes(path):
    """One line per file: its nodes (domain.op_type), its opset imports in the file's order."""
    model = onnx.load(path)
    nodes = [f"{n.domain}.{n.op_type}" if n.domain else n.op_type for n in model.graph.node]
    opsets = [f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import]
    print(f"  {path}: {' '.join(nodes)} | opsets {', '.join(opsets)}")
# endregion


@harness.needs_torch("2.4", CUSTOM_OP)
def step1_models():
    """The models (PyTorch)"""

    # region dual_residual_op
    # cst::dual_residual as a custom op in Python: no C++ to build (register_pytorch_op/ has C++).
    @torch.library.custom_op("cst::dual_residual", mutates_args=())
    def dual_residual_op(
        x: torch.Tensor, y: torch.Tensor, alpha: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return x * alpha - y, y * alpha - x

    @dual_residual_op.register_fake  # the output shapes, for torch.export (dynamo=True)
    def _(x, y, alpha):
        return torch.empty_like(x), torch.empty_like(y)
    # endregion

    # region DualResidual
    class DualResidual(torch.nn.Module):
        def __init__(self, alpha):
            super().__init__()
            self.alpha = alpha

        def forward(self, x, y):
            return torch.ops.cst.dual_residual(x, y, self.alpha)
    # endregion

    # region ConvThresholdConv
    class ConvThresholdConv(torch.nn.Module):
        """The custom node between two layers the NPU runs. value == threshold: no jump (step 6)."""

        def __init__(self):
            super().__init__()
            self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.threshold = torch.nn.Threshold(0.1, 0.1)
            self.conv2 = torch.nn.Conv2d(8, 3, 3, padding=1)

        def forward(self, x):
            return self.conv2(self.threshold(self.conv1(x)))

    class DeformConvNet(torch.nn.Module):
        """A deformable convolution, its sampling offsets from a convolution: ONNX DeformConv."""

        def __init__(self):
            super().__init__()
            self.offset = torch.nn.Conv2d(3, 18, 3, padding=1)  # an (x, y) offset per 3x3 tap
            self.deform = torchvision.ops.DeformConv2d(3, 4, 3, padding=1)

        def forward(self, x):
            return self.deform(x, self.offset(x))
    # endregion

    # region step1
    torch.manual_seed(0)
    x, y = torch.randn(1, 3, 10, 10), torch.randn(1, 3, 10, 10)  # NCHW, as RKNN's inference takes
    threshold_model = torch.nn.Threshold(0.1, 20.0).eval()  # y = 20 if x <= 0.1 else x
    dual_residual_model = DualResidual(alpha=0.5).eval()
    conv_model = ConvThresholdConv().eval()
    deform_model = DeformConvNet().eval()
    torch.library.opcheck(dual_residual_op, (x, y, 0.5))  # the fake kernel against the real op

    # Threshold after an identity 1x1 convolution, and an input right above the threshold (step 6).
    edge_model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 3, 1, bias=False), torch.nn.Threshold(0.1, 20.0)
    ).eval()
    torch.nn.init.dirac_(edge_model[0].weight)  # the identity: the convolution returns its input
    edge = torch.full((1, 3, 10, 10), 0.100004)  # > 0.1 in float32; float16 rounds it to 0.09998
    os.makedirs("failures", exist_ok=True)  # for the files that show a failure (steps 2 and 3)
    # endregion

    if harness.OPTIONS.seed:  # --seed N: the block's draws (x, y, then the weights) from seed N
        torch.manual_seed(harness.OPTIONS.seed)
        x, y = torch.randn(1, 3, 10, 10), torch.randn(1, 3, 10, 10)
        conv_model, deform_model = ConvThresholdConv().eval(), DeformConvNet().eval()
        print(f"  --seed {harness.OPTIONS.seed}: x, y and the weights drawn from that seed")
    torch.testing.assert_close(dual_residual_model(x, y), (x * 0.5 - y, y * 0.5 - x))
    torch.testing.assert_close(edge_model(edge), edge)
    schema = torch.ops.cst.dual_residual.default._schema
    print(f"  {schema} (torch.library.custom_op; opcheck passed)")
    print("  threshold_model, dual_residual_model, conv_model, deform_model; x, y: [1, 3, 10, 10]")
    MODELS[:] = [x, y, threshold_model, dual_residual_model, conv_model, deform_model, edge_model]
    MODELS.append(edge)


# 2. Export with dynamo=True, the way RKNN can read it -------------------------------------------


# region rknn_schema
def rknn_schema(op_type, inputs, outputs, attributes):
    """A local schema of a rknn_cst op (float tensors in and out, float attributes): what
    onnxscript needs to write the node. Never registered with ONNX: nothing global changes."""
    return onnx.defs.OpSchema(
        op_type, "rknn_cst", 1,
        inputs=[onnx.defs.OpSchema.FormalParameter(name, "T") for name in inputs],
        outputs=[onnx.defs.OpSchema.FormalParameter(name, "T") for name in outputs],
        type_constraints=[("T", ["tensor(float)"], "float32 tensors")],
        attributes=[
            onnx.defs.OpSchema.Attribute(name, onnx.defs.OpSchema.AttrType.FLOAT, name)
            for name in attributes
        ],
    )
# endregion


# region default_domain_first
def default_domain_first(path):
    """RKNN-Toolkit2 2.5.0 takes the first opset import for the model's: standard one first."""
    model = onnx.load(path)
    ordered = sorted(model.opset_import, key=lambda opset: opset.domain != "")  # "": standard
    del model.opset_import[:]
    model.opset_import.extend(ordered)
    onnx.save(model, path)
# endregion


# region check_half
def rknn_schemas():
    """Both rknn_cst ops' local schemas, for the full checker (check_with_schemas)."""
    return [
        rknn_schema("cstThreshold", ["X"], ["Y"], ["threshold", "value"]),
        rknn_schema("cstDualResidual", ["X", "Y"], ["X_res", "Y_res"], ["alpha"]),
    ]


def check_half(path, model, inputs):
    """A float16 or bfloat16 model: the full checker with the rknn_cst schemas, then ONNX
    Runtime (the float32 kernels between the Casts) against PyTorch in that dtype: equal."""
    check_with_schemas(path, *rknn_schemas())
    if onnx_op is None:  # pip install onnxruntime-extensions: the kernels run the model
        return
    actual = run_ort_torch(path, list(inputs), ortx_options())
    with torch.no_grad():
        expected = model(*inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for out, reference in zip(actual, expected, strict=True):
        assert out.dtype == reference.dtype and torch.equal(out, reference), path
    nodes = " ".join(n.op_type for n in onnx.load(path).graph.node)
    print(f"  {path}: {nodes}; equal to PyTorch's")
    if reference.dtype == torch.float16:  # NumPy has float16 (not bfloat16): step 9 reads these
        save_case(path, model, inputs)
# endregion


@harness.needs_torch("2.6", harness.TABLE)
def step2_export_dynamo():
    """Export with dynamo=True (the torch.export-based exporter), the way RKNN can read it"""
    x, y, threshold_model, dual_residual_model, conv_model, deform_model, edge_model, edge = MODELS
    if onnx_op is None:
        raise harness.Skip(harness.ortx_problem())

    # region threshold_translation
    rknn_cst = onnxscript.values.Opset("rknn_cst", 1)
    cst_threshold = onnxscript.values.Op(
        rknn_cst, "cstThreshold", rknn_schema("cstThreshold", ["X"], ["Y"], ["threshold", "value"])
    )
    cst_dual_residual = onnxscript.values.Op(
        rknn_cst,
        "cstDualResidual",
        rknn_schema("cstDualResidual", ["X", "Y"], ["X_res", "Y_res"], ["alpha"]),
    )

    def threshold_translation(self, threshold: float, value: float):
        # `self`, as in the ATen schema threshold(Tensor self, ...): torch 2.8 matches by name.
        return cst_threshold(self, threshold=threshold, value=value)

    def dual_residual_translation(x, y, alpha: float):
        return cst_dual_residual(x, y, alpha=alpha)

    translations = {
        torch.ops.aten.threshold.default: threshold_translation,
        torch.ops.cst.dual_residual.default: dual_residual_translation,
    }
    # endregion

    # region step2
    # Without opset_version: torch >= 2.9 writes opset 20, which RKNN-Toolkit2 2.5.0 refuses.
    onnx_program = torch.onnx.export(
        conv_model, (x,), dynamo=True, verbose=False, custom_translation_table=translations
    )
    # endregion
    if harness.TORCH < (2, 9):  # the default was 18, which RKNN reads: write step 8's file at 20
        harness.differs("dynamo=True writes opset 18 by default (20 from 2.9): the trap file is 20")
        assert harness.opsets_of(onnx_program.model_proto)[""] == 18
        onnx_program = torch.onnx.export(  # as torch >= 2.9 writes it by default
            conv_model, (x,), dynamo=True, opset_version=20, verbose=False,
            custom_translation_table=translations,
        )
    # region step2-2
    onnx_program.save("failures/conv_threshold_opset20.onnx")
    print_nodes("failures/conv_threshold_opset20.onnx")
    # With opset 19 alone: rknn_cst is listed first, and RKNN's build() fails (step 8).
    onnx_program = torch.onnx.export(
        threshold_model, (x,), dynamo=True, opset_version=19, verbose=False,
        custom_translation_table=translations,
    )
    onnx_program.save("failures/threshold_custom_domain_first.onnx")
    print_nodes("failures/threshold_custom_domain_first.onnx")
    # endregion
    assert harness.opsets_of(onnx.load("failures/conv_threshold_opset20.onnx"))[""] == 20
    assert first_opset("failures/threshold_custom_domain_first.onnx") == ("rknn_cst", 1)

    # region step2-3
    # The fix: opset_version=19, and the standard domain first in the saved file.
    for path, model, inputs in [
        ("threshold_dynamo.onnx", threshold_model, (x,)),
        ("dual_residual_dynamo.onnx", dual_residual_model, (x, y)),
        ("conv_threshold_dynamo.onnx", conv_model, (x,)),
        ("deform_conv_dynamo.onnx", deform_model, (x,)),  # torch.export knows deform_conv2d
    ]:
        onnx_program = torch.onnx.export(
            model, inputs, dynamo=True, opset_version=19, verbose=False,
            custom_translation_table=translations,
        )
        onnx_program.initialize_inference_session(ortx_session)
        assert_onnx_program(onnx_program, rtol=1.3e-6, atol=1e-5)  # ONNX Runtime vs PyTorch
        onnx_program.save(path)
        default_domain_first(path)
        save_case(path, model, inputs)
        print_nodes(path)
    # endregion

    check_models("_dynamo")
    assert node_attributes("threshold_dynamo.onnx") == {"threshold": 0.1, "value": 20.0}
    assert node_attributes("dual_residual_dynamo.onnx") == {"alpha": 0.5}
    assert not onnx.defs.has("cstThreshold", "rknn_cst"), "a schema leaked into ONNX's registry"
    print("  each matched PyTorch in ONNX Runtime; no rknn_cst schema registered with ONNX")

    # region step2-4
    # A float16 model through the float-only translations: written without a word, then refused.
    path = "failures/threshold_float16_dynamo.onnx"
    x16 = x.to(torch.float16)
    onnx_program = torch.onnx.export(
        threshold_model, (x16,), dynamo=True, opset_version=19, verbose=False,
        custom_translation_table=translations,
    )
    onnx_program.save(path)
    default_domain_first(path)
    save_case(path, threshold_model, (x16,))  # for step 9: RKNN reads it all the same
    with expect_error("Type 'tensor(float16)' of input parameter (input)"):
        ortx_session(path)
    with expect_error("has unsupported type: tensor(float16)"):
        check_with_schemas(path, *rknn_schemas())  # right after the export: caught there
    # endregion
    assert harness.op_types(path) == ["rknn_cst.cstThreshold"], harness.op_types(path)

    # region threshold_half
    # The kernels take float32 only (onnxruntime-extensions' Python kernels have no float16 or
    # bfloat16), so a half model casts around each rknn_cst node.
    op = onnxscript.opset19  # the standard domain, at the opset the models import
    FLOAT = onnxscript.FLOAT.dtype

    def threshold_cast_translation(self, threshold: float, value: float):
        y = cst_threshold(op.Cast(self, to=FLOAT), threshold=threshold, value=value)
        return op.CastLike(y, self)  # back to the model's dtype (the exporter makes it a Cast)

    def dual_residual_cast_translation(x, y, alpha: float):
        x_res, y_res = cst_dual_residual(op.Cast(x, to=FLOAT), op.Cast(y, to=FLOAT), alpha=alpha)
        return op.CastLike(x_res, x), op.CastLike(y_res, y)

    half_translations = {
        torch.ops.aten.threshold.default: threshold_cast_translation,
        torch.ops.cst.dual_residual.default: dual_residual_cast_translation,
    }
    # endregion

    # region step2-5
    for dtype in (torch.float16, torch.bfloat16):
        x_half, y_half = x.to(dtype), y.to(dtype)
        x_half[0, 0, 0, 0] = 0.1  # 0.09998 in float16, 0.1001 in bfloat16: one each side of 0.1
        for name, model, inputs in [
            ("threshold", threshold_model, (x_half,)),
            ("dual_residual", dual_residual_model, (x_half, y_half)),
        ]:
            path = f"{name}_{str(dtype)[6:]}_dynamo.onnx"
            onnx_program = torch.onnx.export(
                model, inputs, dynamo=True, opset_version=19, verbose=False,
                custom_translation_table=half_translations,
            )
            onnx_program.save(path)
            default_domain_first(path)
            check_half(path, model, inputs)
    # endregion
    back = "Cast" if harness.TORCH >= (2, 7) else "CastLike"  # 2.6: export(optimize=False)
    for name in KEPT[2][4:]:
        casts = ["Cast", "rknn_cst.cstThreshold", back] if name.startswith("threshold") else [
            "Cast", "Cast", "rknn_cst.cstDualResidual", back, back]
        assert harness.op_types(name) == casts, (name, harness.op_types(name))
        assert first_opset(name) == ("", 19), (name, first_opset(name))
    assert not onnx.defs.has("cstThreshold", "rknn_cst"), "a schema leaked into ONNX's registry"


# 3. dynamo=False: the same nodes from symbolic functions ----------------------------------------


@harness.needs_torch("2.4", "step 1's models: " + CUSTOM_OP)
def step3_export_torchscript():
    """dynamo=False (the TorchScript-based exporter): the same nodes from symbolic functions"""
    x, y, threshold_model, dual_residual_model, conv_model, deform_model, edge_model, edge = MODELS

    # region threshold_symbolic
    @parse_args("v", "f", "f")
    def threshold_symbolic(g, x, threshold, value):
        # As in register_onnx_symbolic/: one node, the scalars as FLOAT attributes, typed output.
        out = g.op("rknn_cst::cstThreshold", x, threshold_f=threshold, value_f=value)
        out.setType(x.type())
        return out

    register_custom_op_symbolic("aten::threshold", threshold_symbolic, 12)
    register_custom_op_symbolic("cst::dual_residual", dual_residual_symbolic, 12)
    register_custom_op_symbolic("torchvision::deform_conv2d", deform_conv2d_symbolic, 19)
    # endregion

    with harness.quiet() as held:  # the exporter's C++ warnings, if any (shown with -v)
        # region step3
        # opset 19: ONNX has DeformConv since 19, and RKNN-Toolkit2 2.5.0 reads up to 19.
        for path, model, inputs in [
            ("threshold.onnx", threshold_model, (x,)),
            ("dual_residual.onnx", dual_residual_model, (x, y)),
            ("conv_threshold.onnx", conv_model, (x,)),
            ("deform_conv.onnx", deform_model, (x,)),
        ]:
            torch.onnx.export(model, inputs, path, dynamo=False, opset_version=19)
            save_case(path, model, inputs)
            print_nodes(path)

        path = "failures/identity_conv_threshold.onnx"
        torch.onnx.export(edge_model, (edge,), path, dynamo=False, opset_version=19)
        save_case(path, edge_model, (edge,))
        print_nodes(path)
        # endregion

    # custom_opsets (deprecated) is left out: rknn_cst is imported at version 1 without it, and
    # deform_conv.onnx (no rknn_cst node) draws no "Custom opset domain ... not used" warning.
    assert "Custom opset domain" not in held[0], held[0]
    for name in ("threshold.onnx", "dual_residual.onnx", "conv_threshold.onnx", path):
        assert harness.opsets_of(onnx.load(name)) == {"": 19, "rknn_cst": 1}, name
    assert harness.opsets_of(onnx.load("deform_conv.onnx")) == {"": 19}
    check_models("")
    assert harness.op_types(path) == ["Conv", "rknn_cst.cstThreshold"], path
    assert node_attributes("threshold.onnx") == {"threshold": 0.1, "value": 20.0}
    assert node_attributes("dual_residual.onnx") == {"alpha": 0.5}
    assert node_attributes("conv_threshold.onnx") == {"threshold": 0.1, "value": 0.1}
    print("  each passes onnx.checker; rknn_cst imported at version 1 with no custom_opsets")

    # region threshold_cast_symbolic
    @parse_args("v", "f", "f")
    def threshold_cast_symbolic(g, x, threshold, value):  # step 2's Casts, for dynamo=False
        x32 = g.op("Cast", x, to_i=onnx.TensorProto.FLOAT)
        y = g.op("rknn_cst::cstThreshold", x32, threshold_f=threshold, value_f=value)
        y.setType(x.type().with_dtype(torch.float32))
        return g.op("CastLike", y, x)  # ONNX has CastLike from opset 15

    @parse_args("v", "v", "f")
    def dual_residual_cast_symbolic(g, x, y, alpha):
        x32 = g.op("Cast", x, to_i=onnx.TensorProto.FLOAT)
        y32 = g.op("Cast", y, to_i=onnx.TensorProto.FLOAT)
        out_x, out_y = g.op("rknn_cst::cstDualResidual", x32, y32, alpha_f=alpha, outputs=2)
        out_x.setType(x.type().with_dtype(torch.float32))
        out_y.setType(y.type().with_dtype(torch.float32))
        return g.op("CastLike", out_x, x), g.op("CastLike", out_y, y)

    # For opsets 15 and later (these exports' 19): they replace the symbolics above.
    register_custom_op_symbolic("aten::threshold", threshold_cast_symbolic, 15)
    register_custom_op_symbolic("cst::dual_residual", dual_residual_cast_symbolic, 15)
    # endregion

    with harness.quiet():  # the exporter's C++ warnings, if any (shown with -v)
        # region step3-2
        for dtype in (torch.float16, torch.bfloat16):
            x_half, y_half = x.to(dtype), y.to(dtype)
            x_half[0, 0, 0, 0] = 0.1  # as in step 2
            for name, model, inputs in [
                ("threshold", threshold_model, (x_half,)),
                ("dual_residual", dual_residual_model, (x_half, y_half)),
            ]:
                path = f"{name}_{str(dtype)[6:]}.onnx"
                torch.onnx.export(model, inputs, path, dynamo=False, opset_version=19)
                check_half(path, model, inputs)
        # endregion
    for name in KEPT[3][4:]:
        casts = ["Cast", "rknn_cst.cstThreshold", "CastLike"] if name.startswith("threshold") else [
            "Cast", "Cast", "rknn_cst.cstDualResidual", "CastLike", "CastLike"]
        assert harness.op_types(name) == casts, (name, harness.op_types(name))
        assert harness.opsets_of(onnx.load(name)) == {"": 19, "rknn_cst": 1}, name


# In the RKNN environment (rknn-toolkit2 2.5.0, torch 2.4.0): steps 4-9, a second process ====


# region cstThreshold
class cstThreshold:  # noqa: N801 - named as the vendor names them (RKNN matches by op_type)
    """The simulator's kernel for rknn_cst::cstThreshold: torch's rule, NaN included."""

    op_type = "cstThreshold"  # the node's op_type

    def shape_infer(self, node, in_shapes, in_dtypes):
        return in_shapes.copy(), in_dtypes.copy()  # one output, shaped and typed like the input

    def compute(self, node, inputs):
        x = inputs[0]
        threshold = get_node_attr(node, "threshold")  # the node's attributes, as exported
        value = get_node_attr(node, "value")
        # x <= threshold gives value, else x (NaN stays NaN). The simulator hands float32; a
        # float16 x is compared in float32 too, as PyTorch's CPU kernel does.
        below = x.astype(np.float32) <= np.float32(threshold)
        return [np.where(below, value, x).astype(x.dtype)]
# endregion


# region cstDualResidual
class cstDualResidual:  # noqa: N801
    """The simulator's kernel for rknn_cst::cstDualResidual: two inputs, two outputs."""

    op_type = "cstDualResidual"

    def shape_infer(self, node, in_shapes, in_dtypes):
        return in_shapes.copy(), in_dtypes.copy()  # two outputs, shaped like the inputs

    def compute(self, node, inputs):
        x, y = inputs
        alpha = get_node_attr(node, "alpha")
        return [x * alpha - y, y * alpha - x]
# endregion


# region to_rknn
def to_rknn(path, verbose=False):
    """The vendor's steps: config, load_onnx, build in float16, export_rknn, init_runtime."""
    rknn = RKNN(verbose=verbose)
    rknn.config(target_platform="rk3588")  # the chip the .rknn file is built for
    assert rknn.load_onnx(model=path) == 0
    assert rknn.build(do_quantization=False) == 0  # float16; int8 would need calibration data
    assert rknn.export_rknn(os.path.splitext(path)[0] + ".rknn") == 0  # what a board loads
    assert rknn.init_runtime() == 0  # no target: the simulator, on this PC
    return rknn
# endregion


# region check_against_pytorch
def check_against_pytorch(rknn, path, elementwise=False):
    """Run the saved inputs; compare each output with PyTorch's within 4 float16 steps at the
    largest output, and print the cosine similarity. elementwise=True (each output element from
    one element of each input): also each element within one float16 step of its own value."""
    stem = os.path.splitext(path)[0]
    inputs = [np.load(name) for name in sorted(glob.glob(stem + "_input_*.npy"))]
    outputs = rknn.inference(inputs=inputs, data_format="nchw")
    assert len(outputs) == len(glob.glob(stem + "_output_*.npy")), path
    results = []
    for i, actual in enumerate(outputs):
        expected = np.load(f"{stem}_output_{i}.npy")
        atol = 2**-8 * float(np.abs(expected).max())  # 4 float16 steps at the largest output
        np.testing.assert_allclose(actual, expected, rtol=0, atol=atol, err_msg=f"{path} {i}")
        error = np.abs(actual - expected)
        norms = np.linalg.norm(actual) * np.linalg.norm(expected)
        cosine = float(np.dot(actual.ravel(), expected.ravel()) / norms)
        line = f"  {path} output {i}: max abs diff {error.max():.1e} <= {atol:.1e}"
        print(f"{line}, cosine similarity {cosine:.5f}")
        diff = float(error.max())
        results.append(dict(output=i, max_abs_diff=diff, atol=atol, cosine=cosine))
        if elementwise:  # one float16 step at each element's own value, not at the largest
            step = 2**-10 * np.abs(expected) + 2**-24
            np.testing.assert_array_less(error, step, err_msg=f"{path} {i}, per element")
            worst = float(np.max(error / step))
            rule = "each element within 2**-10 * |expected| + 2**-24"
            print(f"  {path} output {i}: {rule}, at most {worst:.2f} of it")
            results[-1]["per_element"] = worst
    return results
# endregion


# region cstThresholdZeros
class cstThresholdZeros(cstThreshold):  # noqa: N801
    def compute(self, node, inputs):  # another kernel for the same op_type, e.g. a "fixed" one
        return [np.zeros_like(inputs[0])]
# endregion


def step4_before_the_first_build():
    """Three errors before the first build"""
    needs_step_3()
    with rknn_log():
        # region step4
        rknn = RKNN()
        with expect_error("Please call rknn.config first!"):
            rknn.load_onnx(model="threshold.onnx")  # config() comes first
        with expect_error("The 'target_platform' has not been set yet"):
            rknn.config()  # a .rknn file is built for one chip: config() refuses to guess
        rknn.config(target_platform="rk3588")
        assert rknn.load_onnx(model="threshold.onnx") == 0  # the node is only a name so far
        with expect_error("No opset import for domain 'rknn_cst'"):
            rknn.build(do_quantization=False)  # no class registered for cstThreshold
        rknn.release()
        # endregion


def step5_register():
    """A Python class per custom op: reg_custom_op"""
    with rknn_log():
        # region step5
        # A registration lasts for the process and every RKNN object in it: register once.
        registry = RKNN()
        for op in (cstThreshold(), cstDualResidual()):
            assert registry.reg_custom_op(op) == 0, op.op_type
        registry.release()
        # endregion
    print("  registered for this process: cstThreshold, cstDualResidual")


def step6_convert_and_compare():
    """Convert, run in the simulator, compare with PyTorch"""
    needs_step_3()
    with rknn_log():
        # region step6
        results = {}
        for path in [
            "threshold_dynamo.onnx", "threshold.onnx",
            "dual_residual_dynamo.onnx", "dual_residual.onnx",
            "conv_threshold_dynamo.onnx", "conv_threshold.onnx",
            "deform_conv_dynamo.onnx", "deform_conv.onnx",
        ]:
            if not os.path.exists(path):  # torch < 2.6 writes no dynamo=True models (step 2)
                continue
            rknn = to_rknn(path)
            elementwise = path.startswith(("threshold", "dual_residual"))  # element for element
            results[path] = check_against_pytorch(rknn, path, elementwise)
            rknn.release()
        # endregion
    RESULTS["comparisons"] = results
    expected = [name for step in (2, 3) if exported_by_step(step) for name in KEPT[step][:4]]
    assert sorted(results) == sorted(expected), f"converted {sorted(results)}, not {expected}"
    if not exported_by_step(2):
        RESULTS["skipped"].append(f"step 6: {', '.join(KEPT[2])}: {first_half_step2()}")
        harness.differs(f"converted the four dynamo=False models only: {first_half_step2()}")

    with rknn_log():
        # region step6-2
        rknn = to_rknn("failures/identity_conv_threshold.onnx")
        (out,) = rknn.inference(
            inputs=[np.load("failures/identity_conv_threshold_input_0.npy")], data_format="nchw"
        )
        gives = f"PyTorch keeps x, RKNN gives {out.max():g}"
        print(f"  x = 0.100004 > 0.1: {gives}: float16(x) = {np.float16(0.100004)}")
        rknn.release()
        # endregion
    expected = np.load("failures/identity_conv_threshold_output_0.npy")
    assert np.all(out == 20.0) and np.allclose(expected, 0.100004), (out.max(), expected.max())
    RESULTS["edge"] = float(out.max())


def step7_what_runs_where():
    """What runs where: NPU, CPU, and what a board needs"""
    needs_step_3()
    with rknn_log(echo=False) as conv_log:
        # region step7
        to_rknn("conv_threshold.onnx", verbose=True).release()
        # endregion
    with rknn_log(echo=False) as deform_log:
        # region step7-2
        to_rknn("deform_conv.onnx", verbose=True).release()
        for dump in glob.glob("check*_base_optimize.*"):  # verbose=True also writes these here
            os.remove(dump)
        # endregion

    c_api = "it will be treated as a custom operator. Please call rknn_register_custom_ops in the"
    warning = next(line for line in conv_log[0].splitlines() if "type = cstThreshold" in line)
    assert c_api in warning, "the build did not say that a board needs the op in the C API"
    print("  conv_threshold.onnx build:", warning.split("] ", 1)[-1].strip())
    conv_layers = layer_targets(conv_log[0])
    print("  conv_threshold.onnx layers:", " | ".join(f"{op} {at}" for op, at in conv_layers))
    assert conv_layers == [("Conv", "NPU"), ("cstThreshold", "CPU"), ("Conv", "NPU")], conv_layers

    deform_warning = next(line for line in deform_log[0].splitlines() if "= DeformConv" in line)
    assert c_api in deform_warning, "the build did not treat DeformConv as a custom operator"
    # search, not match a line: RKNN's E lines (stderr) can land inside a D line (stdout)
    unknown = re.search(r"E RKNN: \[[^\]]*\] Unkown op target: \d+", deform_log[0])
    assert unknown, "no 'E RKNN: ... Unkown op target' line"
    deform_text = deform_warning.split("] ", 1)[-1].split(", it will")[0]
    print(f"  deform_conv.onnx build: {deform_text} ...")
    unknown_text = unknown.group().split("] ", 1)[-1]
    print(f"  deform_conv.onnx build: {unknown_text} (an E line, yet build() returned 0)")
    deform_layers = layer_targets(deform_log[0])
    print("  deform_conv.onnx layers:", " | ".join(f"{op} {at}" for op, at in deform_layers))
    assert ("DeformConv", "CPU") in deform_layers, deform_layers
    RESULTS["evidence"].update(
        c_api_warning=warning,
        conv_threshold_layers=conv_layers,
        deform_conv_layers=deform_layers,
        deform_conv_unknown_target=unknown.group(),
    )


def step8_traps():
    """Four traps"""
    needs_step_3()
    with rknn_log() as log:
        # region step8
        rknn = RKNN()
        assert rknn.reg_custom_op(cstThresholdZeros()) == 0  # returns 0, yet RKNN ignores it
        rknn.release()
        # endregion
    ignored = "The op_type = 'cstThreshold' is invalid, Ignore this call!"
    assert ignored in log[0], "no warning for the second registration"
    second_line = "If you only need to overwrite the runtime implementation of the existing ONNX OP"
    assert second_line in log[0], "the warning's second line changed"
    print(f"  a second class for cstThreshold: reg_custom_op returned 0 and logged {ignored!r}")
    with rknn_log():
        # region step8-2
        rknn = to_rknn("threshold.onnx")
        check_against_pytorch(rknn, "threshold.onnx")  # still matches: step 5's class, not zeros
        rknn.release()
        # endregion

    with rknn_log() as log:
        # region step8-3
        rknn = RKNN()
        assert rknn.load_rknn("threshold.rknn") == 0
        assert rknn.init_runtime() == -1  # no target: the simulator cannot run a loaded .rknn
        rknn.release()
        # endregion
    refused = "RKNN model that loaded by 'load_rknn' not support inference on the simulator"
    assert refused in log[0], "init_runtime did not say why it failed"
    print(f"  load_rknn, then init_runtime() returned -1: {refused}")
    RESULTS["evidence"].update(
        second_registration=ignored, second_line=second_line, load_rknn_on_simulator=refused
    )

    if not exported_by_step(2):  # the last two traps read step 2's failure files
        RESULTS["skipped"].append(f"step 8: {', '.join(FAILURES[:2])}: {first_half_step2()}")
        harness.differs(f"the two dynamo=True traps not run: {first_half_step2()}")
        return
    with rknn_log():
        # region step8-4
        # These two blocks read step 2's files: torch >= 2.6 (test.py leaves them out before 2.6).
        rknn = RKNN()
        rknn.config(target_platform="rk3588")
        with expect_error("Unsupport onnx opset 20, need <= 19!"):
            rknn.load_onnx(model="failures/conv_threshold_opset20.onnx")
        rknn.release()
        # endregion

        # region step8-5
        rknn = RKNN()
        rknn.config(target_platform="rk3588")
        assert rknn.load_onnx(model="failures/threshold_custom_domain_first.onnx") == 0
        with expect_error("IndexError: _Map_base::at"):
            rknn.build(do_quantization=False)
        rknn.release()
        # endregion



def step9_half_in_rknn():
    """A float16 or bfloat16 model in RKNN: what the kernel receives"""
    needs_step_3()
    with rknn_log() as log:
        # region step9
        # Step 5's class, watched: which dtype does RKNN hand its compute?
        compute = cstThreshold.compute
        seen = []

        def watched(self, node, inputs):
            seen.append(inputs[0].dtype.name)
            return compute(self, node, inputs)

        cstThreshold.compute = watched  # the registered object's class: RKNN calls this one
        received = {}
        for path in [
            "threshold.onnx",  # float32, for comparison
            "threshold_float16.onnx", "threshold_float16_dynamo.onnx",  # the Casts around it
            "failures/threshold_float16_dynamo.onnx",  # the node on float16 itself (step 2)
        ]:
            if not os.path.exists(path):  # torch < 2.6 writes no dynamo=True models (step 2)
                continue
            seen.clear()
            rknn = to_rknn(path)  # float16 models: load_onnx warns, then reads them as float32
            stem = os.path.splitext(path)[0]
            (out,) = rknn.inference(inputs=[np.load(stem + "_input_0.npy")], data_format="nchw")
            expected = np.load(stem + "_output_0.npy")  # PyTorch's, in the model's dtype
            assert np.array_equal(out, expected.astype(np.float16).astype(np.float32)), path
            rknn.release()
            received[path] = sorted(set(seen))
            print(f"  {path}: compute got {', '.join(received[path])}; out = float16(PyTorch's)")
        cstThreshold.compute = compute
        # endregion
    RESULTS["evidence"]["compute_dtypes"] = received
    warning = "some float16/float64 data types in the model have been modified to float32!"
    assert log[0].count(warning) == len(received) - 1, log[0].count(warning)
    assert set(map(tuple, received.values())) == {("float32",)}, received
    print("  load_onnx warned for each float16 file: ... have been modified to float32!")
    RESULTS["evidence"]["float16_warning"] = warning
    if not exported_by_step(2):
        RESULTS["skipped"].append(f"step 9: {', '.join(HALF_CONVERTED[1:])}: {first_half_step2()}")
        harness.differs(f"the two dynamo=True float16 files not run: {first_half_step2()}")

    with rknn_log():
        # region step9-2
        rknn = RKNN()
        rknn.config(target_platform="rk3588")
        assert rknn.load_onnx(model="threshold_bfloat16.onnx") == 0  # no warning for bfloat16
        with expect_error("expected: (tensor(bfloat16))"):
            rknn.build(do_quantization=False)
        rknn.release()
        # endregion


# ---------------------------------------------------------------------------------------------

STEPS = (step1_models, step2_export_dynamo, step3_export_torchscript)  # here; 4-9: RKNN_STEPS
RKNN_STEPS = (
    step4_before_the_first_build,
    step5_register,
    step6_convert_and_compare,
    step7_what_runs_where,
    step8_traps,
    step9_half_in_rknn,
)
HALF = ("threshold_float16", "dual_residual_float16", "threshold_bfloat16", "dual_residual_bfloat16")
KEPT = {  # what each step writes and claims valid; the first four are converted to .rknn (step 6)
    2: ("threshold_dynamo.onnx", "dual_residual_dynamo.onnx", "conv_threshold_dynamo.onnx",
        "deform_conv_dynamo.onnx", *(f"{name}_dynamo.onnx" for name in HALF)),
    3: ("threshold.onnx", "dual_residual.onnx", "conv_threshold.onnx", "deform_conv.onnx",
        *(f"{name}.onnx" for name in HALF)),
}
FAILURES = (  # step 2's two files that RKNN refuses (step 8), step 3's float16 edge (step 6),
    "failures/conv_threshold_opset20.onnx",  # step 2's float16 model without the Casts (step 9)
    "failures/threshold_custom_domain_first.onnx",
    "failures/identity_conv_threshold.onnx",
    "failures/threshold_float16_dynamo.onnx",
)
HALF_CONVERTED = (  # step 9's (each with its float16 case), and the bfloat16 one it cannot build
    "threshold_float16.onnx", "threshold_float16_dynamo.onnx", FAILURES[3],
)
CONVERTED = KEPT[2][:4] + KEPT[3][:4] + FAILURES[2:] + HALF_CONVERTED[:2]
SAVED = CONVERTED + ("dual_residual_float16.onnx", "dual_residual_float16_dynamo.onnx")
RESULTS_FILE = "rknn_results.json"  # the RKNN half's statuses and measurements (tests/ read it)
OTHER_FILES = (RESULTS_FILE, *(m.removesuffix(".onnx") + ".rknn" for m in CONVERTED)) + tuple(
    f"{m.removesuffix('.onnx')}_{kind}_{i}.npy"
    for m in SAVED
    for kind in ("input", "output")
    for i in range(2 if m.startswith("dual_residual") else 1)
)
# For ERRORS.md: part of each reproduced error -> (what raises it, its cause[, fixing step])
CAUSES = {
    "Please call rknn.config first!": (
        "RKNN-Toolkit2",
        "`load_onnx` before `config()`: RKNN needs the target and preprocessing settings first",
    ),
    "The 'target_platform' has not been set yet": (
        "RKNN-Toolkit2",
        "`config()` without `target_platform`: a `.rknn` file is built for one chip",
    ),
    "No opset import for domain 'rknn_cst'": (
        "RKNN-Toolkit2",
        "`build()` with a custom-domain node and no class registered for it with `reg_custom_op`",
        5,
    ),
    "Unsupport onnx opset 20, need <= 19!": (
        "RKNN-Toolkit2",
        "a `dynamo=True` model without `opset_version`: torch 2.9+ writes opset 20, "
        "RKNN-Toolkit2 2.5.0 reads up to 19",
        2,
    ),
    "IndexError: _Map_base::at": (
        "RKNN-Toolkit2",
        "a `dynamo=True` model that lists the custom domain before the default one in "
        "`opset_import`: RKNN's version converter fails",
        2,
    ),
    "Type 'tensor(float16)' of input parameter (input)": (
        "ONNX Runtime",
        "a float16 model exported through float-only translations: the exporter writes the "
        "custom node in float16 whatever the local schema says, and the kernel takes float32",
        2,
    ),
    "has unsupported type: tensor(float16)": (
        "onnx.checker",
        "the full checker with the local schemas registered (`check_with_schemas`) catches a "
        "custom node typed float16 where the schema lists float only, right after the export",
        2,
    ),
    "expected: (tensor(bfloat16))": (
        "RKNN-Toolkit2",
        "`build()` on a bfloat16 model: RKNN-Toolkit2 2.5.0 feeds float32 to the model's "
        "bfloat16 Casts when it runs the graph in ONNX Runtime; it reads float16, not bfloat16",
    ),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if RKNN_HALF in argv:  # the second process, in RKNN's environment
        return run_rknn_half(argv)
    passed = "every model in {out} checked, converted to .rknn and matched PyTorch in "
    passed += "RKNN's simulator"
    hooks = dict(other_files=OTHER_FILES, arguments=options, after=start_rknn_half, passed=passed)
    return harness.run(__file__, STEPS, kept=KEPT, failures=FAILURES, causes=CAUSES, argv=argv,
                       **hooks)  # fmt: skip


# =============================================================================================
# Test-only helpers: the second process (harness.run_more runs its steps), and RKNN's log.
# =============================================================================================

HERE = pathlib.Path(__file__).resolve().parent
VENV = HERE.parent / ".venv-rknn"
SETUP = f"python3 -m venv {VENV} && {VENV / 'bin' / 'pip'} install -r {HERE / 'requirements.txt'}"
RESULTS: dict = {"comparisons": {}, "evidence": {}, "skipped": []}
FIRST_HALF: dict = {}  # in the second process: the first half's steps.json


def options(parser) -> None:
    why = "draw step 1's inputs and weights from seed N, not the README's 0 (tests/ try others)"
    parser.add_argument("--seed", type=int, default=0, metavar="N", help=why)


def rknn_python() -> pathlib.Path:
    """RKNN's interpreter: $RKNN_PYTHON, else .venv-rknn's; Skip (77), saying what to do."""
    configured = os.environ.get("RKNN_PYTHON", "").strip()
    python = pathlib.Path(configured) if configured else VENV / "bin" / "python"
    if configured and not python.is_file():
        why = f"RKNN_PYTHON={configured} is not a file: unset it, or create the environment with"
        raise harness.Skip(f"steps 4-9: {why}: {SETUP}")
    if not python.is_file():
        raise harness.Skip(f"steps 4-9: no RKNN-Toolkit2 environment; create it with: {SETUP}")
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('rknn') is None)"
    if subprocess.run([str(python), "-c", probe], capture_output=True).returncode != 0:
        install = f"{python} -m pip install -r {HERE / 'requirements.txt'}"
        raise harness.Skip(f"steps 4-9: {python} has no rknn-toolkit2: {install}")
    return python


def start_rknn_half(out: pathlib.Path) -> None:
    """harness.run's after(): this file again, in RKNN's environment, on DIR's files."""
    try:
        python = rknn_python()
    except harness.Skip as reason:  # steps.json says so for steps 4-9
        steps = {str(n): {"status": "skipped", "why": str(reason)} for n in range(4, 10)}
        (out / RESULTS_FILE).write_text(json.dumps({"steps": steps}) + "\n", encoding="utf-8")
        harness.merge_summary(out / RESULTS_FILE)
        raise
    print(f"\n-- steps 4-9 run in the RKNN environment: {python} test.py {RKNN_HALF}")
    if problem := harness.write_summary(out / "steps.json"):  # steps 1-3, for the second half
        raise OSError(problem)
    sys.stdout.flush()
    start = time.monotonic()
    command = [str(python), __file__, RKNN_HALF, "--out", str(out)]
    proc = subprocess.run(command + (["-v"] if harness.VERBOSE else []), cwd=HERE)
    if (out / RESULTS_FILE).is_file():  # written pass or fail
        harness.merge_summary(out / RESULTS_FILE)
    assert proc.returncode == 0, f"the second half (steps 4-9) exited {proc.returncode}"
    converted = json.loads((out / RESULTS_FILE).read_text(encoding="utf-8"))["comparisons"]
    missing = [m for m in converted if not (out / m).with_suffix(".rknn").is_file()]
    assert not missing, f"no .rknn file beside {missing}"
    print(f"\n  steps 4-9 took {time.monotonic() - start:.0f} s")


def run_rknn_half(argv: list[str]) -> int:
    """main() of the second process: steps 4-9 in DIR (--out), then DIR/rknn_results.json (their
    statuses, the comparisons, the log evidence), which the first half folds into steps.json."""
    out = pathlib.Path(argv[argv.index("--out") + 1]).resolve()
    harness.VERBOSE = "-v" in argv
    if not (out / "steps.json").is_file():
        print(f"FAIL: no {out / 'steps.json'}: run test.py itself, not with {RKNN_HALF}")
        return 1
    FIRST_HALF.update(json.loads((out / "steps.json").read_text(encoding="utf-8")))
    first, results = len(STEPS) + 1, RESULTS_FILE
    return harness.run_more(RKNN_STEPS, first=first, causes=CAUSES, out=out, summary=results,
                            extra=RESULTS)  # fmt: skip


def exported_by_step(number: int) -> bool:
    """In the second process: whether the first half's step NUMBER ran, and so wrote its models."""
    return FIRST_HALF["steps"][str(number)]["status"] in ("runs", "differs")


def needs_step_3() -> None:
    """In the second process: a step that converts step 3's models needs step 3's torch."""
    step = FIRST_HALF["steps"]["3"]
    if not exported_by_step(3):
        assert step["status"].startswith("needs torch >= "), step  # else the first half failed
        version = step["status"].removeprefix("needs torch >= ")
        why = f"it converts step 3's models, not exported on torch {FIRST_HALF['torch']}"
        raise harness.NeedsTorch(version, why)


def first_half_step2() -> str:
    step = FIRST_HALF["steps"]["2"]
    why = f" ({step['why']})" if step["why"] else ""
    return f"exported on torch {FIRST_HALF['torch']}, where step 2 {step['status']}{why}"


LESSON_LINE = re.compile(r'^  (?!File ")\S')  # the lesson's print()s; not a traceback's "  File"


@contextlib.contextmanager
def rknn_log(echo: bool = True):
    """RKNN logs a lot, coloured, on both descriptors and through print(), between the lesson's
    lines: capture it all (harness.captured), then print back the lesson's lines (all with -v).
    Yields [log text]. The step's record already holds the lesson's lines, so they are printed
    back past it, to sys.__stdout__; when the block fails, the log's last lines follow."""
    sink: list[str] = []
    log = [""]
    failed = True
    try:
        with harness.captured(sink):
            yield log
        failed = False
    finally:
        log[0] = re.sub(r"\x1b\[[0-9;]*m", "", sink[0] if sink else "")
        lines = log[0].splitlines()
        shown = [line for line in lines if LESSON_LINE.match(line)] if echo else []
        if harness.VERBOSE:
            shown.append(textwrap.indent(log[0].rstrip(), "    | "))
        elif failed:
            tail = [line for line in lines if line.strip()][-25:]
            shown += ["  RKNN's log ends:", textwrap.indent("\n".join(tail), "    | ")]
        if shown:
            print("\n".join(shown), file=sys.__stdout__)


def layer_targets(log_text: str) -> list[tuple[str, str]]:
    """(OpType, Target) of each layer in a verbose build's "Network Layer Information Table",
    inputs and outputs left out."""
    dtype = "(?:FLOAT16|FLOAT|INT8|INT16|INT32|INT64|UINT8)"
    row = re.compile(rf"RKNN: \[[^\]]*\]\s+\d+\s+(\w+)\s+{dtype}\s+(NPU|CPU)\s")
    layers = [m.groups() for m in map(row.search, log_text.splitlines()) if m]
    return [(op, at) for op, at in layers if op not in ("InputOperator", "OutputOperator")]


def check_models(suffix: str) -> None:
    """The four models of step 2 (SUFFIX "_dynamo") or 3 (""): the full checker, their nodes,
    and the standard domain first in their opset imports, at 19 (what RKNN reads)."""
    for name, ops in [
        ("threshold", ["rknn_cst.cstThreshold"]),
        ("dual_residual", ["rknn_cst.cstDualResidual"]),
        ("conv_threshold", ["Conv", "rknn_cst.cstThreshold", "Conv"]),
        ("deform_conv", ["Conv", "DeformConv"]),
    ]:
        path = f"{name}{suffix}.onnx"
        onnx.checker.check_model(onnx.load(path), full_check=True)
        assert harness.op_types(path) == ops, (path, harness.op_types(path))
        assert first_opset(path) == ("", 19), (path, first_opset(path))


def first_opset(path: str) -> tuple[str, int]:
    first = onnx.load(path).opset_import[0]
    return first.domain, first.version


def node_attributes(path: str) -> dict:
    """The attributes of the file's one rknn_cst node, rounded to float32's precision."""
    (node,) = [n for n in onnx.load(path).graph.node if n.domain == "rknn_cst"]
    return {a.name: round(onnx.helper.get_attribute_value(a), 6) for a in node.attribute}


if __name__ == "__main__":
    sys.exit(main())
