"""int8 post-training quantization of a model with custom nodes: ONNX Runtime, OpenVINO, RKNN.

Run: python test.py [--out DIR] [-v] [--seed N]

A small CNN with the rknn_cst custom nodes between its convolutions (rknn_cst::cstThreshold,
rknn_cst::cstDualResidual) is exported with dynamo=False (every torch release writes it), then
quantized to int8 with ONNX Runtime's quantize_static (QDQ). Its calibration fails in a session
without the nodes' kernels (microsoft/onnxruntime#10082); a file whose custom domain has no opset
import fails in its shape inference (microsoft/onnxruntime#23191). Both are reproduced and fixed;
the int8 file is run in ONNX Runtime with the kernels, checked against PyTorch computing the same
roundings, and against the float model within a bound derived from the file's scales, on inputs
the calibration never saw (--seed N draws other ones).
Every python block of README.md is in this file; the lines around them are the checks.
"""

import contextlib
import json
import pathlib
import re
import subprocess
import sys
import textwrap

RKNN_HALF = "--rknn-half"  # hidden: the first half starts this file again with it, in RKNN's venv
IN_RKNN = RKNN_HALF in sys.argv[1:]

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # the repository's harness.py
import harness  # the runner: the command line, the steps, the checks (harness.py)

from page_helpers import *  # noqa: F403 - the page's first block: common imports, helpers

# Each page script's imports, word for word (a pasted script starts with them) -----------------

if IN_RKNN:  # the second script's (README: "In the RKNN environment")
    # region rknn_imports
    import glob
    import os

    import numpy as np
    import onnx
    import torch
    import torch.nn.functional as F
    from rknn.api import RKNN
    from rknn.api.custom_op import get_node_attr
    from ruamel.yaml import YAML  # an rknn-toolkit2 dependency: reads its .cfg file
    # endregion
    # The first script's base classes, not installed here: its classes are defined, never used.
    CalibrationDataReader = MinMaxCalibrater = object
else:  # the first script's (the main environment)
    # region imports
    import pathlib
    import subprocess
    import tempfile

    import openvino as ov
    import torch.nn.functional as F
    from onnx import numpy_helper
    from onnxruntime.quantization import (
        CalibrationDataReader, QuantFormat, QuantType, quantize_static,
    )
    from onnxruntime.quantization.calibrate import MinMaxCalibrater, save_tensors_data

    try:  # steps 7 and 8: NNCF, OpenVINO's quantizer
        import nncf
    except AttributeError:  # nncf 3.4 reads torch.uint16 at import: torch < 2.3 has none
        nncf = None
    # endregion

MODEL: list = []  # step 1's model and inputs, for the later steps

# ---------------------------------------------------------------------------------------------
# 1. The float model
# ---------------------------------------------------------------------------------------------


# region model
class DualResidual(torch.autograd.Function):
    """cst::dual_residual as a Function: its symbolic writes one rknn_cst node (dynamo=False)"""

    @staticmethod
    def forward(ctx, x, y, alpha):
        return x * alpha - y, y * alpha - x

    @staticmethod
    def symbolic(g, x, y, alpha):
        x_res, y_res = g.op("rknn_cst::cstDualResidual", x, y, alpha_f=alpha, outputs=2)
        x_res.setType(x.type())
        y_res.setType(y.type())
        return x_res, y_res


@parse_args("v", "f", "f")
def threshold_symbolic(g, x, threshold, value):
    out = g.op("rknn_cst::cstThreshold", x, threshold_f=threshold, value_f=value)
    out.setType(x.type())
    return out



class SmallCNN(torch.nn.Module):
    """Each custom node between convolutions, the layers a quantizer turns into int8."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.threshold = torch.nn.Threshold(0.1, 0.1)  # max(x, 0.1): rknn_cst::cstThreshold
        self.conv_a = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.conv_b = torch.nn.Conv2d(8, 8, 1)
        self.conv2 = torch.nn.Conv2d(16, 3, 3, padding=1)

    def forward(self, x):
        h = self.threshold(self.conv1(x))
        a, b = DualResidual.apply(self.conv_a(h), self.conv_b(h), 0.5)
        return self.conv2(torch.cat([a, b], 1))
# endregion


def step1_float_model():
    """The float model: custom nodes between convolutions"""
    # region export_and_check_float
    register_custom_op_symbolic("aten::threshold", threshold_symbolic, 9)  # dynamo=False's rule
    os.makedirs("failures", exist_ok=True)  # for the files that show a failure (steps 2 and 4)
    torch.manual_seed(0)
    model = SmallCNN().eval()
    calibration = [torch.randn(1, 3, 32, 32).numpy() for _ in range(32)]  # what the quantizer sees
    fresh = [torch.randn(1, 3, 32, 32).numpy() for _ in range(8)]  # inputs it never sees
    torch.onnx.export(model, (torch.randn(1, 3, 32, 32),), "small_cnn.onnx", dynamo=False,
                      opset_version=17, input_names=["x"], output_names=["y"])
    onnx.checker.check_model(onnx.load("small_cnn.onnx"), full_check=True)
    print("  small_cnn.onnx:", " ".join(n.op_type for n in onnx.load("small_cnn.onnx").graph.node))
    for x in fresh:
        with torch.no_grad():
            expected = model(torch.from_numpy(x))
        (actual,) = run_ort("small_cnn.onnx", {"x": x}, ortx_options())
        np.testing.assert_allclose(actual, expected.numpy(), rtol=1e-5, atol=1e-5)
    print("  float32 in ONNX Runtime, with the kernels: matches PyTorch on 8 inputs")
    # endregion
    if harness.OPTIONS.seed:  # --seed N: other fresh inputs (tests/ try several)
        generator = torch.Generator().manual_seed(harness.OPTIONS.seed)
        fresh = [torch.randn(1, 3, 32, 32, generator=generator).numpy() for _ in range(8)]
        print(f"  --seed {harness.OPTIONS.seed}: the 8 fresh inputs drawn from that seed")
    assert harness.op_types("small_cnn.onnx") == [
        "Conv", "rknn_cst.cstThreshold", "Conv", "Conv", "rknn_cst.cstDualResidual", "Concat", "Conv"
    ]  # fmt: skip
    MODEL[:] = [model, calibration, fresh]


# ---------------------------------------------------------------------------------------------
# 2. quantize_static fails in calibration
# ---------------------------------------------------------------------------------------------


# region Inputs
class Inputs(CalibrationDataReader):
    """quantize_static's calibration data: one {input name: array} per call, then None."""

    def __init__(self, arrays):
        self.feeds = iter([{"x": x} for x in arrays])

    def get_next(self):
        return next(self.feeds, None)
# endregion


def step2_calibration_fails():
    """quantize_static: calibration runs the model in a session without your kernels"""
    model, calibration, fresh = MODEL
    with harness.quiet("Please consider"):  # its advice to pre-process (see step 3)
        # region quantize_without_kernels
        with expect_error("is not a registered function/op"):
            quantize_static("small_cnn.onnx", "failures/small_cnn_qdq.onnx", Inputs(calibration),
                            quant_format=QuantFormat.QDQ)
        # endregion
    assert not os.path.exists("failures/small_cnn_qdq.onnx")


# ---------------------------------------------------------------------------------------------
# 3. Calibrate with the kernels, then quantize
# ---------------------------------------------------------------------------------------------


# region MinMaxWithKernels
class MinMaxWithKernels(MinMaxCalibrater):
    """quantize_static's default calibrator (MinMax), its session with the kernels' library."""

    def create_inference_session(self):
        options = ortx_options()  # register_custom_ops_library: your kernels, here Python ones
        # as ORT's own calibrator does: the model as written, no graph optimization
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        self.infer_session = ort.InferenceSession(
            self.augmented_model_path, options, providers=self.execution_providers
        )
# endregion


def step3_quantize():
    """Calibrate in a session with the kernels, then quantize_static from the ranges"""
    model, calibration, fresh = MODEL
    with harness.quiet("Please consider"):
        # region calibrate_with_kernels
        with tempfile.TemporaryDirectory() as folder:  # for the calibrator's copy of the model
            augmented = os.path.join(folder, "augmented")  # every tensor an output
            calibrator = MinMaxWithKernels("small_cnn.onnx", augmented_model_path=augmented)
            calibrator.augment_graph()
            calibrator.create_inference_session()
            calibrator.collect_data(Inputs(calibration))  # the ranges each tensor took
            save_tensors_data(calibrator.compute_data(), "small_cnn_ranges.json")
        # Given the ranges, quantize_static runs no session: no kernel needed from here on.
        quantize_static("small_cnn.onnx", "small_cnn_qdq.onnx", None, quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                        calibration_cache_path="small_cnn_ranges.json")
        onnx.checker.check_model(onnx.load("small_cnn_qdq.onnx"), full_check=True)
        print_around_custom_nodes("small_cnn_qdq.onnx")
        # endregion
    nodes = harness.op_types("small_cnn_qdq.onnx")
    assert nodes.count("Conv") == 4 and nodes.count("QuantizeLinear") == 9, nodes


# region print_around_custom_nodes
def print_around_custom_nodes(path):
    """Each custom node with the ops that produce its inputs and consume its outputs."""
    graph = onnx.load(path).graph
    for node in [n for n in graph.node if n.domain == "rknn_cst"]:
        before = [n.op_type for n in graph.node if set(n.output) & set(node.input)]
        after = [n.op_type for n in graph.node if set(n.input) & set(node.output)]
        print(f"  {path}: {' '.join(before)} -> {node.op_type} -> {' '.join(after)}")
# endregion


# ---------------------------------------------------------------------------------------------
# 4. No opset import for the custom domain
# ---------------------------------------------------------------------------------------------


def step4_no_opset_import():
    """A file whose custom domain has no opset import: shape inference fails"""
    # region missing_opset_import
    edited = onnx.load("small_cnn.onnx")  # e.g. a graph whose nodes were swapped in by hand
    standard = [o for o in edited.opset_import if o.domain == ""]
    del edited.opset_import[:]
    edited.opset_import.extend(standard)  # the rknn_cst import is gone, its nodes are not
    onnx.save(edited, "failures/small_cnn_no_import.onnx")
    with expect_error("No opset import for domain"):
        quantize_static(
            "failures/small_cnn_no_import.onnx", "failures/small_cnn_no_import_qdq.onnx", None,
            calibration_cache_path="small_cnn_ranges.json",
        )
    # The fix: import every domain the nodes use (onnx.checker names the missing one too).
    edited.opset_import.append(onnx.helper.make_opsetid("rknn_cst", 1))
    onnx.checker.check_model(edited, full_check=True)
    # endregion
    assert not os.path.exists("failures/small_cnn_no_import_qdq.onnx")


# ---------------------------------------------------------------------------------------------
# 5. The int8 model in ONNX Runtime
# ---------------------------------------------------------------------------------------------


# region grids
def grids(path):
    """Each tensor a QDQ file rounds -> its grid (scale, lowest, highest value); and each
    convolution's weight and bias as the file stores them, dequantized."""
    graph = onnx.load(path).graph
    constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    made_by = {name: node for node in graph.node for name in node.output}
    activations, weights = {}, {}
    for node in graph.node:
        if node.op_type == "QuantizeLinear" and node.input[0] not in constants:
            scale, zero = constants[node.input[1]], constants[node.input[2]]
            name = "y" if node.input[0] == "y_QuantizeLinear_Input" else node.input[0]
            info = np.iinfo(zero.dtype)  # int8: -128..127
            scale, zero = float(scale), int(zero)
            activations[name] = (scale, (info.min - zero) * scale, (info.max - zero) * scale)
        if node.op_type == "Conv":
            dequantized = []
            for name in node.input[1:]:  # weight, bias: each from a DequantizeLinear
                q, scale, zero = (constants[n] for n in made_by[name].input)
                dequantized.append(torch.from_numpy(((q - zero) * scale).astype(np.float32)))
            weights[node.name.split("/")[1]] = dequantized  # "/conv1/Conv" -> conv1
    return activations, weights
# endregion


# region int8_in_pytorch
def int8_in_pytorch(model, x, grid, weights):
    """What an int8 runtime computes, in PyTorch, and a bound on |int8 - float| per element.
    grid: each tensor the runtime rounds (its ONNX name) -> (scale, lowest, highest value);
    weights: each convolution's weight and bias as the runtime holds them.
    Each rounding adds half a step, and what it clips; a convolution passes the error on through
    |weights| and adds its weights' rounding; max(x, 0.1) passes it as it is; the dual residual
    as alpha * e_x + e_y."""

    def rounded(name, t, error):
        if name not in grid:  # the runtime keeps this tensor in float
            return t, error
        scale, low, high = grid[name]  # the grid: low, low + scale, ..., high
        q = low + torch.round((t.clamp(low, high) - low) / scale) * scale
        return q, error + scale / 2 + (t - t.clamp(low, high)).abs()

    def conv(name, t, error, t_float):  # the int8 path, its error bound, the float path
        layer, (w, b) = getattr(model, name), weights[name]
        out = F.conv2d(t, w, b, padding=layer.padding)
        passed_on = F.conv2d(error, w.abs(), padding=layer.padding)
        own = F.conv2d(t_float, w - layer.weight, b - layer.bias, padding=layer.padding).abs()
        return *rounded(f"/{name}/Conv_output_0", out, passed_on + own), layer(t_float)

    with torch.no_grad():
        q, e = rounded("x", x, torch.zeros_like(x))
        q, e, f = conv("conv1", q, e, x)
        h, eh = rounded("/threshold/cstThreshold_output_0", q.clamp(min=0.1), e)
        fh = f.clamp(min=0.1)  # max(x, 0.1): a difference passes through at most as it is
        a, ea, fa = conv("conv_a", h, eh, fh)
        b, eb, fb = conv("conv_b", h, eh, fh)
        ra, era = rounded("/cstDualResidual_output_0", a * 0.5 - b, ea * 0.5 + eb)
        rb, erb = rounded("/cstDualResidual_output_1", b * 0.5 - a, eb * 0.5 + ea)
        c, ec = rounded("/Concat_output_0", torch.cat([ra, rb], 1), torch.cat([era, erb], 1))
        y, ey, fy = conv("conv2", c, ec, torch.cat([fa * 0.5 - fb, fb * 0.5 - fa], 1))
        y, ey = rounded("y", y, ey)
    return y.numpy(), ey.numpy(), fy.numpy()
# endregion


def step5_run_int8():
    """The int8 model in ONNX Runtime: what it computes, and how far from float"""
    model, calibration, fresh = MODEL
    # region run_int8_in_ort
    activations, weights = grids("small_cnn_qdq.onnx")
    as_written = ortx_options()
    as_written.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    worst_ratio, apart = 0.0, []
    for x in fresh:
        expected, bound, float_out = int8_in_pytorch(model, torch.from_numpy(x), activations,
                                                     weights)
        # As written (no graph optimization): every Q and DQ node runs, and PyTorch's roundings
        # give the same output, but where float32 put a value on the other side of a tie.
        (exact,) = run_ort("small_cnn_qdq.onnx", {"x": x}, as_written)
        steps = np.abs(exact - expected) / activations["y"][0]  # in steps of the output's grid
        assert steps.max() < 2.001, f"{steps.max():.3f} output steps apart"  # a tie, then y's
        apart.append(float(np.mean(steps > 0.001)))
        # As deployed (ORT's default: int8 kernels fused from the Q/DQ pairs): within the bound.
        (int8_out,) = run_ort("small_cnn_qdq.onnx", {"x": x}, ortx_options())
        np.testing.assert_array_less(np.abs(int8_out - float_out), bound)
        worst_ratio = max(worst_ratio, float((np.abs(int8_out - float_out) / bound).max()))
    assert max(apart) < 0.02, f"{max(apart):.1%} of the elements differ"  # a tie's reach
    same = f"{1 - max(apart):.1%} of the output or more"
    print(f"  as written: PyTorch's roundings give {same}, the rest within 2 steps")
    print(f"  as deployed: |int8 - float| at most {worst_ratio:.0%} of the bound at each element")
    # endregion


# ---------------------------------------------------------------------------------------------
# 6. The other choice: a float island around each custom node
# ---------------------------------------------------------------------------------------------


def step6_float_island():
    """The other choice: leave each custom node's neighbours in float"""
    model, calibration, fresh = MODEL
    with harness.quiet("Please consider"):
        # region float_island
        graph = onnx.load("small_cnn.onnx").graph
        custom = [n for n in graph.node if n.domain == "rknn_cst"]
        neighbours = [  # the nodes that produce a custom node's input or take its output
            n.name for n in graph.node if n.domain != "rknn_cst"
            and any(set(n.output) & set(c.input) or set(n.input) & set(c.output) for c in custom)
        ]
        print("  left in float:", ", ".join(neighbours))
        quantize_static("small_cnn.onnx", "small_cnn_qdq_island.onnx", None,
                        nodes_to_exclude=neighbours, calibration_cache_path="small_cnn_ranges.json")
        onnx.checker.check_model(onnx.load("small_cnn_qdq_island.onnx"), full_check=True)
        print_around_custom_nodes("small_cnn_qdq_island.onnx")
        for path in ("small_cnn_qdq.onnx", "small_cnn_qdq_island.onnx"):
            errors = []
            for x in fresh:
                (int8_out,) = run_ort(path, {"x": x}, ortx_options())
                (float_out,) = run_ort("small_cnn.onnx", {"x": x}, ortx_options())
                errors.append(np.abs(int8_out - float_out).max())
            nodes = onnx.load(path).graph.node
            dequantized = {o for n in nodes if n.op_type == "DequantizeLinear" for o in n.output}
            int8 = sum(n.op_type == "Conv" and n.input[1] in dequantized for n in nodes)
            print(f"  {path}: {int8} of 4 Conv int8, |int8 - float| <= {max(errors):.3f}")
        # endregion
    assert neighbours == ["/conv1/Conv", "/conv_a/Conv", "/conv_b/Conv", "/Concat"], neighbours
    island = harness.op_types("small_cnn_qdq_island.onnx")
    assert island.count("QuantizeLinear") < harness.op_types("small_cnn_qdq.onnx").count("QuantizeLinear")


# ---------------------------------------------------------------------------------------------
# 7. OpenVINO: NNCF quantizes the model read with the C++ extension
# ---------------------------------------------------------------------------------------------

NNCF = "nncf 3.4 reads torch.uint16 at import, which came with torch 2.3"


@harness.needs_torch("2.3", NNCF)
def step7_nncf():
    """OpenVINO: NNCF quantizes the model read with the C++ extension"""
    model, calibration, fresh = MODEL
    problem = harness.build_problem(python_headers=False)
    if problem:
        raise harness.Skip(f"steps 7 and 8 need a C++ build: {problem}")
    globals().update(deploy_openvino_cpp())  # CPP_HEADER and the like (the page includes them)
    # region build_library
    # deploy_openvino/'s C++ ops (its step 5), compiled against the openvino wheel in one command
    CST_OPS_CPP = CPP_HEADER + THRESHOLD_CPP + DUAL_RESIDUAL_CPP + FOO_CPP + EXTENSIONS_CPP
    pathlib.Path("cst_ops.cpp").write_text(CST_OPS_CPP)
    openvino_dir = pathlib.Path(ov.__file__).parent
    (libopenvino,) = openvino_dir.glob("libs/libopenvino.so.*")  # e.g. libopenvino.so.2641
    subprocess.run([
        os.environ.get("CXX", "c++"), "-std=c++17", "-O2", "-fPIC", "-shared",
        f"-I{openvino_dir / 'include'}", "cst_ops.cpp", "-o", "libcst_ops.so", str(libopenvino),
        f"-Wl,-rpath,{openvino_dir / 'libs'}",
    ], check=True)  # fmt: skip
    # endregion

    # region read_with_extension
    core = ov.Core()
    with expect_error("No conversion rule found for operations"):
        core.read_model("small_cnn.onnx")  # no extension: the read fails before NNCF sees it
    core.add_extension(os.path.abspath("libcst_ops.so"))  # deploy_openvino/'s C++ ops
    float_model = core.read_model("small_cnn.onnx")
    # endregion
    with harness.captured(held := []):  # its progress bar (shown with -v)
        # region nncf_quantize
        # subset_size: how many inputs to calibrate on (default 300, more than there are here).
        # overflow_fix=ENABLE: 7-bit weights in every layer, so that a CPU without VNNI, whose
        # int8 dot products saturate, computes what the file says (the default: first layer only)
        int8_model = nncf.quantize(
            float_model, nncf.Dataset(calibration), subset_size=len(calibration),
            advanced_parameters=nncf.AdvancedQuantizationParameters(
                overflow_fix=nncf.OverflowFix.ENABLE),
        )
        # endregion
    if harness.VERBOSE:
        print(held[0])
    # region save_ir
    ov.save_model(int8_model, "small_cnn_int8.xml", compress_to_fp16=False)  # and .bin
    print_around_custom_ops(int8_model, "small_cnn_int8.xml")
    # endregion
    types = [op.get_type_name() for op in int8_model.get_ordered_ops()]  # names: no node kept
    assert types.count("FakeQuantize") == 4, types
    # The README says an ignored scope is not needed: naming the two types changes nothing.
    scope = nncf.IgnoredScope(types=["CstThreshold", "CstDualResidual"])
    with harness.captured([]):
        ignoring = nncf.quantize(float_model, nncf.Dataset(calibration), ignored_scope=scope,
                                 subset_size=len(calibration),
                                 advanced_parameters=nncf.AdvancedQuantizationParameters(
                                     overflow_fix=nncf.OverflowFix.ENABLE))  # fmt: skip
    assert [op.get_type_name() for op in ignoring.get_ordered_ops()] == types
    assert fake_quantize_grids(ignoring, float_model)[0] == fake_quantize_grids(int8_model, float_model)[0]
    del ignoring


# region print_around_custom_ops
def print_around_custom_ops(model, name):
    """print_around_custom_nodes for an OpenVINO model. Its nodes go when it returns: a node
    that outlives the Core holding the extension's library crashes the process (segfault)."""
    for op in model.get_ordered_ops():
        if op.get_type_name() in ("CstThreshold", "CstDualResidual"):
            before = [i.get_node().get_type_name() for i in op.input_values()]
            targets = [i for output in op.outputs() for i in output.get_target_inputs()]
            after = [i.get_node().get_type_name() for i in targets]
            print(f"  {name}: {' '.join(before)} -> {op.get_type_name()} -> {' '.join(after)}")
# endregion


# ---------------------------------------------------------------------------------------------
# 8. The OpenVINO IR, compiled with the extension
# ---------------------------------------------------------------------------------------------


# region fake_quantize_grids
def fake_quantize_grids(int8_model, float_model):
    """What int8_in_pytorch needs from an NNCF model: each FakeQuantize's grid (scale, lowest,
    highest value), keyed by the ONNX name of the tensor it rounds, and each convolution's int8
    weight (Convert, then Multiply by a scale per output channel) with its float bias."""
    grid, weights = {}, {}
    float_ops = {op.get_friendly_name(): op for op in float_model.get_ops()}
    for op in int8_model.get_ordered_ops():
        if op.get_type_name() == "FakeQuantize":
            low, high = (float(op.input_value(i).get_node().get_data().max()) for i in (1, 2))
            scale = (high - low) / (op.get_attributes()["levels"] - 1)
            grid[op.input_value(0).get_any_name()] = (scale, low, high)
        if op.get_type_name() == "Convolution":  # friendly name e.g. /conv1/Conv/WithoutBiases
            multiply = op.input_value(1).get_node()
            int8 = multiply.input_value(0).get_node().input_value(0).get_node().get_data()
            scale = multiply.input_value(1).get_node().get_data()
            name = op.get_friendly_name().split("/")[1]
            bias = float_ops[f"{name}.bias"]
            weights[name] = [torch.from_numpy((int8 * scale).astype(np.float32)),
                             torch.from_numpy(bias.get_data().copy())]
    return grid, weights
# endregion


@harness.needs_torch("2.3", NNCF)
def step8_run_ir():
    """The OpenVINO IR: read it with the extension, compile, compare with float"""
    model, calibration, fresh = MODEL
    # region run_ir
    with expect_error("from unsupported opset: rknn_cst"):
        ov.Core().read_model("small_cnn_int8.xml")  # the IR names the ops; the library has them
    core = ov.Core()
    core.add_extension(os.path.abspath("libcst_ops.so"))
    float_model = core.read_model("small_cnn.onnx")
    int8_model = core.read_model("small_cnn_int8.xml")
    f32 = {"INFERENCE_PRECISION_HINT": "f32"}  # what stays float: f32 on a CPU with bf16 too
    float_compiled = core.compile_model(float_model, "CPU", f32)
    int8_compiled = core.compile_model(int8_model, "CPU", f32)
    grid, weights = fake_quantize_grids(int8_model, float_model)
    worst = 0.0
    for x in fresh:
        with torch.no_grad():
            expected = model(torch.from_numpy(x)).numpy()
        # The kernels, in float: what PyTorch computes (float32: summation order apart)
        np.testing.assert_allclose(float_compiled(x)[0], expected, rtol=1e-5, atol=1e-5)
        # int8: within the bound that the file's grids give
        _, bound, float_out = int8_in_pytorch(model, torch.from_numpy(x), grid, weights)
        int8_out = int8_compiled(x)[0]
        np.testing.assert_array_less(np.abs(int8_out - float_out), bound)
        worst = max(worst, float((np.abs(int8_out - float_out) / bound).max()))
    print("  float32, the same library: matches PyTorch on 8 inputs")
    print(f"  int8: {len(grid)} tensors rounded; |int8 - float| at most {worst:.0%} of the bound")
    # endregion
    del float_model, int8_model, float_compiled, int8_compiled  # before the library goes
    assert sorted(grid) == sorted([
        "x", "/threshold/cstThreshold_output_0", "/cstDualResidual_output_0",
        "/cstDualResidual_output_1",
    ]), sorted(grid)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# 9. RKNN-Toolkit2: a dataset file of calibration inputs
# ---------------------------------------------------------------------------------------------


def step9_rknn_dataset():
    """RKNN-Toolkit2: a dataset file of calibration inputs"""
    model, calibration, fresh = MODEL
    # region rknn_dataset
    # One .npy per input, shaped as the model takes it (NCHW); dataset.txt lists them, a line
    # each (a relative path is read from dataset.txt's folder).
    os.makedirs("calibration", exist_ok=True)
    with open("dataset.txt", "w") as listing:
        for i, x in enumerate(calibration):
            np.save(f"calibration/{i:02d}.npy", x)
            listing.write(f"calibration/{i:02d}.npy\n")
    for i, x in enumerate(fresh):  # for the comparison in RKNN's environment (step 11)
        np.save(f"fresh_input_{i}.npy", x)
        with torch.no_grad():
            np.save(f"fresh_float_{i}.npy", model(torch.from_numpy(x)).numpy())
    # endregion
    print(f"  dataset.txt: {len(calibration)} inputs; fresh_input_*.npy, fresh_float_*.npy: 8")


# In the RKNN environment (rknn-toolkit2 2.5.0, torch 2.4.0): steps 10 and 11, a second process ==


# region rknn_classes
class cstThreshold:  # noqa: N801 - named as the node's op_type (RKNN matches by it)
    """The simulator's kernel for rknn_cst::cstThreshold, as in deploy_rknn/: torch's rule."""

    op_type = "cstThreshold"
    received: list = []  # what compute() was handed, call by call

    def shape_infer(self, node, in_shapes, in_dtypes):
        return in_shapes.copy(), in_dtypes.copy()

    def compute(self, node, inputs):
        x = inputs[0]
        self.received.append(x.copy())
        threshold = get_node_attr(node, "threshold")
        value = get_node_attr(node, "value")
        return [np.where(x <= np.float32(threshold), value, x).astype(x.dtype)]


class cstDualResidual:  # noqa: N801
    """The simulator's kernel for rknn_cst::cstDualResidual: two inputs, two outputs."""

    op_type = "cstDualResidual"

    def shape_infer(self, node, in_shapes, in_dtypes):
        return in_shapes.copy(), in_dtypes.copy()

    def compute(self, node, inputs):
        x, y = inputs
        alpha = get_node_attr(node, "alpha")
        return [x * alpha - y, y * alpha - x]
# endregion


# region rknn_tolerance
def rknn_scales(cfg):
    """Each tensor RKNN rounds -> (scale, lowest, highest value), from the .cfg file that
    hybrid_quantization_step1 writes (YAML; int8 with a zero point per tensor)."""
    tensors = YAML(typ="safe").load(open(cfg))["quantize_parameters"]
    grids = {}
    for name, p in tensors.items():
        if p["scale"]:  # the float input and output have none
            scale, zero = p["scale"][0], p["zero_point"][0]
            grids[name] = (scale, (-128 - zero) * scale, (127 - zero) * scale)
    return grids


def rknn_int8_weights(w):
    """RKNN's int8 weights (rk3588), dequantized: a scale and zero point per output channel,
    from the channel's range (not in the .cfg: found by matching the simulator's layers)."""
    low = w.amin(dim=(1, 2, 3), keepdim=True).clamp(max=0)
    high = w.amax(dim=(1, 2, 3), keepdim=True).clamp(min=0)
    scale = (high - low) / 255
    zero = torch.round(-128 - low / scale)
    return (torch.clamp(torch.round(w / scale) + zero, -128, 127) - zero) * scale


def rknn_tolerance(x, grids, onnx_path, p=1e-6):
    """Per element, how far RKNN's int8 output may lie from the float model's. What is certain
    is computed: the float model with RKNN's int8 weights and each tensor clipped to its range
    (y_clipped). Each rounding to a grid of step s adds noise of variance s**2 / 12, carried
    through a convolution by its squared weights (sums: standard deviations added, as if
    correlated). Rounding noise is sub-Gaussian: it passes k standard deviations with
    probability at most 2 * exp(-k**2 / 2); k is chosen so that over the output's elements
    a false alarm has probability p. RKNN fuses Concat + conv2 into conv2's two halves, the
    first rounded (/cstDualResidual_output_0_conv), the second added in float (ConvAdd)."""
    w = {t.name: torch.tensor(onnx.numpy_helper.to_array(t), dtype=torch.float64)
         for t in onnx.load(onnx_path).graph.initializer}
    k = np.sqrt(2 * np.log(2 * np.size(x) / p))  # 6.7 for 3072 elements and p = 1e-6

    def rounded(name, t, var):  # clipped to the tensor's range; rounded: variance s**2 / 12
        scale, low, high = grids[name]
        return t.clamp(low, high), var + scale**2 / 12

    def conv(layer, h, t, var, bias=True, half=None):  # float path, clipped path, variance
        weight = w[f"{layer}.weight"] if half is None else w[f"{layer}.weight"][:, half]
        b = w[f"{layer}.bias"] if bias else None
        pad = weight.shape[-1] // 2
        int8_weight = rknn_int8_weights(weight)
        return (F.conv2d(h, weight, b, padding=pad), F.conv2d(t, int8_weight, b, padding=pad),
                F.conv2d(var, int8_weight**2, padding=pad))

    def added(v1, v2, c1=1.0):  # the variance of c1 * a + b, a and b possibly correlated
        return (c1 * v1.sqrt() + v2.sqrt()) ** 2

    h = torch.as_tensor(x, dtype=torch.float64)
    t, var = rounded("x_int8", h, torch.zeros_like(h))
    h, t, var = conv("conv1", h, t, var)
    t, var = rounded("/conv1/Conv_output_0", t, var)
    var = var * (t > 0.1 - k * var.sqrt())  # max(x, 0.1): no noise passes where x stays below
    h, t = h.clamp(min=0.1), t.clamp(min=0.1)
    t, var = rounded("/threshold/cstThreshold_output_0", t, var)
    a, ta, va = conv("conv_a", h, t, var)
    b, tb, vb = conv("conv_b", h, t, var)
    ta, va = rounded("/conv_a/Conv_output_0", ta, va)
    tb, vb = rounded("/conv_b/Conv_output_0", tb, vb)
    t0, v0 = rounded("/cstDualResidual_output_0", 0.5 * ta - tb, added(va, vb, 0.5))
    t1, v1 = rounded("/cstDualResidual_output_1", 0.5 * tb - ta, added(vb, va, 0.5))
    c0, t0, v0 = conv("conv2", 0.5 * a - b, t0, v0, bias=False, half=slice(0, 8))
    t0, v0 = rounded("/cstDualResidual_output_0_conv", t0, v0)
    c1, t1, v1 = conv("conv2", 0.5 * b - a, t1, v1, half=slice(8, 16))
    y_clipped, var = rounded("y_int8", t0 + t1, added(v0, v1))
    return (np.abs(y_clipped - (c0 + c1)) + k * var.sqrt()).numpy()
# endregion


def step10_rknn_int8_build():
    """RKNN: build in int8 with the dataset; what the custom op's compute receives"""
    needs_first_half(9)
    with rknn_log() as log:
        # region rknn_build_without_dataset
        registry = RKNN()  # a registration lasts for the process: register once
        for op in (cstThreshold(), cstDualResidual()):
            assert registry.reg_custom_op(op) == 0, op.op_type
        registry.release()

        rknn = RKNN()
        rknn.config(target_platform="rk3588")  # w8a8: int8 weights and activations, by default
        assert rknn.load_onnx(model="small_cnn.onnx") == 0
        assert rknn.build(do_quantization=True) == -1  # no dataset: it logs why, returns -1
        rknn.release()
        # endregion
    missing = "dataset file need be provided"
    line = next(line for line in log[0].splitlines() if missing in line)
    print("  build(do_quantization=True) returned -1:", line.split("E build: ", 1)[-1].strip())

    with rknn_log(echo=False) as log:
        # region rknn_int8_build
        cstThreshold.received.clear()
        rknn = RKNN(verbose=True)  # verbose: the layer table below
        rknn.config(target_platform="rk3588")
        assert rknn.load_onnx(model="small_cnn.onnx") == 0
        assert rknn.build(do_quantization=True, dataset="dataset.txt") == 0
        assert rknn.export_rknn("small_cnn_int8.rknn") == 0  # what a board loads
        rknn.release()
        for dump in glob.glob("check*_*.*"):  # verbose=True also writes these ONNX files here
            os.remove(dump)
        # endregion
    calls = cstThreshold.received
    dtypes = sorted({x.dtype.name for x in calls})
    print(f"  the int8 build called cstThreshold.compute {len(calls)} times, each with {dtypes}")
    layers = layer_targets(log[0])
    custom = [(op, dtype, at) for op, dtype, at in layers if op.startswith("cst")]
    print("  layers:", " | ".join(f"{op} {dtype} {at}" for op, dtype, at in layers))
    assert dtypes == ["float32"], dtypes
    assert len(calls) == 2 + 32, len(calls)  # 2 of RKNN's own inputs, then the 32 of dataset.txt
    assert custom == [("cstThreshold", "INT8", "CPU"), ("cstDualResidual", "INT8", "CPU")], custom
    RESULTS["evidence"].update(layers=layers, compute_calls=len(calls), compute_dtypes=dtypes)


def step11_rknn_run():
    """RKNN: the int8 model in the simulator against the float model"""
    needs_first_half(9)
    with rknn_log():
        # region rknn_run_int8
        rknn = RKNN()  # hybrid_quantization_step1 writes the scales the build chose, as text:
        rknn.config(target_platform="rk3588")  # small_cnn.quantization.cfg (and .model, .data)
        assert rknn.load_onnx(model="small_cnn.onnx") == 0
        assert rknn.hybrid_quantization_step1(dataset="dataset.txt") == 0
        rknn.release()
        grids = rknn_scales("small_cnn.quantization.cfg")

        rknn = RKNN()
        rknn.config(target_platform="rk3588")
        assert rknn.load_onnx(model="small_cnn.onnx") == 0
        assert rknn.build(do_quantization=True, dataset="dataset.txt") == 0
        assert rknn.init_runtime() == 0  # no target: the simulator
        cstThreshold.received.clear()
        worst = 0.0
        for i in range(8):
            x, float_out = np.load(f"fresh_input_{i}.npy"), np.load(f"fresh_float_{i}.npy")
            (int8_out,) = rknn.inference(inputs=[x], data_format="nchw")
            tolerance = rknn_tolerance(x, grids, "small_cnn.onnx")
            np.testing.assert_array_less(np.abs(int8_out - float_out), tolerance)
            worst = max(worst, float((np.abs(int8_out - float_out) / tolerance).max()))
        rknn.release()
        # endregion
    x = cstThreshold.received[0]  # what compute got in inference: dequantized int8, as float32
    on_grid = x / grids["/conv1/Conv_output_0"][0]
    off = float(np.abs(on_grid - np.round(on_grid)).max())
    print(f"  in inference, compute got float32 values on conv1's int8 grid (off by {off:.0e})")
    print(f"  |int8 - float| at most {worst:.0%} of the tolerance, on 8 inputs")
    assert off < 1e-3, off
    RESULTS["comparisons"]["small_cnn_int8.rknn"] = dict(worst=worst)


# ---------------------------------------------------------------------------------------------

STEPS = (
    step1_float_model, step2_calibration_fails, step3_quantize, step4_no_opset_import,
    step5_run_int8, step6_float_island, step7_nncf, step8_run_ir, step9_rknn_dataset,
)  # here; 10 and 11: RKNN_STEPS, in RKNN's environment
RKNN_STEPS = (step10_rknn_int8_build, step11_rknn_run)
KEPT = {  # what each step writes and claims valid; failure demonstrations below
    1: ("small_cnn.onnx",),
    3: ("small_cnn_qdq.onnx",),
    6: ("small_cnn_qdq_island.onnx",),
    7: ("small_cnn_int8.xml",),
}
FAILURES = ("failures/small_cnn_no_import.onnx",)
RESULTS_FILE = "rknn_results.json"  # the RKNN half's statuses and measurements (tests/ read it)
OTHER_FILES = (
    "small_cnn_ranges.json", "small_cnn_int8.bin", "cst_ops.cpp", "libcst_ops.so", "dataset.txt",
    "small_cnn_int8.rknn", "small_cnn.quantization.cfg", "small_cnn.model", "small_cnn.data",
    RESULTS_FILE, *(f"fresh_{kind}_{i}.npy" for kind in ("input", "float") for i in range(8)),
    *(f"calibration/{i:02d}.npy" for i in range(32)),
)  # fmt: skip
# For ERRORS.md: part of each reproduced error -> (what raises it, its cause[, fixing step])
CAUSES = {
    "is not a registered function/op": (
        "ONNX Runtime",
        "calibration runs the model in an `InferenceSession` of its own, without your kernels' "
        "library (microsoft/onnxruntime#10082): calibrate in a session that registers it",
        3,
    ),
    "No opset import for domain": (
        "ONNX Runtime",
        "its shape inference (`onnx.shape_inference`, strict) meets a node whose domain the "
        "file's `opset_import` does not list (microsoft/onnxruntime#23191): add the import",
        4,
    ),
    "No conversion rule found for operations": (
        "OpenVINO",
        "the ONNX frontend meets custom-domain nodes and no extension: `add_extension` the "
        "library with the ops before `read_model`",
        7,
    ),
    "from unsupported opset: rknn_cst": (
        "OpenVINO",
        "an IR with custom ops read without the library that defines them: `add_extension` "
        "first",
        8,
    ),
}


def options(parser) -> None:
    why = "draw the 8 fresh inputs from seed N, not the README's (tests/ try others)"
    parser.add_argument("--seed", type=int, default=0, metavar="N", help=why)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if RKNN_HALF in argv:  # the second process, in RKNN's environment
        return run_rknn_half(argv)
    passed = "every model in {out} checked; each int8 model within its bound of the float model"
    hooks = dict(other_files=OTHER_FILES, arguments=options, after=start_rknn_half, passed=passed)
    return harness.run(__file__, STEPS, kept=KEPT, failures=FAILURES, causes=CAUSES, argv=argv,
                       **hooks)  # fmt: skip

# ---------------------------------------------------------------------------------------------
# Test-only helpers
# ---------------------------------------------------------------------------------------------

HERE = pathlib.Path(__file__).resolve().parent


def deploy_openvino_cpp() -> dict:
    """CPP_HEADER, THRESHOLD_CPP, ...: deploy_openvino/test.py's C++ (its regions step5 to
    step5-5), which this page includes from there."""
    source = (HERE.parent / "deploy_openvino" / "test.py").read_text(encoding="utf-8")
    found: dict = {}
    for region in ("step5", "step5-2", "step5-3", "step5-4", "step5-5"):
        body = re.search(rf"^# region {region}\n(.*?)^# endregion", source, re.S | re.M).group(1)
        exec(body, found)  # CPP_HEADER = r"""...""" and the like
    return {k: v for k, v in found.items() if k.endswith("_CPP") or k == "CPP_HEADER"}


VENV = HERE.parent / ".venv-rknn"
PINS = HERE.parent / "deploy_rknn" / "requirements.txt"  # RKNN-Toolkit2's environment, as there
SETUP = f"python3 -m venv {VENV} && {VENV / 'bin' / 'pip'} install -r {PINS}"
RESULTS: dict = {"comparisons": {}, "evidence": {}}
FIRST_HALF: dict = {}  # in the second process: the first half's steps.json


def rknn_python() -> pathlib.Path:
    """RKNN's interpreter: $RKNN_PYTHON, else .venv-rknn's; Skip (77), saying what to do."""
    configured = os.environ.get("RKNN_PYTHON", "").strip()
    python = pathlib.Path(configured) if configured else VENV / "bin" / "python"
    if configured and not python.is_file():
        why = f"RKNN_PYTHON={configured} is not a file: unset it, or create the environment with"
        raise harness.Skip(f"steps 10-11: {why}: {SETUP}")
    if not python.is_file():
        raise harness.Skip(f"steps 10-11: no RKNN-Toolkit2 environment; create it with: {SETUP}")
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('rknn') is None)"
    if subprocess.run([str(python), "-c", probe], capture_output=True).returncode != 0:
        raise harness.Skip(f"steps 10-11: {python} has no rknn-toolkit2: {SETUP}")
    return python


def start_rknn_half(out: pathlib.Path) -> None:
    """harness.run's after(): this file again, in RKNN's environment, on DIR's files."""
    try:
        python = rknn_python()
    except harness.Skip as reason:  # steps.json says so for steps 10-11
        steps = {str(n): {"status": "skipped", "why": str(reason)} for n in (10, 11)}
        (out / RESULTS_FILE).write_text(json.dumps({"steps": steps}) + "\n", encoding="utf-8")
        harness.merge_summary(out / RESULTS_FILE)
        raise
    print(f"\n-- steps 10-11 run in the RKNN environment: {python} test.py {RKNN_HALF}")
    if problem := harness.write_summary(out / "steps.json"):  # steps 1-9, for the second half
        raise OSError(problem)
    sys.stdout.flush()
    command = [str(python), __file__, RKNN_HALF, "--out", str(out)]
    proc = subprocess.run(command + (["-v"] if harness.VERBOSE else []), cwd=HERE)
    if (out / RESULTS_FILE).is_file():  # written pass or fail
        harness.merge_summary(out / RESULTS_FILE)
    assert proc.returncode == 0, f"the second half (steps 10-11) exited {proc.returncode}"


def run_rknn_half(argv: list[str]) -> int:
    """main() of the second process: steps 10-11 in DIR (--out), then DIR/rknn_results.json."""
    out = pathlib.Path(argv[argv.index("--out") + 1]).resolve()
    harness.VERBOSE = "-v" in argv
    if not (out / "steps.json").is_file():
        print(f"FAIL: no {out / 'steps.json'}: run test.py itself, not with {RKNN_HALF}")
        return 1
    FIRST_HALF.update(json.loads((out / "steps.json").read_text(encoding="utf-8")))
    first = len(STEPS) + 1
    return harness.run_more(RKNN_STEPS, first=first, causes=CAUSES, out=out, summary=RESULTS_FILE,
                            extra=RESULTS)  # fmt: skip


def needs_first_half(number: int) -> None:
    """In the second process: a step that reads step NUMBER's files needs that step to have run."""
    step = FIRST_HALF["steps"][str(number)]
    assert step["status"] in ("runs", "differs"), f"step {number} did not run: {step}"


LESSON_LINE = re.compile(r'^  (?!File ")\S')  # the lesson's print()s; not a traceback's "  File"


@contextlib.contextmanager
def rknn_log(echo: bool = True):
    """RKNN logs a lot, coloured, on both descriptors: capture it (harness.captured) and print
    back the lesson's lines (all with -v), past the step's record, to sys.__stdout__. Yields
    [log text]; when the block fails, the log's last lines follow."""
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


def layer_targets(log_text: str) -> list[tuple[str, str, str]]:
    """(OpType, DataType, Target) of each layer in a verbose build's layer table, inputs and
    outputs left out."""
    dtype = "(FLOAT16|FLOAT|INT8|INT16|INT32|INT64|UINT8)"
    row = re.compile(rf"RKNN: \[[^\]]*\]\s+\d+\s+(\w+)\s+{dtype}\s+(NPU|CPU)\s")
    layers = [m.groups() for m in map(row.search, log_text.splitlines()) if m]
    return [layer for layer in layers if layer[0] not in ("InputOperator", "OutputOperator")]


if __name__ == "__main__":
    sys.exit(main())
