"""Deploy the rknn_cst custom nodes with RKNN-Toolkit2: convert them and run them in its simulator, no board.

Run: python test.py [--out DIR] [-v] [--seed N]

One file, two halves, two Python environments. The FIRST HALF (steps 1-3) runs here, in the main
environment: it exports the models (Threshold as one rknn_cst::cstThreshold node, the two-output
rknn_cst::cstDualResidual, Conv -> cstThreshold -> Conv, ONNX DeformConv) with dynamo=False and
dynamo=True, each with its inputs and PyTorch's outputs saved beside it as .npy. The SECOND HALF
(steps 4-8) needs RKNN-Toolkit2, whose pins (torch<=2.4.0, numpy<=1.26.4, onnx<=1.18.0) cannot share
the main environment: test.py starts itself again under the RKNN interpreter with a hidden flag,
and that process registers a Python class per custom op, builds, exports the .rknn files, runs them
in the simulator against the saved outputs, and reproduces each failure the README explains.

The RKNN interpreter is $RKNN_PYTHON if set, else .venv-rknn/bin/python at the repository root (the
README's setup command creates it). Without it, steps 4-8 are skipped (exit 77) with that command.

The first half runs on torch 2.4.1, 2.8.0 and 2.14.1 (the README's "Versions"); the second half reads the
first half's DIR/steps.json to know which models step 3 wrote, and its steps' statuses (in rknn_results.json)
are folded back into DIR/steps.json, which covers steps 1-8.
"""

import argparse
import contextlib
import ctypes
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback
import warnings

SECOND_HALF_FLAG = "--rknn-half"  # hidden: the first half starts this file again with it, in the RKNN environment
SECOND_HALF = SECOND_HALF_FLAG in sys.argv[1:]

if not SECOND_HALF:  # the first half's imports: the README's first block (the main environment)
    import os

    import numpy as np
    import onnx
    import onnxscript
    import torch
    import torchvision
    from torch.onnx import register_custom_op_symbolic
    from torch.onnx.symbolic_helper import parse_args

    # The exporting torch, read once: steps 1-3 run on 2.4.1, 2.8.0 and 2.14.1 (the README's "Versions").
    TORCH = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])  # e.g. (2, 14)
    TORCH_VERSION = torch.__version__.split("+")[0]
else:  # the second half's imports: the first block under "In the RKNN environment"
    import contextlib
    import glob
    import os
    import re

    import numpy as np
    from rknn.api import RKNN
    from rknn.api.custom_op import get_node_attr

    TORCH_VERSION = ""  # the torch that exported the models: second_half() reads it from the first half's steps.json


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


# =============================================================================================
# FIRST HALF: the main environment (torch 2.14.1). Steps 1-3 of the README.
# =============================================================================================


def save_case(path, model, inputs):
    """Save the inputs and PyTorch's outputs beside the model: NAME_input_I.npy, NAME_output_I.npy."""
    stem = os.path.splitext(path)[0]
    with torch.no_grad():
        outputs = model(*inputs)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    for i, tensor in enumerate(inputs):
        np.save(f"{stem}_input_{i}.npy", tensor.numpy())
    for i, tensor in enumerate(outputs):
        np.save(f"{stem}_output_{i}.npy", tensor.numpy())


def print_nodes(path):
    """One line per written file: its nodes (domain.op_type) and its opset imports, in the file's order."""
    model = onnx.load(path)
    nodes = " ".join(f"{n.domain}.{n.op_type}" if n.domain else n.op_type for n in model.graph.node)
    opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import)
    print(f"  {path}: {nodes} | opsets {opsets}")


def step1_models():
    print("\n== 1. The models (PyTorch) ==")

    # cst::dual_residual as a custom op written in Python: no C++ to build (register_pytorch_op/ builds it in C++).
    @torch.library.custom_op("cst::dual_residual", mutates_args=())
    def dual_residual_op(x: torch.Tensor, y: torch.Tensor, alpha: float) -> tuple[torch.Tensor, torch.Tensor]:
        return x * alpha - y, y * alpha - x

    @dual_residual_op.register_fake  # the output shapes, for torch.export (dynamo=True)
    def _(x, y, alpha):
        return torch.empty_like(x), torch.empty_like(y)

    class DualResidual(torch.nn.Module):
        def __init__(self, alpha):
            super().__init__()
            self.alpha = alpha

        def forward(self, x, y):
            return torch.ops.cst.dual_residual(x, y, self.alpha)

    class ConvThresholdConv(torch.nn.Module):
        """The custom node between two layers the NPU runs. value == threshold keeps it continuous (see step 6)."""

        def __init__(self):
            super().__init__()
            self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.threshold = torch.nn.Threshold(0.1, 0.1)
            self.conv2 = torch.nn.Conv2d(8, 3, 3, padding=1)

        def forward(self, x):
            return self.conv2(self.threshold(self.conv1(x)))

    class DeformConvNet(torch.nn.Module):
        """A deformable convolution whose sampling offsets a plain convolution predicts: ONNX DeformConv."""

        def __init__(self):
            super().__init__()
            self.offset = torch.nn.Conv2d(3, 18, 3, padding=1)  # an (x, y) offset for each of the 3x3 taps
            self.deform = torchvision.ops.DeformConv2d(3, 4, 3, padding=1)

        def forward(self, x):
            return self.deform(x, self.offset(x))

    torch.manual_seed(0)
    x, y = torch.randn(1, 3, 10, 10), torch.randn(1, 3, 10, 10)  # NCHW, as RKNN's inference(data_format="nchw")
    threshold_model = torch.nn.Threshold(0.1, 20.0).eval()  # y = x if x > 0.1 else 20
    dual_residual_model = DualResidual(alpha=0.5).eval()
    conv_model = ConvThresholdConv().eval()
    deform_model = DeformConvNet().eval()

    # Threshold after an identity 1x1 convolution, and an input right above the threshold (step 6).
    edge_model = torch.nn.Sequential(torch.nn.Conv2d(3, 3, 1, bias=False), torch.nn.Threshold(0.1, 20.0)).eval()
    torch.nn.init.dirac_(edge_model[0].weight)  # the identity: the convolution returns its input
    edge = torch.full((1, 3, 10, 10), 0.100004)  # above 0.1 in float32; float16 rounds it to 0.0999756

    if SEED[0]:  # --seed N: the same draws as the block above (x, y, then the two models' weights), from seed N
        torch.manual_seed(SEED[0])
        x, y = torch.randn(1, 3, 10, 10), torch.randn(1, 3, 10, 10)
        conv_model = ConvThresholdConv().eval()
        deform_model = DeformConvNet().eval()
        print(f"  --seed {SEED[0]}: x, y and the weights of conv_model and deform_model drawn from seed {SEED[0]}")

    # The checks around the lesson: the custom op computes what it says, on the CPU, in float32.
    a, b = dual_residual_model(x, y)
    torch.testing.assert_close((a, b), (x * 0.5 - y, y * 0.5 - x))
    print(f"  {torch.ops.cst.dual_residual.default._schema} (a torch.library custom op in Python)")
    print("  threshold_model, dual_residual_model, conv_model, deform_model; inputs x, y of shape [1, 3, 10, 10]")
    torch.testing.assert_close(edge_model(edge), edge)
    MODELS[:] = [x, y, threshold_model, dual_residual_model, conv_model, deform_model, edge_model, edge]


def step2_export_torchscript() -> None:
    print("\n== 2. Export with dynamo=False (the TorchScript-based exporter) ==")
    x, y, threshold_model, dual_residual_model, conv_model, deform_model, edge_model, edge = MODELS  # step 1's

    @parse_args("v", "f", "f")
    def threshold_symbolic(g, x, threshold, value):
        # register_onnx_symbolic/ step 1: one node, the two scalars as FLOAT attributes, the output typed.
        out = g.op("rknn_cst::cstThreshold", x, threshold_f=threshold, value_f=value)
        out.setType(x.type())
        return out

    @parse_args("v", "v", "f")
    def dual_residual_symbolic(g, x, y, alpha):
        # register_pytorch_op/ step 3: outputs=2 makes g.op return one Value per output, each typed.
        out_x, out_y = g.op("rknn_cst::cstDualResidual", x, y, alpha_f=alpha, outputs=2)
        out_x.setType(x.type())
        out_y.setType(y.type())
        return out_x, out_y

    @parse_args("v", "v", "v", "v", "v", "i", "i", "i", "i", "i", "i", "i", "i", "b")
    def deform_conv2d_symbolic(
        g, x, weight, offset, mask, bias, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups, offset_group, use_mask
    ):
        # register_onnx_symbolic/ step 6: ONNX DeformConv (opset 19) takes X, W, offset, B, mask.
        inputs = [x, weight, offset, bias] + ([mask] if use_mask else [])
        return g.op(
            "DeformConv",
            *inputs,
            strides_i=[stride_h, stride_w],
            pads_i=[pad_h, pad_w, pad_h, pad_w],  # ONNX lists begins then ends
            dilations_i=[dil_h, dil_w],
            group_i=groups,
            offset_group_i=offset_group,
        )

    register_custom_op_symbolic("aten::threshold", threshold_symbolic, 12)
    register_custom_op_symbolic("cst::dual_residual", dual_residual_symbolic, 12)
    register_custom_op_symbolic("torchvision::deform_conv2d", deform_conv2d_symbolic, 19)

    log: list[str] = []
    with captured(log):  # the exporter's DeprecationWarning for dynamo=False, once per call
        # opset 19: ONNX has DeformConv since 19, and 19 is the newest opset RKNN-Toolkit2 2.5.0 reads.
        for path, model, inputs in [
            ("threshold.onnx", threshold_model, (x,)),
            ("dual_residual.onnx", dual_residual_model, (x, y)),
            ("conv_threshold.onnx", conv_model, (x,)),
            ("deform_conv.onnx", deform_model, (x,)),
        ]:
            torch.onnx.export(model, inputs, path, dynamo=False, opset_version=19, custom_opsets={"rknn_cst": 1})
            save_case(path, model, inputs)
            print_nodes(path)

        os.makedirs("failures", exist_ok=True)
        torch.onnx.export(
            edge_model,
            (edge,),
            "failures/identity_conv_threshold.onnx",
            dynamo=False,
            opset_version=19,
            custom_opsets={"rknn_cst": 1},
        )
        save_case("failures/identity_conv_threshold.onnx", edge_model, (edge,))
        print_nodes("failures/identity_conv_threshold.onnx")
    verbose_log(log)
    assert "Traceback" not in log[0], log[0]

    expected_ops = {
        "threshold.onnx": ["rknn_cst.cstThreshold"],
        "dual_residual.onnx": ["rknn_cst.cstDualResidual"],
        "conv_threshold.onnx": ["Conv", "rknn_cst.cstThreshold", "Conv"],
        "deform_conv.onnx": ["Conv", "DeformConv"],
    }
    for path, ops in expected_ops.items():
        model = show(path)
        assert op_list(model) == ops, (path, op_list(model))
        assert model.opset_import[0].domain == "" and model.opset_import[0].version == 19, model.opset_import
        assert nodes_line(path, model) + "\n" in log[0], f"the page's print_nodes({path!r}) printed no line"
    assert "  failures/identity_conv_threshold.onnx: Conv rknn_cst.cstThreshold | opsets" in log[0], log[0]
    assert node_attributes("threshold.onnx", "cstThreshold") == {"threshold": 0.1, "value": 20.0}
    assert node_attributes("dual_residual.onnx", "cstDualResidual") == {"alpha": 0.5}
    assert node_attributes("conv_threshold.onnx", "cstThreshold") == {"threshold": 0.1, "value": 0.1}
    print("  saved beside each: NAME_input_I.npy (the inputs) and NAME_output_I.npy (PyTorch's outputs)")


def step3_export_dynamo() -> None:
    print("\n== 3. Export with dynamo=True (the torch.export-based exporter) ==")
    x, y, threshold_model, dual_residual_model, conv_model, deform_model, edge_model, edge = MODELS  # step 1's

    def register_rknn_schema(op_type, inputs, outputs, attributes):
        """onnxscript looks custom ops up in ONNX's schema registry (register_onnx_symbolic/ step 7)."""
        schema = onnx.defs.OpSchema(
            op_type,
            "rknn_cst",
            1,
            inputs=[onnx.defs.OpSchema.FormalParameter(name, "T") for name in inputs],
            outputs=[onnx.defs.OpSchema.FormalParameter(name, "T") for name in outputs],
            type_constraints=[("T", ["tensor(float)"], "float32 tensors")],
            attributes=[onnx.defs.OpSchema.Attribute(a, onnx.defs.OpSchema.AttrType.FLOAT, a) for a in attributes],
        )
        onnx.defs.register_schema(schema)

    register_rknn_schema("cstThreshold", ["X"], ["Y"], ["threshold", "value"])
    register_rknn_schema("cstDualResidual", ["X", "Y"], ["X_res", "Y_res"], ["alpha"])

    rknn_cst = onnxscript.values.Opset("rknn_cst", 1)

    def threshold_translation(self, threshold: float, value: float):
        # `self`, as in the ATen schema threshold(Tensor self, ...): torch 2.8 matches translations by name.
        return rknn_cst.cstThreshold(self, threshold=threshold, value=value)

    def dual_residual_translation(x, y, alpha: float):
        return rknn_cst.cstDualResidual(x, y, alpha=alpha)

    translations = {
        torch.ops.aten.threshold.default: threshold_translation,
        torch.ops.cst.dual_residual.default: dual_residual_translation,
    }
    if TORCH < (2, 6):
        raise NeedsTorch(
            "2.6", "custom_translation_table came with 2.6; on 2.4, dynamo=True is the old torch.onnx.dynamo_export"
        )

    def default_domain_first(path):
        """RKNN-Toolkit2 2.5.0 takes the first opset import for the model's opset: list the standard domain first."""
        model = onnx.load(path)
        ordered = sorted(model.opset_import, key=lambda opset: opset.domain != "")  # "": the standard domain
        del model.opset_import[:]
        model.opset_import.extend(ordered)
        onnx.save(model, path)

    log: list[str] = []
    with captured(log):
        for path, model, inputs in [
            ("threshold_dynamo.onnx", threshold_model, (x,)),
            ("dual_residual_dynamo.onnx", dual_residual_model, (x, y)),
            ("conv_threshold_dynamo.onnx", conv_model, (x,)),
            ("deform_conv_dynamo.onnx", deform_model, (x,)),  # torch.export knows deform_conv2d: nothing to register
        ]:
            onnx_program = torch.onnx.export(
                model, inputs, dynamo=True, opset_version=19, verbose=False, custom_translation_table=translations
            )
            onnx_program.save(path)
            default_domain_first(path)
            save_case(path, model, inputs)
            print_nodes(path)

        # Without opset_version, dynamo=True writes opset 20, which RKNN-Toolkit2 2.5.0 refuses (step 8).
        onnx_program = torch.onnx.export(
            conv_model, (x,), dynamo=True, verbose=False, custom_translation_table=translations
        )
        onnx_program.save("failures/conv_threshold_opset20.onnx")
        print_nodes("failures/conv_threshold_opset20.onnx")
        # Without default_domain_first: rknn_cst comes first in the opset imports, and RKNN's build fails (step 8).
        onnx_program = torch.onnx.export(
            threshold_model, (x,), dynamo=True, opset_version=19, verbose=False, custom_translation_table=translations
        )
        onnx_program.save("failures/threshold_custom_domain_first.onnx")
        print_nodes("failures/threshold_custom_domain_first.onnx")

        if TORCH < (2, 9):  # before 2.9, dynamo=True defaults to opset 18, which RKNN reads: no trap to show
            written = onnx.load("failures/conv_threshold_opset20.onnx")
            assert {o.domain: o.version for o in written.opset_import}[""] == 18, written.opset_import
            onnx_program = torch.onnx.export(  # step 8's file, at the opset torch 2.9 and later write by default
                conv_model, (x,), dynamo=True, opset_version=20, verbose=False, custom_translation_table=translations
            )
            onnx_program.save("failures/conv_threshold_opset20.onnx")
            # Before 2.9 a failed torch.export falls back to draft export, silently: prove it did not.
            for model, inputs in [
                (threshold_model, (x,)),
                (dual_residual_model, (x, y)),
                (conv_model, (x,)),
                (deform_model, (x,)),
            ]:
                torch.export.export(model, inputs, strict=False)  # raises if the ONNX export above was a draft
    verbose_log(log)
    assert "Traceback" not in log[0], log[0]
    if TORCH < (2, 9):
        differs(
            "dynamo=True writes opset 18 by default (20 since 2.9), which RKNN reads, so step 8's file is exported "
            "with opset_version=20; torch.export.export(strict=False) takes all four models: none is a draft export"
        )

    expected_ops = {
        "threshold_dynamo.onnx": ["rknn_cst.cstThreshold"],
        "dual_residual_dynamo.onnx": ["rknn_cst.cstDualResidual"],
        "conv_threshold_dynamo.onnx": ["Conv", "rknn_cst.cstThreshold", "Conv"],
        "deform_conv_dynamo.onnx": ["Conv", "DeformConv"],
    }
    for path, ops in expected_ops.items():
        model = show(path)
        assert op_list(model) == ops, (path, op_list(model))
        assert (model.opset_import[0].domain, model.opset_import[0].version) == ("", 19), model.opset_import
        assert nodes_line(path, model) + "\n" in log[0], f"the page's print_nodes({path!r}) printed no line"
    assert node_attributes("threshold_dynamo.onnx", "cstThreshold") == {"threshold": 0.1, "value": 20.0}
    assert node_attributes("dual_residual_dynamo.onnx", "cstDualResidual") == {"alpha": 0.5}

    for path in FAILURES[1:]:
        model = onnx.load(path)
        print(f"  {path}: opset imports {opset_text(model)} (step 8 shows what RKNN says)")
        assert f"  {path}: " in log[0], f"the page's print_nodes({path!r}) printed no line"  # before 2.9: opset 18
    assert opset_text(onnx.load("failures/conv_threshold_opset20.onnx")).startswith("ai.onnx 20")
    assert opset_text(onnx.load("failures/threshold_custom_domain_first.onnx")).startswith("rknn_cst 1")


# =============================================================================================
# SECOND HALF: the RKNN environment (rknn-toolkit2 2.5.0, torch 2.4.0). Steps 4-8 of the README.
# test.py runs these in a second process: `RKNN_PYTHON test.py --rknn-half --out DIR`.
# =============================================================================================


class cstThreshold:  # noqa: N801 - RKNN matches the class to the node by op_type; the vendor names them so
    """The simulator's kernel for rknn_cst::cstThreshold: y = x if x > threshold else value."""

    op_type = "cstThreshold"  # the node's op_type

    def shape_infer(self, node, in_shapes, in_dtypes):
        return in_shapes.copy(), in_dtypes.copy()  # one output, shaped and typed like the input

    def compute(self, node, inputs):
        x = inputs[0]
        threshold = get_node_attr(node, "threshold")  # the node's attributes, as the exporter wrote them
        value = get_node_attr(node, "value")
        return [np.where(x > threshold, x, value).astype(x.dtype)]


class cstDualResidual:  # noqa: N801
    """The simulator's kernel for rknn_cst::cstDualResidual: two inputs, one attribute, two outputs."""

    op_type = "cstDualResidual"

    def shape_infer(self, node, in_shapes, in_dtypes):
        return in_shapes.copy(), in_dtypes.copy()  # two outputs, shaped and typed like the two inputs

    def compute(self, node, inputs):
        x, y = inputs
        alpha = get_node_attr(node, "alpha")
        return [x * alpha - y, y * alpha - x]


def to_rknn(path, verbose=False):
    """The vendor's steps: config, load_onnx, build in float16, export_rknn, init_runtime on the simulator."""
    rknn = RKNN(verbose=verbose)
    rknn.config(target_platform="rk3588")  # the chip the .rknn file is built for
    assert rknn.load_onnx(model=path) == 0
    assert rknn.build(do_quantization=False) == 0  # float16; quantizing to int8 would need calibration data
    assert rknn.export_rknn(os.path.splitext(path)[0] + ".rknn") == 0  # the file a board's runtime loads
    assert rknn.init_runtime() == 0  # no target: the simulator, on this PC
    return rknn


def check_against_pytorch(rknn, path, elementwise=False):
    """Run the saved inputs; compare each output with PyTorch's: the float16 tolerance, the cosine similarity.
    elementwise=True (each output element computed from one element of each input): also each element alone."""
    stem = os.path.splitext(path)[0]
    inputs = [np.load(name) for name in sorted(glob.glob(stem + "_input_*.npy"))]
    outputs = rknn.inference(inputs=inputs, data_format="nchw")
    assert len(outputs) == len(glob.glob(stem + "_output_*.npy")), path
    results = []
    for i, actual in enumerate(outputs):
        expected = np.load(f"{stem}_output_{i}.npy")
        atol = 2**-8 * float(np.abs(expected).max())  # 4 float16 steps at the largest output: see step 6
        np.testing.assert_allclose(actual, expected, rtol=0, atol=atol, err_msg=f"{path} output {i}")
        diff = float(np.abs(actual - expected).max())
        cosine = float(np.dot(actual.ravel(), expected.ravel()) / (np.linalg.norm(actual) * np.linalg.norm(expected)))
        print(f"  {path} output {i}: max abs diff {diff:.1e} <= {atol:.1e}, cosine similarity {cosine:.5f}")
        results.append({"output": i, "max_abs_diff": diff, "atol": atol, "cosine": cosine})
        if elementwise:  # one float16 step at each element's own value, not at the largest output: see step 6
            step = 2**-10 * np.abs(expected) + 2**-24
            np.testing.assert_array_less(np.abs(actual - expected), step, err_msg=f"{path} output {i}, per element")
            worst = float(np.max(np.abs(actual - expected) / step))
            print(f"  {path} output {i}: each element within 2**-10 * |expected| + 2**-24, at most {worst:.2f} of it")
            results[-1]["per_element"] = worst
    return results


class cstThresholdZeros(cstThreshold):  # noqa: N801
    def compute(self, node, inputs):  # another kernel for the same op_type, e.g. a "fixed" one
        return [np.zeros_like(inputs[0])]


def step4_before_the_first_build() -> None:
    print("\n== 4. Three errors before the first build ==")
    log: list[str] = []
    with rknn_output(log):
        rknn = RKNN()
        with expect_error("Please call rknn.config first!"):
            rknn.load_onnx(model="threshold.onnx")  # config() comes first
        with expect_error("The 'target_platform' has not been set yet"):
            rknn.config()  # a .rknn file is built for one chip: config() refuses to guess
        rknn.config(target_platform="rk3588")
        assert rknn.load_onnx(model="threshold.onnx") == 0  # loading works: the node is only a name so far
        with expect_error("No opset import for domain 'rknn_cst'"):
            rknn.build(do_quantization=False)  # no class registered for cstThreshold
        rknn.release()
    seen(
        log,
        "Please call rknn.config first!",
        "The 'target_platform' has not been set yet",
        "No opset import for domain 'rknn_cst'",
    )


def step5_register() -> None:
    print("\n== 5. A Python class per custom op: reg_custom_op ==")
    log: list[str] = []
    with rknn_output(log):
        # A registration lasts for the whole process and every RKNN object made in it: register once (step 8).
        registry = RKNN()
        for op in (cstThreshold(), cstDualResidual()):
            assert registry.reg_custom_op(op) == 0, op.op_type
        registry.release()
    print("  registered for this process: cstThreshold, cstDualResidual")


def step6_convert_and_compare() -> None:
    print("\n== 6. Convert, run in the simulator, compare with PyTorch ==")
    log: list[str] = []
    with rknn_output(log):
        results = {}
        for path in [
            "threshold.onnx",
            "threshold_dynamo.onnx",
            "dual_residual.onnx",
            "dual_residual_dynamo.onnx",
            "conv_threshold.onnx",
            "conv_threshold_dynamo.onnx",
            "deform_conv.onnx",
            "deform_conv_dynamo.onnx",
        ]:
            if not os.path.exists(path):  # torch < 2.6 writes no dynamo=True models (step 3)
                continue
            rknn = to_rknn(path)
            elementwise = path.startswith(("threshold", "dual_residual"))  # each output element from one input element
            results[path] = check_against_pytorch(rknn, path, elementwise)
            rknn.release()
    RESULTS["comparisons"] = results
    expected = [name for step in (2, 3) if exported_by_step(step) for name in KEPT[step]]
    assert sorted(results) == sorted(expected), f"converted {sorted(results)}, expected {sorted(expected)}"
    if not exported_by_step(3):
        RESULTS["skipped"].append(f"step 6: {', '.join(KEPT[3])} (step 3: {first_half_step(3)})")
        differs(
            f"converted the four dynamo=False models only: step 3 wrote none ({FIRST_HALF['steps']['3']['status']})"
        )

    with rknn_output(log):
        rknn = to_rknn("failures/identity_conv_threshold.onnx")
        (out,) = rknn.inference(inputs=[np.load("failures/identity_conv_threshold_input_0.npy")], data_format="nchw")
        print(f"  x = 0.100004 > 0.1: PyTorch keeps x, RKNN gives {out.max():g}: float16(x) = {np.float16(0.100004)}")
        rknn.release()
    expected = np.load("failures/identity_conv_threshold_output_0.npy")
    assert np.all(out == 20.0) and np.allclose(expected, 0.100004), (out.max(), expected.max())
    RESULTS["edge"] = float(out.max())


def step7_what_runs_where() -> None:
    print("\n== 7. What runs where: NPU, CPU, and what a board needs ==")
    log: list[str] = []
    with rknn_output(log, echo=False):
        to_rknn("conv_threshold.onnx", verbose=True).release()
    conv_log = log[-1]
    with rknn_output(log, echo=False):
        to_rknn("deform_conv.onnx", verbose=True).release()
        for dump in glob.glob("check*_base_optimize.*"):  # verbose=True also dumps the optimized graph here
            os.remove(dump)
    deform_log = log[-1]

    c_api = "it will be treated as a custom operator. Please call rknn_register_custom_ops in the RKNN C API"
    warning = next((line for line in conv_log.splitlines() if "type = cstThreshold" in line and c_api in line), "")
    assert warning, "the build did not warn that a board needs the op in the C API"
    print("  conv_threshold.onnx build:", warning.split("] ", 1)[-1].strip())
    conv_layers = layer_targets(conv_log)
    print("  conv_threshold.onnx layers:", " | ".join(f"{op} {target}" for op, target in conv_layers))
    assert conv_layers == [("Conv", "NPU"), ("cstThreshold", "CPU"), ("Conv", "NPU")], conv_layers

    deform_warning = next((line for line in deform_log.splitlines() if "type = DeformConv" in line), "")
    assert c_api in deform_warning, "the build did not treat DeformConv as a custom operator"
    # Search, not match a whole line: RKNN writes E lines to stderr and D lines to stdout, which is buffered
    # unless PYTHONUNBUFFERED is set, so an E line can land inside a D line of the captured text.
    unknown = re.search(r"E RKNN: \[[^\]]*\] Unkown op target: \d+", deform_log)
    assert unknown, "no 'E RKNN: ... Unkown op target' line"
    unknown = unknown.group()
    print("  deform_conv.onnx build:", deform_warning.split("] ", 1)[-1].split(", it will")[0], "...")
    print(f"  deform_conv.onnx build: {unknown.split('] ', 1)[-1].strip()} (an E line, yet build() returned 0)")
    deform_layers = layer_targets(deform_log)
    print("  deform_conv.onnx layers:", " | ".join(f"{op} {target}" for op, target in deform_layers))
    assert ("DeformConv", "CPU") in deform_layers, deform_layers
    RESULTS["evidence"] = {
        "c_api_warning": warning,
        "conv_threshold_layers": conv_layers,
        "deform_conv_layers": deform_layers,
        "deform_conv_unknown_target": unknown,
    }


def step8_traps() -> None:
    print("\n== 8. Four traps ==")
    log: list[str] = []
    with rknn_output(log):
        rknn = RKNN()
        assert rknn.reg_custom_op(cstThresholdZeros()) == 0  # returns 0, yet RKNN ignores it
        rknn.release()
    ignored = "The op_type = 'cstThreshold' is invalid, Ignore this call!"
    assert ignored in strip_ansi(log[-1]), "no warning for the second registration"
    print(f"  a second class for cstThreshold: reg_custom_op returned 0 and logged {ignored!r}")
    with rknn_output(log):
        rknn = to_rknn("threshold.onnx")
        check_against_pytorch(rknn, "threshold.onnx")  # still matches PyTorch: step 5's class, not zeros
        rknn.release()

    with rknn_output(log):
        rknn = RKNN()
        assert rknn.load_rknn("threshold.rknn") == 0
        assert rknn.init_runtime() == -1  # no target: the simulator cannot run a loaded .rknn file
        rknn.release()
    refused = "RKNN model that loaded by 'load_rknn' not support inference on the simulator"
    assert refused in strip_ansi(log[-1]), "init_runtime did not say why it failed"
    print(f"  load_rknn, then init_runtime() returned -1: {refused}")

    RESULTS["reproduced"] += [ignored, refused]
    if not exported_by_step(3):  # the last two traps read step 3's failure files, not written on this torch
        RESULTS["skipped"].append(f"step 8: {', '.join(FAILURES[1:])} (step 3: {first_half_step(3)})")
        differs(f"the two dynamo=True traps not run: step 3 wrote no files ({FIRST_HALF['steps']['3']['status']})")
        return

    with rknn_output(log):
        # This block and the next read step 3's files: torch >= 2.6 (on torch 2.4, test.py leaves them out).
        rknn = RKNN()
        rknn.config(target_platform="rk3588")
        with expect_error("Unsupport onnx opset 20, need <= 19!"):
            rknn.load_onnx(model="failures/conv_threshold_opset20.onnx")
        rknn.release()

        rknn = RKNN()
        rknn.config(target_platform="rk3588")
        assert rknn.load_onnx(model="failures/threshold_custom_domain_first.onnx") == 0
        with expect_error("IndexError: _Map_base::at"):
            rknn.build(do_quantization=False)
        rknn.release()
    seen(log, "Unsupport onnx opset 20, need <= 19!", "IndexError: _Map_base::at")


# ---------------------------------------------------------------------------------------------

# Every model this example writes, relative to --out: the ones it keeps (each checked, converted by
# RKNN-Toolkit2 and run against PyTorch), by the step that exports them, and the failure demonstrations.
# main() removes them (and the .npy, .rknn and results files beside them) before a run and refuses to
# claim PASS while --out holds any other .onnx file. A step skipped for its torch keeps no models.
KEPT = {
    2: ("threshold.onnx", "dual_residual.onnx", "conv_threshold.onnx", "deform_conv.onnx"),
    3: ("threshold_dynamo.onnx", "dual_residual_dynamo.onnx", "conv_threshold_dynamo.onnx", "deform_conv_dynamo.onnx"),
}
FAILURES = (
    "failures/identity_conv_threshold.onnx",
    "failures/conv_threshold_opset20.onnx",
    "failures/threshold_custom_domain_first.onnx",
)
STEPS = (step1_models, step2_export_torchscript, step3_export_dynamo)  # this process; steps 4-8 in the RKNN one
SECOND_HALF_STEPS = (
    step4_before_the_first_build,
    step5_register,
    step6_convert_and_compare,
    step7_what_runs_where,
    step8_traps,
)
ALL_KEPT = tuple(name for models in KEPT.values() for name in models)
RKNN_FILES = tuple(name.removesuffix(".onnx") + ".rknn" for name in ALL_KEPT + FAILURES[:1])
SAVED_ARRAYS = tuple(
    f"{name.removesuffix('.onnx')}_{kind}_{i}.npy"
    for name in ALL_KEPT + FAILURES[:1]
    for kind in ("input", "output")
    for i in range(2 if name.startswith("dual_residual") else 1)
)
RESULTS_FILE = "rknn_results.json"  # what the second half measured and did; tests/test_deploy_rknn.py reads it
RESULTS: dict = {"comparisons": {}, "reproduced": [], "evidence": {}, "skipped": [], "steps": {}}
MODELS: list = []  # step 1's inputs and models, for steps 2 and 3



# What ERRORS.md says of each error this example reproduces: part of expect_error's expected text ->
# (what raises it, its cause in one line[, the step that fixes it when that is a later step than the one
# that reproduces it]). recording() fails the run on an error not explained here.
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
        5,  # fixed in step 5
    ),
    "Unsupport onnx opset 20, need <= 19!": (
        "RKNN-Toolkit2",
        "a `dynamo=True` model without `opset_version`: torch 2.9+ writes opset 20, RKNN-Toolkit2 2.5.0 reads "
        "up to 19",
        3,  # fixed in step 3
    ),
    "IndexError: _Map_base::at": (
        "RKNN-Toolkit2",
        "a `dynamo=True` model that lists the custom domain before the default one in `opset_import`: RKNN's "
        "version converter fails",
        3,  # fixed in step 3
    ),
}


def main(argv: list[str] | None = None) -> int:
    # expect_error also notes what each step reproduced, in steps.json, for ERRORS.md (see recording())
    globals()["expect_error"] = recording(expect_error)
    args = parse_command_line(argv)
    out = args.out.resolve()
    if args.rknn_half:
        return second_half(out)
    owned = ALL_KEPT + FAILURES
    problem = prepare_out(out, owned + RKNN_FILES + SAVED_ARRAYS + (RESULTS_FILE,))
    if problem:
        print(f"FAIL: cannot write models under {out}: {problem}")
        return 1
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="torch.onnx")
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
        try:
            run_second_half(out)  # steps 4-8, in the RKNN environment; their statuses join STEP_STATUS
        except Skip as reason:  # no RKNN environment: the exports above still ran and were checked
            print(f"SKIP steps 4-8: {reason}")
            for number in range(len(STEPS) + 1, len(STEPS) + len(SECOND_HALF_STEPS) + 1):
                STEP_STATUS[number] = {"status": "skipped", "why": str(reason)}
            skipped.append(f"steps 4-8: {reason}")
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
    kept = [m for n in ran for m in KEPT.get(n, ())]
    rknn_files = [m.removesuffix(".onnx") + ".rknn" for m in kept] if 6 in ran else []
    missing = [name for name in kept + rknn_files + [RESULTS_FILE] if not (out / name).is_file()]
    if missing:
        print(f"\nFAIL: these files were not written: {', '.join(missing)}")
        return 1
    print(f"\nPASS: every model in {out} checked, converted to .rknn and matched PyTorch in RKNN's simulator")
    return 0


def second_half(out: pathlib.Path) -> int:
    """main() of the process the first half starts in the RKNN environment: steps 4-8, then the results file
    (with each step's status, which the first half folds into its steps.json), pass or fail."""
    global TORCH_VERSION
    warnings.filterwarnings("ignore", message="pkg_resources is deprecated")  # RKNN imports it
    home = os.getcwd()
    os.chdir(out)  # the files the first half wrote, read by the names the README uses
    try:
        summary = pathlib.Path("steps.json")  # the first half's steps 1-3: which torch, which steps wrote models
        assert summary.is_file(), f"no {out / 'steps.json'}: run test.py itself, not with {SECOND_HALF_FLAG}"
        FIRST_HALF.update(json.loads(summary.read_text(encoding="utf-8")))
        TORCH_VERSION = FIRST_HALF["torch"]
        for number, step in enumerate(SECOND_HALF_STEPS, start=len(STEPS) + 1):
            STEP_STATUS[number] = {"status": "runs", "why": ""}
            CURRENT_STEP[0] = number
            try:
                step()
            except BaseException:
                STEP_STATUS[number].update(status="fails")
                raise
    except AssertionError as exc:
        print(f"\nFAIL: {exc}")
        print_log_tail()
        return 1
    except Exception as exc:  # noqa: BLE001 - an unexpected error: one line, the traceback with -v
        print(f"\nFAIL: unexpected {type(exc).__name__}: {first_line(exc)}")
        print_log_tail()
        if VERBOSE:
            traceback.print_exc(file=sys.stdout)
        return 1
    finally:
        RESULTS["steps"] = {str(number): status for number, status in STEP_STATUS.items()}
        results_problem = ""
        try:
            (out / RESULTS_FILE).write_text(json.dumps(RESULTS, indent=2) + "\n", encoding="utf-8")
        except OSError as exc:
            results_problem = f"{RESULTS_FILE}: {exc}"
        os.chdir(home)
    if results_problem:
        print(f"\nFAIL: cannot write models under {out}: {results_problem}")
        return 1
    return 0


# =============================================================================================
# Helpers: safe to skip on a first read. The command line, the output folder, the second process,
# and the checks that run around the lesson's code: the ONNX checker, RKNN's captured logs.
# =============================================================================================

HERE = pathlib.Path(__file__).resolve().parent
REPOSITORY = HERE.parent
SKIP = 77  # exit status for "cannot run here", as in automake
VERBOSE = False  # -v: print every exported graph in full, and RKNN's whole log
SEED = [0]  # --seed N: step 1 draws its inputs and weights from seed N (0, the README's, by default)
LAST_LOG: list[str] = [""]  # the last captured RKNN log: its end is printed when a step fails
DEFAULT_RKNN_PYTHON = REPOSITORY / ".venv-rknn" / "bin" / "python"
SETUP_COMMAND = (
    f"python3 -m venv {REPOSITORY / '.venv-rknn'} && "
    f"{REPOSITORY / '.venv-rknn' / 'bin' / 'pip'} install -r {HERE / 'requirements.txt'}"
)


class Skip(Exception):
    """Raised by a step that cannot run on this machine (no RKNN environment): the reason is printed."""


# The version bookkeeping of the repository's harness (issue 13). differs() names the torch that exported
# the models (TORCH_VERSION): in the second half that is the first half's torch, not RKNN's torch 2.4.0.
STEP_STATUS: dict[int, dict[str, str]] = {}
CURRENT_STEP = [0]
FIRST_HALF: dict = {}  # the second half: the first half's steps.json (its torch, what steps 1-3 did)


class NeedsTorch(Exception):
    """Raised by a step that needs a newer torch: `SKIP step N: needs torch >= X (why)`; the example goes on."""

    def __init__(self, version: str, why: str) -> None:
        super().__init__(f"needs torch >= {version} ({why})")
        self.version, self.why = version, why


def differs(why: str) -> None:
    """Mark the running step as behaving differently (and validly) on the installed torch; print why."""
    print(f"  on torch {TORCH_VERSION}: {why}")
    STEP_STATUS[CURRENT_STEP[0]].update(status="differs", why=why)


def write_step_summary(out: pathlib.Path) -> str | None:
    """DIR/steps.json: what each step did on this torch, for the version table in the top README. Returns why it
    could not be written (an OSError: DIR full, steps.json a directory, ...), or None."""
    summary = {"torch": torch.__version__.split("+")[0], "steps": {str(n): s for n, s in STEP_STATUS.items()}}
    try:
        (out / "steps.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    except OSError as exc:
        return f"steps.json: {exc}"
    return None


def first_half_step(number: int) -> str:
    """The second half: what step NUMBER did in the first half, as its steps.json says ("runs", "needs ...")."""
    step = FIRST_HALF["steps"][str(number)]
    return f"{step['status']}: {step['why']}" if step["why"] else step["status"]


def exported_by_step(number: int) -> bool:
    """The second half: whether step NUMBER of the first half ran, and so wrote its models."""
    return FIRST_HALF["steps"][str(number)]["status"] in ("runs", "differs")


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
    parser.add_argument("-v", "--verbose", action="store_true", help="print every graph in full, and RKNN's logs")
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        metavar="N",
        help="draw step 1's inputs and weights from seed N instead of the README's 0 (tests/ check other seeds)",
    )
    parser.add_argument(SECOND_HALF_FLAG, dest="rknn_half", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    VERBOSE = args.verbose
    SEED[0] = args.seed
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


def show(path: str | os.PathLike) -> "onnx.ModelProto":
    """The full ONNX checker, then one line: ops in order, opset imports, outputs (the whole graph with -v)."""
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    outputs = ", ".join(f"{o.name}: {type_text(o.type)}" for o in model.graph.output)
    print(f"{nodes_line(pathlib.PurePath(path).as_posix(), model)} | {outputs}")
    if VERBOSE:
        print(textwrap.indent(onnx.printer.to_text(model.graph), "    "))
    return model


def nodes_line(path: str, model: "onnx.ModelProto") -> str:
    """The line the page's print_nodes(path) prints for this model: show() prints it, then the outputs."""
    return f"  {path}: {' '.join(op_list(model))} | opsets {opset_text(model)}"


def type_text(value_type: "onnx.TypeProto") -> str:
    tensor = value_type.tensor_type
    dims = [str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in tensor.shape.dim]
    return f"{onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)}[{','.join(dims)}]"


def op_list(model: "onnx.ModelProto") -> list[str]:
    return [f"{n.domain}.{n.op_type}" if n.domain else n.op_type for n in model.graph.node]


def opset_text(model: "onnx.ModelProto") -> str:
    return ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import)


def node_attributes(path: str, op_type: str) -> dict:
    """The attributes of the one node of op_type, rounded to float32's precision (the file stores float32)."""
    (node,) = [n for n in onnx.load(path).graph.node if n.op_type == op_type]
    return {a.name: round(onnx.helper.get_attribute_value(a), 6) for a in node.attribute}


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


def verbose_log(log: list[str]) -> None:
    if VERBOSE and log[-1].strip():
        print(textwrap.indent(strip_ansi(log[-1]).rstrip(), "    | "))


def strip_ansi(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


OWN_LINE = re.compile(r'^  (?!File ")\S')  # the lesson's lines: two spaces, and not a traceback's "  File"


@contextlib.contextmanager
def rknn_output(log: list[str], echo: bool = True):
    """RKNN logs a lot, with colours, on both descriptors, interleaved with the lesson's own print()s: capture
    it all, then print back only the lesson's lines (all of it with -v). The log stays in log[-1]."""
    try:
        with captured(log):
            yield
    finally:
        text = strip_ansi(log[-1]) if log else ""
        LAST_LOG[0] = text
        if VERBOSE:
            print(textwrap.indent(text.rstrip(), "    | "))
        if echo:
            for line in text.splitlines():
                if OWN_LINE.match(line):
                    print(line)


def seen(log: list[str], *expected: str) -> None:
    """Each expected message was reproduced (expect_error printed it) in the captured output."""
    text = strip_ansi(log[-1])
    for message in expected:
        assert any(line.startswith("  reproduced") and message in line for line in text.splitlines()), message
        RESULTS["reproduced"].append(message)


def layer_targets(log_text: str) -> list[tuple[str, str]]:
    """(OpType, Target) of each layer in the verbose build's "Network Layer Information Table", inputs and
    outputs left out: the first table only (the build prints it once)."""
    row = re.compile(r"RKNN: \[[^\]]*\]\s+\d+\s+(\w+)\s+(?:FLOAT16|FLOAT|INT8|INT16|INT32|INT64|UINT8)\s+(NPU|CPU)\s")
    layers = [m.groups() for m in map(row.search, strip_ansi(log_text).splitlines()) if m]
    return [(op, target) for op, target in layers if op not in ("InputOperator", "OutputOperator")]


def print_log_tail(lines: int = 25) -> None:
    tail = [line for line in LAST_LOG[0].splitlines() if line.strip()][-lines:]
    if tail and not VERBOSE:
        print("  RKNN's log ends:")
        print(textwrap.indent("\n".join(tail), "    | "))


def rknn_python() -> pathlib.Path:
    """The RKNN environment's interpreter: $RKNN_PYTHON, else the one the README's setup command creates."""
    configured = os.environ.get("RKNN_PYTHON", "").strip()
    if configured:
        python = pathlib.Path(configured)
        if not python.is_file():  # a stale setting: skip (77), as without the default environment
            raise Skip(
                f"RKNN_PYTHON={configured} is not a file: unset it, or create the environment with: {SETUP_COMMAND}"
            )
    else:
        python = DEFAULT_RKNN_PYTHON
        if not python.is_file():
            raise Skip(f"no RKNN-Toolkit2 environment; create it with: {SETUP_COMMAND}")
    probe = [str(python), "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('rknn') is None)"]
    if subprocess.run(probe, capture_output=True).returncode != 0:
        if configured:
            requirements = HERE / "requirements.txt"
            raise Skip(f"RKNN_PYTHON={python} has no rknn-toolkit2: {python} -m pip install -r {requirements}")
        raise Skip(f"{python} has no rknn-toolkit2; create the environment with: {SETUP_COMMAND}")
    return python


def run_second_half(out: pathlib.Path) -> None:
    """Start this file again in the RKNN environment, with the hidden flag: it runs steps 4-8 on DIR."""
    python = rknn_python()
    print(f"\n-- steps 4-8 run in the RKNN environment: {python} test.py {SECOND_HALF_FLAG}")
    sys.stdout.flush()
    start = time.monotonic()
    command = [str(python), str(pathlib.Path(__file__).resolve()), SECOND_HALF_FLAG, "--out", str(out)]
    # steps.json of steps 1-3 so far: the second half reads which torch exported, and what
    if problem := write_step_summary(out):
        raise OSError(problem)  # main() reports it as FAIL: cannot write models under DIR: ...
    proc = subprocess.run(command + (["-v"] if VERBOSE else []), cwd=HERE)
    results = out / RESULTS_FILE
    if results.is_file():  # the second half writes it, pass or fail: fold its steps' statuses into steps.json
        steps = json.loads(results.read_text(encoding="utf-8"))["steps"]
        STEP_STATUS.update({int(number): status for number, status in steps.items()})
    assert proc.returncode == 0, f"the second half (steps 4-8) exited {proc.returncode}"
    print(f"\n  steps 4-8 took {time.monotonic() - start:.0f} s")


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
