"""Symbolic functions for PyTorch ops that exist but will not export to ONNX.

Run: python test.py [--out DIR] [-v]

Steps 1-4: the default, torch.export-based exporter (dynamo=True): three ops export as they are;
a translation writes the custom node through a local schema; the op to key a translation on when
the error names a decomposed one; ONNX Runtime's com.microsoft::CDist. Steps 5-12: code that still
uses the TorchScript-based exporter (dynamo=False), the only one that reads
register_custom_op_symbolic: the custom node, the call without dynamo= that ignores the symbolic,
standard ops, an override, asinh, deform_conv2d, CDist. Every python block of README.md is in this
file; the lines around them are checks.
"""

import pathlib
import subprocess
import sys
import warnings

from onnxruntime.capi.onnxruntime_pybind11_state import get_all_operator_schema

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # the repository's harness.py
import harness  # the runner: the command line, the steps, the checks (harness.py)
from page_helpers import *  # noqa: F403 - the page's first block: common imports, helpers
from lesson_code import cst_threshold, deform_conv2d_symbolic, threshold_schema  # shared lessons

# The page's imports, then its helpers, word for word (a pasted page starts with them) ---------

# region imports
import ml_dtypes
import onnxscript
import torchvision
from onnx.defs import OpSchema
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun
from onnxscript import FLOAT
from torch.onnx import unregister_custom_op_symbolic
# endregion

# What the TorchScript exporter prints from C++ before a failing export raises (Notes): the graph
# from torch 2.8 on (2.4 only with verbose=True), and the ONNX graph too from 2.15 on.
DUMPS = [("Torch IR graph at exception", (2, 8)), ("ONNX graph being constructed during", (2, 15))]
IR_DUMP = tuple(text for text, since in DUMPS if harness.TORCH >= since)
NEEDS_2_6 = harness.TABLE + "; on 2.4, dynamo=True is torch.onnx.dynamo_export"


# === Part 1: the default exporter, dynamo=True ===

# --- 1. dynamo=True: three ops export as they are ---

# region models
class ThresholdModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.threshold = torch.nn.Threshold(0.1, 20)  # y = 20 if x <= 0.1 else x

    def forward(self, x):
        return self.threshold(x)


class AsinhModel(torch.nn.Module):
    def forward(self, x):
        return torch.asinh(x)


class DeformConvModel(torch.nn.Module):
    def forward(self, x, offset, weight, bias, mask):
        return torchvision.ops.deform_conv2d(
            x, offset, weight, bias, stride=2, padding=1, mask=mask
        )


def deform_conv_inputs():
    """x, offset, weight, bias, mask: 2 images, 4 channels, 9x9, to 6 channels; a 3x3 kernel."""
    n, c_in, c_out, size, k = 2, 4, 6, 9, 3
    out_size = (size + 2 * 1 - k) // 2 + 1  # stride 2, padding 1
    x = torch.randn(n, c_in, size, size)
    offset = torch.randn(n, 2 * k * k, out_size, out_size)  # (dy, dx) per tap and pixel
    weight = torch.randn(c_out, c_in, k, k)
    bias = torch.randn(c_out)
    mask = torch.rand(n, k * k, out_size, out_size)  # a weight in [0, 1) per tap and pixel
    return x, offset, weight, bias, mask
# endregion


@harness.needs_torch("2.6", NEEDS_2_6)
def step1_dynamo_as_they_are():
    """dynamo=True: Threshold, asinh and deform_conv2d export as they are"""
    # region dynamo_as_they_are
    # Nothing registered is needed: torch.export and torchlib handle all three ops.
    x, deform_inputs = torch.randn(1, 3, 10, 10), deform_conv_inputs()
    deform_model = DeformConvModel().eval()
    deform_atol = round(1e-5 * float(deform_model(*deform_inputs).abs().max()), 6)  # Notes
    for model, inputs, path, rtol, atol in [
        (ThresholdModel().eval(), (x,), "threshold_dynamo.onnx", 0.0, 0.0),
        (AsinhModel().eval(), (x * 4,), "asinh_dynamo.onnx", 1e-5, 1e-6),
        (deform_model, deform_inputs, "deform_conv2d_dynamo.onnx", 0.0, deform_atol),
    ]:
        # opset 20, the default from torch 2.9 (2.8 writes 18, where ONNX has no DeformConv)
        program = torch.onnx.export(model, inputs, dynamo=True, verbose=False, opset_version=20)
        program.save(path, external_data=False)
        assert_onnx_program(program, rtol=rtol, atol=atol)  # ONNX Runtime against PyTorch
        ops = [node.op_type for node in onnx.load(path).graph.node]
        print(f"  {path}: {ops}, matches PyTorch")
    # endregion
    for path in ("threshold_dynamo.onnx", "asinh_dynamo.onnx", "deform_conv2d_dynamo.onnx"):
        exported = harness.show(path)
        assert all(n.domain == "" for n in exported.graph.node), path
    assert [n.op_type for n in onnx.load("deform_conv2d_dynamo.onnx").graph.node] == ["DeformConv"]
    if harness.TORCH < (2, 9):
        harness.differs("dynamo=True writes opset 18 by default, where ONNX has no DeformConv")
        default_opset_before_2_9()


# --- 2. dynamo=True: Threshold as one custom node, through a local schema ---

# region threshold_translation
rknn_cst = onnxscript.values.Opset("rknn_cst", 1)


def threshold_translation(x, threshold: float, value: float):
    return rknn_cst.cstThreshold(x, threshold=threshold, value=value)
# endregion


# region threshold_script
# No schema needed: an @onnxscript.script function, its tensors annotated (x: FLOAT, -> FLOAT)
@onnxscript.script(rknn_cst)
def threshold_script(x: FLOAT, threshold: float, value: float) -> FLOAT:
    return rknn_cst.cstThreshold(x, threshold=threshold, value=value)
# endregion


# region export_threshold
def export_threshold(model, x, translation, path):
    table = {torch.ops.aten.threshold.default: translation}
    program = torch.onnx.export(
        model, (x,), dynamo=True, verbose=False, custom_translation_table=table
    )
    program.save(path, external_data=False)
    return program


def show_and_run(program, path):
    (node,) = onnx.load(path).graph.node
    attributes = sorted(onnx.helper.printable_attribute(a) for a in node.attribute)
    print(f"  {path}: one {node.domain}.{node.op_type} node, {attributes}")
    if onnx_op is not None:  # the Python stand-in kernel runs the node
        program.initialize_inference_session(ortx_session)
        assert_onnx_program(program, rtol=0, atol=0)
        print(f"  {path}: matches PyTorch")
# endregion


# threshold_schema and cst_threshold: lesson_code.py's region threshold_schema, on the page here
# region threshold_local_schema
# A plain function (no @onnxscript.script, no annotations) calls the op through its schema
def threshold_local_schema(x, threshold: float, value: float):
    return cst_threshold(x, threshold=threshold, value=value)
# endregion


# region output_shape
def output_shape(model):
    return [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]


def same_type_and_shape(ctx):
    ctx.set_output_type(0, ctx.get_input_type(0))
# endregion


@harness.needs_torch("2.6", NEEDS_2_6)
def step2_dynamo_custom_node():
    """dynamo=True: Threshold as one custom node, from an onnxscript translation"""
    # region threshold_no_schema_error
    model, x = ThresholdModel().eval(), torch.randn(1, 3, 10, 10)
    table = {torch.ops.aten.threshold.default: threshold_translation}
    with expect_error("No schema registered for 'cstThreshold' version '1' and domain 'rknn_cst'"):
        torch.onnx.export(model, (x,), dynamo=True, verbose=False, custom_translation_table=table)
    # endregion

    # region threshold_script_export
    path = "threshold_custom_dynamo_script.onnx"
    show_and_run(export_threshold(model, x, threshold_script, path), path)
    # endregion
    print("  onnx.defs knows cstThreshold:", onnx.defs.has("cstThreshold", "rknn_cst"))
    assert not onnx.defs.has("cstThreshold", "rknn_cst")

    # region threshold_local_schema_export
    path = "threshold_custom_dynamo.onnx"
    show_and_run(export_threshold(model, x, threshold_local_schema, path), path)
    # endregion
    for path in ("threshold_custom_dynamo.onnx", "threshold_custom_dynamo_script.onnx"):
        exported = harness.show(path)
        assert harness.opsets_of(exported).get("rknn_cst") == 1, harness.opsets_of(exported)
        assert harness.output_dims(exported) == [1, 3, 10, 10]  # typed by the exporter

    # region global_schema_shape_inference
    shapeless = onnx.load("threshold_custom_dynamo.onnx")
    shapeless.graph.output[0].type.tensor_type.ClearField("shape")  # as another tool may meet it
    inferred = onnx.shape_inference.infer_shapes(shapeless, strict_mode=True)
    print("  ONNX shape inference, schema local: output shape", output_shape(inferred))
    threshold_schema.set_type_and_shape_inference_function(same_type_and_shape)
    onnx.defs.register_schema(threshold_schema)  # for every library in this process, from now on
    inferred = onnx.shape_inference.infer_shapes(shapeless, strict_mode=True)
    print("  ONNX shape inference, schema registered: output shape", output_shape(inferred))
    with expect_error("but it is already registered"):
        onnx.defs.register_schema(threshold_schema)  # once per process: a second one fails
    onnx.defs.deregister_schema("cstThreshold", 1, "rknn_cst")
    print("  deregistered: onnx.defs knows it:", onnx.defs.has("cstThreshold", "rknn_cst"))
    # endregion
    assert output_shape(inferred) == [1, 3, 10, 10]
    assert not onnx.defs.has("cstThreshold", "rknn_cst")
    if onnx_op is None:
        raise harness.Skip(harness.ortx_problem())


# --- 3. dynamo=True: the error names an op the model never calls (decompositions) ---

# region CholeskyModel
class CholeskyModel(torch.nn.Module):
    def forward(self, a):
        return torch.linalg.cholesky(a)  # a: a batch of symmetric positive-definite matrices
# endregion


# region cholesky_translation
op = onnxscript.opset18  # ONNX's standard ops, for translations


def cholesky_translation(self, upper: bool = False):
    # Cholesky-Banachiewicz, one column at a time, unrolled for the size known at export time.
    n = self.shape[-1]
    columns = []
    for j in range(n):
        column = op.Gather(self, op.Constant(value_int=j), axis=-1)  # A[..., :, j]
        index = op.Constant(value_ints=[j])
        for done in columns:  # minus L[:, k] * L[j, k] for every column k < j
            column = op.Sub(column, op.Mul(done, op.Gather(done, index, axis=-1)))
        pivot = op.Sqrt(op.Gather(column, index, axis=-1))  # L[j, j]
        below = op.Constant(value_floats=[0.0] * j + [1.0] * (n - j))  # rows above j: 0 in L
        columns.append(op.Mul(op.Div(column, pivot), below))
    lower = op.Concat(*[op.Unsqueeze(column, [-1]) for column in columns], axis=-1)
    if upper:  # U = L transposed
        rank = len(self.shape)
        return op.Transpose(lower, perm=[*range(rank - 2), rank - 1, rank - 2])
    return lower
# endregion


# region cholesky_ex_translation
# What a reader writes after reading the error: a translation for the op it names (L, a code).
def cholesky_ex_translation(self, upper: bool = False, check_errors: bool = False):
    return cholesky_translation(self, upper), op.Constant(value_int=0)
# endregion


@harness.needs_torch("2.6", NEEDS_2_6)
def step3_decompositions():
    """dynamo=True: the error names an op the model never calls"""
    # region cholesky_error
    torch.manual_seed(0)
    x = torch.randn(2, 4, 4)
    a = x @ x.mT + 4 * torch.eye(4)  # symmetric positive definite: the Cholesky factor exists
    model = CholeskyModel().eval()
    with expect_error("No ONNX function found for <OpOverload(op='aten.linalg_cholesky_ex'"):
        torch.onnx.export(model, (a,), dynamo=True, verbose=False)
    # endregion

    # region explicit_capture
    # Explicit capture: torch.export's own errors surface here, and its graphs can be read.
    ep = torch.export.export(model, (a,), strict=False)
    calls = [str(node.target) for node in ep.graph.nodes if node.op == "call_function"]
    print("  the model calls:", calls)
    decomposed = ep.run_decompositions()
    after = [str(node.target) for node in decomposed.graph.nodes if node.op == "call_function"]
    print("  after run_decompositions():", after)
    # endregion
    assert calls == ["aten.linalg_cholesky.default"], calls
    assert "aten.linalg_cholesky_ex.default" in after, after
    if harness.TORCH < (2, 7):  # torch 2.6's assert_onnx_program (_testing.py) has no strategy=,
        # nor the check of the capture strategy that strategy=None turns off: a reader there
        # deletes the page's strategy=None, and so does this, from here on
        harness.differs("assert_onnx_program has no strategy= before 2.7: the page's strategy=None "
                        "is left out")
        global assert_onnx_program
        check = assert_onnx_program

        def assert_onnx_program(program, *, strategy=None, **kwargs):
            return check(program, **kwargs)

    if "with_effects" not in after:  # some releases (README, Notes): keying on the _ex op exports
        harness.differs("run_decompositions() drops aten._linalg_check_errors (no with_effects "
                        "node), so keying on linalg_cholesky_ex exports too")
        keyed_on_the_decomposed_op(ep, a)
    else:
        assert "with_effects" in after, after  # the error check, effectful (pytorch#184111)
        # region cholesky_ex_key_error
        table = {torch.ops.aten.linalg_cholesky_ex.default: cholesky_ex_translation}
        with expect_error("OpOverload(op='aten._linalg_check_errors'"):
            torch.onnx.export(ep, dynamo=True, verbose=False, custom_translation_table=table)
        # endregion

    # region cholesky_export
    table = {torch.ops.aten.linalg_cholesky.default: cholesky_translation}
    program = torch.onnx.export(ep, dynamo=True, verbose=False, custom_translation_table=table)
    program.save("cholesky_dynamo.onnx", external_data=False)
    # strategy=None: you captured the program yourself, there is no capture strategy to check
    assert_onnx_program(program, rtol=1e-5, atol=1e-5, strategy=None)
    ops = sorted({node.op_type for node in onnx.load("cholesky_dynamo.onnx").graph.node})
    print(f"  cholesky_dynamo.onnx: linalg_cholesky kept whole, standard ops {ops}")
    print("  cholesky_dynamo.onnx: matches PyTorch")
    # endregion

    exported = harness.show("cholesky_dynamo.onnx")
    assert all(n.domain == "" for n in exported.graph.node) and "Sqrt" in ops, ops


# --- 4. dynamo=True: com.microsoft::CDist, a node ONNX Runtime implements itself ---

# region CDistModel
class CDistModel(torch.nn.Module):
    def forward(self, x1, x2):
        return torch.cdist(x1, x2)  # euclidean distance of every row of x1 to every row of x2
# endregion

# region cdist_translation
def cdist_tolerance(x1, x2):
    # ORT's CDist computes |a|^2 + |b|^2 - 2 a.b with a matrix product, then the square root:
    # float32 rounding of that sum is at most 2 (k + 2) 2^-24 (|a|^2 + |b|^2), k the row length,
    # and the square root turns an error e of a distance near 0 into up to sqrt(e) (Notes).
    k = x1.shape[-1]
    largest = float((x1**2).sum(-1).max() + (x2**2).sum(-1).max())
    return float(np.sqrt(2 * (k + 2) * 2.0**-24 * largest))


msft = onnxscript.values.Opset("com.microsoft", 1)
# ONNX Runtime's CDist (ContribOperators.md) as a local schema: the checker never trusts it
cdist_schema = OpSchema(
    "CDist",
    "com.microsoft",
    1,
    inputs=[OpSchema.FormalParameter("A", "T"), OpSchema.FormalParameter("B", "T")],
    outputs=[OpSchema.FormalParameter("C", "T")],
    type_constraints=[("T", ["tensor(float)", "tensor(double)"], "float32 or float64 tensors")],
    attributes=[OpSchema.Attribute("metric", OpSchema.AttrType.STRING, "(sq)euclidean")],
)
cdist_op = onnxscript.values.Op(msft, "CDist", cdist_schema)


def cdist_translation(x1, x2, p: float = 2.0, compute_mode=None):
    if p != 2.0:
        raise ValueError(f"com.microsoft::CDist has no p={p} metric")
    return cdist_op(x1, x2, metric="euclidean")
# endregion


@harness.needs_torch("2.6", NEEDS_2_6)
def step4_dynamo_contrib_op():
    """dynamo=True: com.microsoft::CDist, a node ONNX Runtime implements itself"""
    # region cdist_error
    torch.manual_seed(0)
    model, x1, x2 = CDistModel().eval(), torch.randn(5, 3), torch.randn(7, 3)
    with expect_error("No ONNX function found for <OpOverload(op='aten._cdist_forward'"):
        torch.onnx.export(model, (x1, x2), dynamo=True, verbose=False)
    # endregion

    # The local schema is a transcription: check it against ONNX Runtime's own (a semi-private
    # module: the supported route is ContribOperators.md).
    check_against_onnxruntime(cdist_schema)

    # region cdist_contrib_export
    table = {torch.ops.aten.cdist.default: cdist_translation}
    program = torch.onnx.export(
        model, (x1, x2), dynamo=True, verbose=False, custom_translation_table=table
    )
    program.save("cdist_contrib_dynamo.onnx", external_data=False)
    assert_onnx_program(program, rtol=0, atol=round(cdist_tolerance(x1, x2), 6))  # plain ORT
    (node,) = onnx.load("cdist_contrib_dynamo.onnx").graph.node
    attributes = [onnx.helper.printable_attribute(a) for a in node.attribute]
    print(f"  cdist_contrib_dynamo.onnx: one {node.domain}.{node.op_type} node, {attributes}")
    print("  cdist_contrib_dynamo.onnx: matches PyTorch")
    print("  onnx.defs knows com.microsoft CDist:", onnx.defs.has("CDist", "com.microsoft"))
    # endregion

    exported = harness.show("cdist_contrib_dynamo.onnx")
    assert harness.opsets_of(exported).get("com.microsoft") == 1
    assert harness.output_dims(exported) == [5, 7] and not onnx.defs.has("CDist", "com.microsoft")


# === Part 2: code that still uses dynamo=False (the TorchScript-based exporter) ===

# --- 5. Threshold as one custom-domain node ---

# region threshold_no_attributes
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
# endregion


# region threshold_wrong_suffix
# A common slip: "_fs" looks like parse_args' "fs" descriptor, but g.op has no such suffix.
@parse_args("v", "f", "f")
def threshold_wrong_suffix(g, x, threshold, value):
    return g.op("rknn_cst::cstThreshold", x, param_fs=[threshold, value])
# endregion


# region threshold_typed
# Style B plus setType: a custom node has no shape inference; tell the exporter what comes out.
@parse_args("v", "f", "f")
def threshold_typed(g, x, threshold, value):
    y = g.op("rknn_cst::cstThreshold", x, threshold_f=threshold, value_f=value)
    y.setType(x.type())  # same dtype and shape as the input
    return y
# endregion


# region cstThreshold
# Style C's meaning, checked without ONNX Runtime: the ONNX reference evaluator runs a Python op
# that reads the list. The class name is the op_type.
class cstThreshold(OpRun):
    op_domain = "rknn_cst"

    def _run(self, x, param=None):
        threshold, value = param
        # torch's rule, NaN included: x <= threshold gives value, else x. float16 and bfloat16
        # compare in float32, as PyTorch's CPU kernel does.
        below = x.astype(np.float32) <= np.float32(threshold)
        return (np.where(below, value, x).astype(x.dtype),)
# endregion


def step5_custom_domain_node():
    """dynamo=False: Threshold as one custom-domain node"""
    with harness.quiet(*IR_DUMP):  # the exporter dumps the TorchScript graph before it raises
        # region threshold_builtin_error
        os.makedirs("failures", exist_ok=True)  # the models that show a failure go here
        torch.manual_seed(0)
        model, x = ThresholdModel().eval(), torch.randn(1, 3, 10, 10)
        with expect_error("Unsupported: ONNX export of operator threshold, non-zero threshold"):
            torch.onnx.export(
                model, (x,), "failures/threshold.onnx", dynamo=False, opset_version=12
            )
        # endregion

    with harness.quiet() as warned:  # the exporter's shape-inference warnings, counted below
        # region threshold_three_styles
        for symbolic, path in [
            (threshold_no_attributes, "failures/threshold_no_attributes.onnx"),
            (threshold_float_list, "failures/threshold_float_list.onnx"),
            (threshold_named_attributes, "threshold_untyped.onnx"),
        ]:
            register_custom_op_symbolic("aten::threshold", symbolic, 12)  # replaces the one before
            torch.onnx.export(
                model, (x,), path, dynamo=False, opset_version=12, custom_opsets={"rknn_cst": 1}
            )
            (node,) = onnx.load(path).graph.node
            attributes = [onnx.helper.printable_attribute(a) for a in node.attribute]
            print(f"  {path}: one {node.domain}.{node.op_type} node, attributes {attributes}")
        # endregion
    warning = "Warning: The shape inference of rknn_cst::cstThreshold type is missing"
    if harness.TORCH < (2, 0):  # torch 1.13 passes the C++ warning to Python's warnings module
        assert warned[0].count("User" + warning) == 9, warned[0]  # three times an export
        harness.differs("the warning is a Python UserWarning (shown once, where it is raised)")
    else:
        assert warned[0].count(warning) == 3, warned[0]
    print(f"  the exporter printed '{warning} ...' for each of the 3 exports")
    for path in [f"failures/threshold_{s}.onnx" for s in ("no_attributes", "float_list")] + [
        "threshold_untyped.onnx"
    ]:
        dims = harness.output_dims(harness.show(path))
        assert len(dims) == 4 and all(isinstance(d, str) for d in dims), dims  # sizes made up

    with harness.quiet(*IR_DUMP):
        # region wrong_suffix_error
        register_custom_op_symbolic("aten::threshold", threshold_wrong_suffix, 12)
        with expect_error("Invalid attribute specifier 'param_fs'"):
            torch.onnx.export(
                model, (x,), "failures/threshold.onnx", dynamo=False, opset_version=12
            )
        # endregion

    with harness.quiet() as warned:
        # region threshold_typed_export
        register_custom_op_symbolic("aten::threshold", threshold_typed, 12)
        torch.onnx.export(
            model, (x,), "threshold_custom.onnx", dynamo=False, opset_version=12,
            custom_opsets={"rknn_cst": 1},
        )
        output = onnx.load("threshold_custom.onnx").graph.output[0]
        dims = [d.dim_value for d in output.type.tensor_type.shape.dim]
        print(f"  with setType the output is {dims}")
        # endregion
    dims = harness.output_dims(harness.show("threshold_custom.onnx"))
    if harness.TORCH < (2, 0):  # torch 1.13 keeps its made-up sizes: setType's do not reach the file
        assert "shape inference" in warned[0] and all(isinstance(d, str) for d in dims), dims
        harness.differs("setType's sizes do not reach the file: the exporter warns, sizes made up")
    else:
        assert dims == [1, 3, 10, 10], dims
        assert "shape inference" not in warned[0], warned[0]  # setType: no warning, real sizes
        print("  with setType the exporter printed no shape-inference warning")

    # region threshold_runs
    evaluator = ReferenceEvaluator("failures/threshold_float_list.onnx", new_ops=[cstThreshold])
    (actual,) = evaluator.run(None, {"input": x.numpy()})
    np.testing.assert_array_equal(actual, model(x).numpy())  # a selection, no arithmetic: exact
    print("  failures/threshold_float_list.onnx matches PyTorch in onnx.reference")
    if onnx_op is not None:
        custom_ops = ort.SessionOptions()
        custom_ops.register_custom_ops_library(get_library_path())  # the kernels of @onnx_op
        for path in ["threshold_untyped.onnx", "threshold_custom.onnx"]:
            (actual,) = run_ort(path, {"input": x.numpy()}, custom_ops)
            compare(path, actual, model(x), rtol=0, atol=0)  # a selection, no arithmetic: exact
        with expect_error("Unable to find attribute 'threshold'"):  # Style A: no 0.1 and 20
            run_ort("failures/threshold_no_attributes.onnx", {"input": x.numpy()}, custom_ops)
        with expect_error("Unable to find attribute 'threshold'"):  # Style C: a list
            run_ort("failures/threshold_float_list.onnx", {"input": x.numpy()}, custom_ops)
    # endregion
    else:
        raise harness.Skip(harness.ortx_problem())


# --- 6. The call without dynamo=: the symbolic silently ignored ---


def step6_source_call():
    """The call without dynamo=: the symbolic silently ignored"""
    logged: list[str] = []
    with harness.captured(logged):  # progress lines, a warning, a logged traceback: checked below
        # region source_call
        register_custom_op_symbolic("aten::threshold", threshold_typed, 12)  # step 5's symbolic
        model, x = ThresholdModel().eval(), torch.randn(1, 3, 10, 10)
        program = torch.onnx.export(
            model, (x,), "threshold_source_as_written.onnx", opset_version=12
        )
        # endregion
    if harness.TORCH < (2, 9):
        harness.differs("the call without dynamo= is dynamo=False before 2.9: it uses the symbolic")
        source_call_before_2_9(x)
        return
    for text in [
        "Setting ONNX exporter to use operator set version 18 because the requested opset",
        "Failed to convert the model to the target version 12 using the ONNX C API.",
        "No Adapter From Version $13 for Cast",
    ]:
        assert text in logged[0], f"the export no longer logs {text!r}:\n{logged[0]}"
    print("  logged: 'Setting ONNX exporter to use operator set version 18 because ...'")
    print("  logged: 'Failed to convert the model to the target version 12 ...'")
    print("    (a traceback ending in 'No Adapter From Version $13 for Cast'); no error")

    # region source_call_file
    written = onnx.load("threshold_source_as_written.onnx")
    ops = [node.op_type for node in written.graph.node]
    opset = {o.domain: o.version for o in written.opset_import}[""]
    print(f"  SILENTLY IGNORED: the symbolic was not used; ops {ops}, opset {opset}, not 12")
    assert_onnx_program(program, rtol=0, atol=0)  # ONNX Runtime against PyTorch: exact
    print("  threshold_source_as_written.onnx: matches PyTorch")
    # endregion

    assert "cstThreshold" not in ops and opset == 18, (ops, opset)
    harness.show("threshold_source_as_written.onnx")


# --- 7. Threshold with standard ops only ---

# region threshold_standard_ops
@parse_args("v", "f", "f")
def threshold_standard_ops(g, x, threshold, value):
    # torch's rule, NaN included: y = value where x <= threshold, else x. The constants take
    # the input's dtype (opset 12 has no CastLike); float16 and bfloat16 inputs compare in
    # float32, as PyTorch's CPU kernel does.
    dtype = x.type().dtype()  # the dtype of the input the export traced
    compared, compare_dtype = x, dtype
    if dtype in (torch.float16, torch.bfloat16):
        compared = g.op("Cast", x, to_i=onnx.TensorProto.FLOAT)
        compare_dtype = torch.float32
    threshold_c = g.op("Constant", value_t=torch.tensor(threshold, dtype=compare_dtype))
    value_c = g.op("Constant", value_t=torch.tensor(value, dtype=dtype))
    return g.op("Where", g.op("LessOrEqual", compared, threshold_c), value_c, x)
# endregion


def step7_standard_ops():
    """dynamo=False: Threshold with standard ops only"""
    # region threshold_standard_export
    register_custom_op_symbolic("aten::threshold", threshold_standard_ops, 12)  # replaces step 5's
    model, x = ThresholdModel().eval(), torch.randn(1, 3, 10, 10)
    torch.onnx.export(model, (x,), "threshold_standard.onnx", dynamo=False, opset_version=12)
    (actual,) = run_ort("threshold_standard.onnx", {"input": x.numpy()})
    compare("threshold_standard.onnx", actual, model(x), rtol=0, atol=0)  # a selection: exact
    # endregion
    ops = [n.op_type for n in harness.show("threshold_standard.onnx").graph.node]
    assert sorted(ops) == ["Constant", "Constant", "LessOrEqual", "Where"], ops  # 2.2: in another order
    edges = x.clone()  # torch's rule where randn does not go: NaN, the threshold, infinities
    edges.view(-1)[:6] = torch.tensor([float("nan"), 0.1, float("inf"), -float("inf"), 0.09, 0.11])
    (actual,) = run_ort("threshold_standard.onnx", {"input": edges.numpy()})
    np.testing.assert_array_equal(actual, model(edges).numpy(), err_msg="NaN, 0.1, inf")


# --- 8. Override a built-in rule ---

# region elu_from_primitives
# aten::elu(Tensor self, Scalar alpha, Scalar scale, Scalar input_scale)
@parse_args("v", "f", "f", "f")
def elu_from_primitives(g, x, alpha, scale, input_scale):
    # ELU(x) = scale * (x if x > 0 else alpha * (exp(input_scale * x) - 1)), written out in
    # primitives for a runtime that lacks Elu.
    def const(v):
        return g.op("Constant", value_t=torch.tensor(v, dtype=torch.float32))

    exp = g.op("Exp", g.op("Mul", x, const(input_scale)))
    negative = g.op("Mul", const(alpha), g.op("Sub", exp, const(1.0)))
    chosen = g.op("Where", g.op("Greater", x, const(0.0)), x, negative)
    return g.op("Mul", chosen, const(scale))
# endregion


def step8_override_builtin():
    """dynamo=False: override aten::elu's own rule"""
    # region elu_override
    model, x = torch.nn.ELU(alpha=0.5).eval(), torch.randn(2, 3, 8)
    torch.onnx.export(
        model, (x,), "elu_builtin.onnx", dynamo=False, opset_version=12, output_names=["y"]
    )
    register_custom_op_symbolic("aten::elu", elu_from_primitives, 12)
    torch.onnx.export(
        model, (x,), "elu_override.onnx", dynamo=False, opset_version=12, output_names=["y"]
    )
    unregister_custom_op_symbolic("aten::elu", 12)  # back to the built-in rule
    ops = sorted({node.op_type for node in onnx.load("elu_override.onnx").graph.node})
    print(f"  the override was used: {ops}, no Elu")
    for path in ["elu_builtin.onnx", "elu_override.onnx"]:
        (actual,) = run_ort(path, {"input": x.numpy()})
        compare(path, actual, model(x), rtol=1e-5, atol=1e-6)  # exp in two libraries: last bits
    # endregion
    assert [n.op_type for n in harness.show("elu_builtin.onnx").graph.node] == ["Elu"]
    harness.show("elu_override.onnx")
    assert "Elu" not in ops and {"Exp", "Where"} <= set(ops), ops


# --- 9. aten::asinh at opset 9 ---

# region asinh_symbolic
def asinh_symbolic(g, x):
    return g.op("Asinh", x)  # in ONNX since opset 9; the TorchScript exporter has no rule
# endregion


def step9_asinh():
    """dynamo=False: aten::asinh at opset 9"""
    with harness.quiet(*IR_DUMP):
        # region asinh_error
        model, x = AsinhModel().eval(), torch.randn(2, 3) * 4
        for opset in (9, 17):
            with expect_error(f"operator 'aten::asinh' to ONNX opset version {opset}"):
                torch.onnx.export(
                    model, (x,), "failures/asinh.onnx", dynamo=False, opset_version=opset
                )
        # endregion

    # region asinh_symbolic_export
    register_custom_op_symbolic("aten::asinh", asinh_symbolic, 9)
    for opset, path in [(9, "asinh_opset9.onnx"), (17, "asinh_opset17.onnx")]:
        torch.onnx.export(model, (x,), path, dynamo=False, opset_version=opset, input_names=["x"])
        (actual,) = run_ort(path, {"x": x.numpy()})
        compare(path, actual, model(x), rtol=1e-5, atol=1e-6)  # two asinh implementations
    # endregion
    for path, opset in [("asinh_opset9.onnx", 9), ("asinh_opset17.onnx", 17)]:
        exported = harness.show(path)  # registered at opset 9, the symbolic served 17 too
        assert [n.op_type for n in exported.graph.node] == ["Asinh"], path
        assert harness.opsets_of(exported) == {"": opset}, path


# --- 10. torchvision::deform_conv2d with nothing registered ---


def step10_operator_export_type():
    """dynamo=False: torchvision::deform_conv2d with nothing registered"""
    # region deform_conv_setup
    model, inputs = DeformConvModel().eval(), deform_conv_inputs()
    names = ["x", "offset", "weight", "bias", "mask"]
    # endregion
    with harness.quiet(*IR_DUMP):
        if harness.TORCH in ((2, 8), (2, 9)):  # their errors.py lacks an f-prefix (Notes)
            harness.differs("UnsupportedOperatorError says 'unrecognized namespace {op_name}'")
            with expect_error("an operator with unrecognized namespace {op_name}."):
                torch.onnx.export(
                    model, inputs, "failures/deform_conv2d.onnx", dynamo=False, opset_version=19
                )
        else:
            # region deform_conv_error
            with expect_error("unrecognized namespace torchvision::deform_conv2d"):
                torch.onnx.export(
                    model, inputs, "failures/deform_conv2d.onnx", dynamo=False, opset_version=19
                )
            # endregion

    # Release noise, held back by name: torch 2.6 warns that operator_export_type is deprecated
    # with a FutureWarning, which Python shows (torch/onnx/utils.py:478); 2.7 makes it a
    # DeprecationWarning, which it does not
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Setting `operator_export_type` to something")
        # region export_type_fallbacks
        modes = torch.onnx.OperatorExportTypes
        for mode, path in [
            (modes.ONNX_FALLTHROUGH, "failures/deform_conv2d_fallthrough.onnx"),
            (modes.ONNX_ATEN_FALLBACK, "failures/deform_conv2d_aten.onnx"),
        ]:
            torch.onnx.export(
                model, inputs, path, dynamo=False, opset_version=19, input_names=names,
                operator_export_type=mode,
            )
        feeds = {name: tensor.numpy() for name, tensor in zip(names, inputs, strict=True)}
        with expect_error("torchvision:deform_conv2d(-1) is not a registered function/op"):
            run_ort("failures/deform_conv2d_fallthrough.onnx", feeds)
        with expect_error("org.pytorch.aten:ATen(-1) is not a registered function/op"):
            run_ort("failures/deform_conv2d_aten.onnx", feeds)
        # endregion
    for path, kept in [
        ("failures/deform_conv2d_fallthrough.onnx", "torchvision.deform_conv2d"),
        ("failures/deform_conv2d_aten.onnx", "org.pytorch.aten.ATen"),
    ]:
        exported = harness.show(path)
        nodes = [f"{n.domain}.{n.op_type}" for n in exported.graph.node if n.op_type != "Constant"]
        assert nodes == [kept], nodes


# --- 11. A symbolic for torchvision::deform_conv2d ---

# region deform_conv2d_placeholder
# A placeholder like MMDeploy's: a made-up op that keeps some of the tensors (three of five).
@parse_args("v", "v", "v", "v", "v", "i", "i", "i", "i", "i", "i", "i", "i", "none")
def deform_conv2d_placeholder(g, x, weight, offset, mask, bias, *unused):
    return g.op("custom::deform_conv2d", x, weight, offset)
# endregion


# deform_conv2d_symbolic: lesson_code.py's region, on the page here


def step11_deform_conv2d():
    """dynamo=False: a symbolic for torchvision::deform_conv2d"""
    # It registers torchvision::deform_conv2d's symbolic, and nothing unregisters it: a later
    # step's export of the op would use it.
    # The exporter warns from C++ that it has no shape for the placeholder's made-up op.
    with harness.quiet("The shape inference of custom::deform_conv2d type is missing"):
        # region deform_conv_placeholder_run
        model, inputs = DeformConvModel().eval(), deform_conv_inputs()
        names = ["x", "offset", "weight", "bias", "mask"]
        feeds = {name: tensor.numpy() for name, tensor in zip(names, inputs, strict=True)}
        register_custom_op_symbolic("torchvision::deform_conv2d", deform_conv2d_placeholder, 19)
        path = "failures/deform_conv2d_placeholder.onnx"
        torch.onnx.export(model, inputs, path, dynamo=False, opset_version=19, input_names=names)
        kept = [i.name for i in onnx.load(path).graph.input]
        print(f"  the placeholder model's inputs are {kept}: bias and mask are gone")
        with expect_error("custom:deform_conv2d(-1) is not a registered function/op"):
            run_ort(path, {name: feeds[name] for name in kept})
        # endregion
    assert kept == ["x", "offset", "weight"], kept
    harness.show("failures/deform_conv2d_placeholder.onnx")

    # region deform_conv2d_export
    register_custom_op_symbolic("torchvision::deform_conv2d", deform_conv2d_symbolic, 19)
    torch.onnx.export(
        model, inputs, "deform_conv2d.onnx", dynamo=False, opset_version=19, input_names=names
    )
    expected = model(*inputs)
    atol = round(1e-5 * float(expected.abs().max()), 6)  # 1e-5 of the largest output (Notes)
    (actual,) = run_ort("deform_conv2d.onnx", feeds)
    compare("deform_conv2d.onnx", actual, expected, rtol=0, atol=atol)
    # endregion
    (node,) = harness.show("deform_conv2d.onnx").graph.node
    assert list(node.input) == ["x", "weight", "offset", "bias", "mask"], node.input  # ONNX's order


# --- 12. dynamo=False: com.microsoft::CDist from a symbolic ---

# region cdist_contrib
# aten::cdist(Tensor x1, Tensor x2, float p=2, int? compute_mode=None)
@parse_args("v", "v", "f", "none")
def cdist_contrib(g, x1, x2, p, compute_mode):
    if p != 2.0:  # ORT's CDist has the euclidean (and squared euclidean) metric only
        raise ValueError(f"com.microsoft::CDist has no p={p} metric")
    y = g.op("com.microsoft::CDist", x1, x2, metric_s="euclidean")
    rows = [x1.type().sizes()[0], x2.type().sizes()[0]]
    y.setType(x1.type().with_sizes(rows))  # [rows of x1, rows of x2]
    return y
# endregion


def step12_contrib_symbolic():
    """dynamo=False: com.microsoft::CDist from a symbolic"""
    # region cdist_symbolic_export
    torch.manual_seed(0)
    model, x1, x2 = CDistModel().eval(), torch.randn(5, 3), torch.randn(7, 3)
    names = ["x1", "x2"]
    torch.onnx.export(
        model, (x1, x2), "cdist_builtin.onnx", dynamo=False, opset_version=17, input_names=names
    )
    register_custom_op_symbolic("aten::cdist", cdist_contrib, 9)  # replaces the built-in rule
    torch.onnx.export(
        model, (x1, x2), "cdist_contrib.onnx", dynamo=False, opset_version=17, input_names=names,
        custom_opsets={"com.microsoft": 1},
    )
    for path in ["cdist_builtin.onnx", "cdist_contrib.onnx"]:
        nodes = onnx.load(path).graph.node
        ops = sorted({f"{n.domain}.{n.op_type}".lstrip(".") for n in nodes})
        print(f"  {path}: {len(nodes)} node(s), {ops}")
    atol = round(cdist_tolerance(x1, x2), 6)
    for path in ["cdist_builtin.onnx", "cdist_contrib.onnx"]:
        (actual,) = run_ort(path, {"x1": x1.numpy(), "x2": x2.numpy()})  # plain ORT, no library
        compare(path, actual, model(x1, x2), rtol=0, atol=atol)
    # endregion
    exported, _ = harness.show("cdist_contrib.onnx"), harness.show("cdist_builtin.onnx")
    assert harness.op_types("cdist_contrib.onnx") == ["com.microsoft.CDist"]
    assert harness.opsets_of(exported) == {"": 17, "com.microsoft": 1}, exported.opset_import
    if harness.TORCH < (2, 0):  # torch 1.13 keeps its made-up sizes (step 5)
        assert all(isinstance(d, str) for d in harness.output_dims(exported)), exported.graph.output
        harness.differs("setType's sizes do not reach the file: the output's sizes are made up")
    else:
        assert harness.output_dims(exported) == [5, 7]
    assert not onnx.defs.has("CDist", "com.microsoft")  # the checker passed CDist unchecked


# --- 13. dynamo=True: a float16 or bfloat16 model, the node between Casts ---

# region threshold_half
# The kernel takes float32 only (onnxruntime-extensions' Python ops have no float16, no
# bfloat16), so the schema's T stays tensor(float), and a half model casts around the node.
def threshold_cast_translation(x, threshold: float, value: float):
    y = cst_threshold(op.Cast(x, to=FLOAT.dtype), threshold=threshold, value=value)
    return op.CastLike(y, x)  # back to the model's dtype (ONNX's CastLike: opset 15 or later)
# endregion


@harness.needs_torch("2.6", NEEDS_2_6)
def step13_dynamo_half_precision():
    """dynamo=True: a float16 or bfloat16 model, the node between Casts"""
    # region bfloat16_node_error
    model, x = ThresholdModel().eval(), torch.randn(1, 3, 10, 10).to(torch.bfloat16)
    path = "failures/threshold_bf16_dynamo.onnx"
    export_threshold(model, x, threshold_local_schema, path)  # step 2's: the schema's T = float
    (node,) = onnx.load(path).graph.node
    print(f"  {path}: exported, {node.op_type} on bfloat16 (schema: float)")
    if onnx_op is not None:
        with expect_error("Type 'tensor(bfloat16)' of input parameter (x)"):
            ort.InferenceSession(path, ortx_options(), providers=["CPUExecutionProvider"])
    with expect_error("has unsupported type: tensor(bfloat16)"):
        check_with_schemas(path, threshold_schema)  # right after the export: caught there
    # endregion
    if onnx_op is not None:
        bfloat16_kernel_aborts()

    # region half_precision_dynamo
    for dtype in (torch.float16, torch.bfloat16):
        x = torch.randn(1, 3, 10, 10).to(dtype)
        x[0, 0, 0, 0] = 0.1  # 0.09998 in float16, 0.1001 in bfloat16: one each side of 0.1
        path = f"threshold_{str(dtype)[6:]}_dynamo.onnx"
        export_threshold(model, x, threshold_cast_translation, path)  # step 2's
        check_with_schemas(path, threshold_schema)
        print(f"  {path}: {[n.op_type for n in onnx.load(path).graph.node]}, full check passed")
        if onnx_op is not None:
            if dtype == torch.bfloat16:  # session.run takes numpy arrays: none is bfloat16
                with expect_error("Numpy_type 256 can't be converted to MLDataType"):
                    x_numpy = x.float().numpy().astype(ml_dtypes.bfloat16)
                    run_ort(path, {"x": x_numpy}, ortx_options())
            (actual,) = run_ort_torch(path, [x], ortx_options())
            assert actual.dtype == dtype and torch.equal(actual, model(x))  # a selection: exact
            print(f"  {path}: {actual.dtype} out, equal to PyTorch's")
    # endregion
    for path in KEPT[13]:
        exported = harness.show(path)  # torch 2.6's exporter keeps the CastLike; later a Cast
        ops = harness.op_types(path)
        assert ops[:2] == ["Cast", "rknn_cst.cstThreshold"] and ops[2] in ("Cast", "CastLike"), ops
        assert harness.output_dims(exported) == [1, 3, 10, 10]
    if onnx_op is None:
        raise harness.Skip(harness.ortx_problem())


# --- 14. dynamo=False: a float16 or bfloat16 model, the node between Casts ---

# region threshold_cast_symbolic
@parse_args("v", "f", "f")
def threshold_cast_symbolic(g, x, threshold, value):  # step 13's Casts, for dynamo=False
    x32 = g.op("Cast", x, to_i=onnx.TensorProto.FLOAT)
    y = g.op("rknn_cst::cstThreshold", x32, threshold_f=threshold, value_f=value)
    y.setType(x.type().with_dtype(torch.float32))
    return g.op("CastLike", y, x)
# endregion


@harness.needs_torch("2.1", "PyTorch's CPU threshold has no float16 before 2.1 (torch 1.13: "
                     "\"threshold_cpu\" not implemented for 'Half'): no reference to compare with")
def step14_torchscript_half_precision():
    """dynamo=False: a float16 or bfloat16 model, the node between Casts"""
    # region half_precision_torchscript
    model = ThresholdModel().eval()
    register_custom_op_symbolic("aten::threshold", threshold_cast_symbolic, 15)
    for dtype in (torch.float16, torch.bfloat16):
        x = torch.randn(1, 3, 10, 10).to(dtype)
        x[0, 0, 0, 0] = 0.1  # as in step 13
        path = f"threshold_{str(dtype)[6:]}.onnx"
        torch.onnx.export(
            model, (x,), path, dynamo=False, opset_version=17, custom_opsets={"rknn_cst": 1}
        )
        check_with_schemas(path, threshold_schema)
        print(f"  {path}: {[n.op_type for n in onnx.load(path).graph.node]}, full check passed")
        if onnx_op is not None:
            (actual,) = run_ort_torch(path, [x], ortx_options())
            assert actual.dtype == dtype and torch.equal(actual, model(x))  # a selection: exact
            print(f"  {path}: {actual.dtype} out, equal to PyTorch's")
    # endregion
    for path in KEPT[14]:
        exported = harness.show(path)
        assert harness.op_types(path) == ["Cast", "rknn_cst.cstThreshold", "CastLike"]
        assert harness.opsets_of(exported) == {"": 17, "rknn_cst": 1}, exported.opset_import
    unregister_custom_op_symbolic("aten::threshold", 15)
    if onnx_op is None:
        raise harness.Skip(harness.ortx_problem())


# ---------------------------------------------------------------------------------------------

KEPT = {  # what each step writes and claims valid; failure demonstrations below
    1: ("threshold_dynamo.onnx", "asinh_dynamo.onnx", "deform_conv2d_dynamo.onnx"),
    2: ("threshold_custom_dynamo.onnx", "threshold_custom_dynamo_script.onnx"),
    3: ("cholesky_dynamo.onnx",),
    4: ("cdist_contrib_dynamo.onnx",),
    5: ("threshold_untyped.onnx", "threshold_custom.onnx"),
    6: ("threshold_source_as_written.onnx",),
    7: ("threshold_standard.onnx",),
    8: ("elu_builtin.onnx", "elu_override.onnx"),
    9: ("asinh_opset9.onnx", "asinh_opset17.onnx"),
    11: ("deform_conv2d.onnx",),
    12: ("cdist_builtin.onnx", "cdist_contrib.onnx"),
    13: ("threshold_float16_dynamo.onnx", "threshold_bfloat16_dynamo.onnx"),
    14: ("threshold_float16.onnx", "threshold_bfloat16.onnx"),
}
FAILURES = (
    "failures/threshold_no_attributes.onnx",
    "failures/threshold_float_list.onnx",
    "failures/deform_conv2d_fallthrough.onnx",
    "failures/deform_conv2d_aten.onnx",
    "failures/deform_conv2d_placeholder.onnx",
    "failures/deform_conv2d_dynamo_opset18.onnx",  # torch 2.8 only: DeformConv at opset 18 (step 1)
    "failures/cholesky_ex_dynamo.onnx",  # torch 2.8 only: keyed on the decomposed op (step 3)
    "failures/threshold_bf16_dynamo.onnx",
)
# For ERRORS.md: part of each reproduced error -> (what raises it, its cause[, fixing step])
CAUSES = {
    "Unsupported: ONNX export of operator threshold, non-zero threshold": ("dynamo=False",
        "the built-in symbolic for `aten::threshold` handles only `threshold == 0`: register "
        "your own for other values"),
    "Invalid attribute specifier 'param_fs'": ("dynamo=False",
        "`g.op` attribute names end in a type suffix (`_i`, `_f`, `_s`, `_t`, `_z`, `_g`, `_ty`), "
        "lists included: a list of floats is `param_f=[...]`, not `param_fs`"),
    "Unable to find attribute 'threshold'": ("ONNX Runtime",
        "the onnxruntime-extensions kernel reads a scalar float attribute `threshold` that the "
        "node does not have (the symbolic dropped the arguments, or wrote them as one list)"),
    "Exporting the operator 'aten::asinh' to ONNX opset version": ("dynamo=False",
        "PyTorch has no symbolic for `aten::asinh` at any opset, though ONNX has `Asinh` from "
        "opset 9: register one (a one-to-one mapping)"),
    "unrecognized namespace {op_name}": ("dynamo=False",
        "torch 2.8 and 2.9's text for an op of a library namespace (`torchvision::deform_conv2d`) "
        "with no symbolic: its name is missing from the message", 11),
    "unrecognized namespace torchvision::deform_conv2d": ("dynamo=False",
        "a library's op (`torchvision::deform_conv2d`) with no symbolic: register one for its "
        "namespace and name", 11),
    "torchvision:deform_conv2d(-1) is not a registered function/op": ("ONNX Runtime",
        "`operator_export_type=ONNX_FALLTHROUGH` wrote the op as a `torchvision` node that no "
        "runtime implements", 11),
    "org.pytorch.aten:ATen(-1) is not a registered function/op": ("ONNX Runtime",
        "`operator_export_type=ONNX_ATEN_FALLBACK` wrote an `ATen` node, meant for a runtime "
        "linked with PyTorch", 11),
    "custom:deform_conv2d(-1) is not a registered function/op": ("ONNX Runtime",
        "a symbolic that writes a custom-domain node: ONNX Runtime has no kernel for it (and "
        "this placeholder dropped `bias` and `mask`)"),
    "No Op registered for DeformConv with domain_version of 18": ("onnx.checker",
        "`dynamo=True` before torch 2.9 exports at opset 18 by default; ONNX has `DeformConv` "
        "only from opset 19: pass `opset_version`"),
    "No schema registered for 'cstThreshold' version '1' and domain 'rknn_cst'": ("dynamo=True",
        "`Opset(domain, 1).Name` looks the op up in ONNX's schema registry, which has no custom "
        "ops: annotate an `@onnxscript.script` translation (`x: FLOAT`, `-> FLOAT`), or call "
        "`onnxscript.values.Op(opset, name, schema)` with a local `OpSchema`"),
    "but it is already registered": ("onnx.defs",
        "`onnx.defs.register_schema` ran twice for one op in one process (a re-run cell, two "
        "libraries): keep the schema local, or `deregister_schema` first"),
    "No ONNX function found for <OpOverload(op='aten.linalg_cholesky_ex'": ("dynamo=True",
        "`torch.linalg.cholesky` was decomposed into `aten.linalg_cholesky_ex`, which has no "
        "translation: key `custom_translation_table` on the op the model calls"),
    "of <OpOverload(op='aten._linalg_check_errors'": ("dynamo=True",
        "a translation keyed on the decomposed op (`aten.linalg_cholesky_ex`) leaves its error "
        "check behind a `with_effects` node the exporter cannot translate"),
    "No ONNX function found for <OpOverload(op='aten._cdist_forward'": ("dynamo=True",
        "`torch.cdist` reaches the exporter as `aten._cdist_forward`, which has no translation"),
    "Type 'tensor(bfloat16)' of input parameter (x) of operator (cstThreshold)": ("ONNX Runtime",
        "a custom node of a type its kernel is not declared for (`PyCustomOpDef.dt_float`): the "
        "exporter wrote the model's bfloat16, though the local schema lists `tensor(float)` only; "
        "cast to float32 around the node", 13),
    "has unsupported type: tensor(bfloat16)": ("onnx.checker",
        "with the op's schema registered, the checker refuses a node of a type the schema does not "
        "list: the check the exporter does not make for a local schema", 13),
    "Numpy_type 256 can't be converted to MLDataType": ("ONNX Runtime",
        "`InferenceSession.run` takes numpy arrays, and an `ml_dtypes.bfloat16` array (numpy type "
        "256) is none it knows: hand torch tensors over by DLPack through an IO binding", 13),
    "Unsupported ONNX Tensor type: 16": ("ONNX Runtime",
        "onnxruntime-extensions' Python kernels take no bfloat16 (nor float16): one declared "
        "`dt_bfloat16` aborts the process at its first run; keep it float32, cast around the node",
        13),
}


def main(argv: list[str] | None = None) -> int:
    return harness.run(__file__, globals(), kept=KEPT, failures=FAILURES, causes=CAUSES, argv=argv)


# ---------------------------------------------------------------------------------------------
# Test-only helpers: what a step does on an older torch, and a check no page block makes
# ---------------------------------------------------------------------------------------------


def source_call_before_2_9(x):
    """Step 6 before torch 2.9: the source's call means dynamo=False, so the symbolic is used (the
    model is step 5's)."""
    exported = harness.show("threshold_source_as_written.onnx")
    ops = harness.op_types("threshold_source_as_written.onnx")
    assert ops == ["rknn_cst.cstThreshold"], ops
    assert harness.opsets_of(exported) == {"": 12, "rknn_cst": 1}, exported.opset_import
    print(f"  the symbolic was used (dynamo=False is the default before 2.9): {ops}, opset 12")
    if onnx_op is not None:
        custom_ops = ort.SessionOptions()
        custom_ops.register_custom_ops_library(get_library_path())
        (actual,) = run_ort("threshold_source_as_written.onnx", {"input": x.numpy()}, custom_ops)
        compare("threshold_source_as_written.onnx", actual, ThresholdModel()(x), rtol=0, atol=0)


def default_opset_before_2_9():
    """Step 1 before torch 2.9: dynamo=True's default opset is 18, where ONNX has no DeformConv."""
    path = "failures/deform_conv2d_dynamo_opset18.onnx"
    program = torch.onnx.export(
        DeformConvModel().eval(), deform_conv_inputs(), dynamo=True, verbose=False
    )
    program.save(path, external_data=False)
    print(f"  {path}: DeformConv at opset 18, the default here; the checker refuses it:")
    with expect_error("No Op registered for DeformConv with domain_version of 18"):
        onnx.checker.check_model(onnx.load(path), full_check=True)


def keyed_on_the_decomposed_op(ep, a):
    """Step 3 where the decompositions drop the error check: a translation keyed on
    linalg_cholesky_ex exports (the same graph as the fix); kept under failures/."""
    table = {torch.ops.aten.linalg_cholesky_ex.default: cholesky_ex_translation}
    path = "failures/cholesky_ex_dynamo.onnx"
    program = torch.onnx.export(ep, dynamo=True, verbose=False, custom_translation_table=table)
    program.save(path, external_data=False)
    assert_onnx_program(program, rtol=1e-5, atol=1e-5, strategy=None)
    harness.show(path)
    print(f"  {path}: keyed on the decomposed op, it exports here; torch 2.14 refuses that key")


class Aborted(Exception):
    """A child process that died (a C++ std::terminate): its stderr."""


BFLOAT16_KERNEL = """
import numpy as np
import onnxruntime as ort
from onnxruntime_extensions import PyCustomOpDef, get_library_path, onnx_op

@onnx_op(op_type="rknn_cst::cstThreshold", inputs=[PyCustomOpDef.dt_bfloat16],
         outputs=[PyCustomOpDef.dt_bfloat16],
         attrs={"threshold": PyCustomOpDef.dt_float, "value": PyCustomOpDef.dt_float})
def kernel(x, threshold, value):
    return x

options = ort.SessionOptions()
options.register_custom_ops_library(get_library_path())
session = ort.InferenceSession(PATH, options, providers=["CPUExecutionProvider"])
print("session created", flush=True)
bits = np.zeros((1, 3, 10, 10), np.uint16)  # bfloat16 zeros, as raw bits
binding = session.io_binding()
binding.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, 16))
binding.bind_output(session.get_outputs()[0].name)
session.run_with_iobinding(binding)
print("ran", flush=True)
"""


def bfloat16_kernel_aborts():
    """Step 13: the kernel declared dt_bfloat16 instead, on the bfloat16 file, in a child process
    (it aborts the process that runs it): the session is created, its first run aborts."""
    code = BFLOAT16_KERNEL.replace("PATH", repr("failures/threshold_bf16_dynamo.onnx"))
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert child.stdout.split() == ["session", "created"], (child.stdout, child.stderr)
    assert child.returncode != 0, child.returncode
    print("  the same kernel declared PyCustomOpDef.dt_bfloat16, in a child process:")
    with expect_error("Unsupported ONNX Tensor type: 16"):
        raise Aborted(child.stderr.strip())


def check_against_onnxruntime(schema: OpSchema) -> None:
    """The local CDist schema against ONNX Runtime's own (get_all_operator_schema, semi-private):
    the same inputs, outputs, types and attributes."""
    (ort_schema,) = [s for s in get_all_operator_schema() if (s.domain, s.name) == (
        schema.domain, schema.name)]

    def described(s):
        return ([p.name for p in s.inputs], [p.name for p in s.outputs],
                {t.type_param_str: sorted(t.allowed_type_strs) for t in s.type_constraints},
                {n: a.type.name for n, a in s.attributes.items()})

    assert described(schema) == described(ort_schema), (described(schema), described(ort_schema))
    print("  the local CDist schema matches ONNX Runtime's own: inputs, outputs, types, attributes")


if __name__ == "__main__":
    sys.exit(main())
