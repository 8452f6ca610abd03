"""Custom nodes with a dynamic batch and a dynamic length, under both exporters.

Run: python test.py [--out DIR] [-v]

A model exported from one example input has that input's sizes written into the file: ONNX Runtime
refuses another batch. dynamo=False: dynamic_axes names the dims, and a custom node's setType must
pass them through (a frozen size gives wrong results without an error). dynamo=True: dynamic_shapes
in one call (strings name the dims), or with torch.export.Dim, captured explicitly, to see what
torch.export decided; a fake kernel derives the output's sizes (torch.library.opcheck checks it), a
data-dependent size is an unbacked symbol, and a translation that reads a traced size fails. The
data-dependent op then becomes one custom node, run with a Python kernel. Every model then runs at
three batch sizes and two lengths against PyTorch. Every python block of
README.md is in this file; the lines around them are the
checks.
"""

import pathlib
import sys
import warnings

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # the repository's harness.py
import harness  # the runner: the command line, the steps, the checks (harness.py)
from page_helpers import *  # noqa: F403 - the page's first block: common imports, helpers
from lesson_code import cst_threshold  # shared lessons

# The page's imports, then its helpers, word for word (a pasted page starts with them) ---------

# region imports
import onnxscript
from onnx.defs import OpSchema

try:  # torch.export came with torch 2.1, its Dim with 2.2
    from torch.export import Dim
except ImportError:  # torch < 2.2: no dynamo=True step of this page runs
    Dim = None
# endregion

# What the TorchScript exporter prints from C++ before a failing export raises (torch >= 2.8)
IR_DUMP = ("Torch IR graph at exception",) if harness.TORCH >= (2, 8) else ()
FROZEN_WARNING = "Expected shape from model of {2,48} does not match actual shape of {2,96}"
# What each release lacks, as a run of the step there shows it
DYNAMO_EXPORT = (
    "torch.onnx.export(..., dynamo=True) came with 2.4: its half is not shown"
    if harness.TORCH < (2, 4)
    else "dynamo=True is torch.onnx.dynamo_export on 2.4, which fails on this model (Unsupported FX "
    "nodes: aten.le.Scalar, ...): its half is not shown"
)
TABLE = ("custom_translation_table came with 2.6: 2.5's torch.onnx.export takes and ignores it (no "
         "custom node; for a custom op, No ONNX function found for dynshape.box_blur)")
ONNX_OPS = ("torch.onnx.ops came with 2.8, and is_in_onnx_export() is False under dynamo=True before: "
            "the model exports aminmax as ReduceMin and ReduceMax, min_max_dynamo.onnx is not written")
CUSTOM_OP = "torch.library.custom_op came with 2.4: box_blur.onnx is not written"
SET_TYPE = ("setType's sizes do not reach the file: the exporter makes up the custom node's dims "
            "and warns that its shape inference is missing")
MISSING = "The shape inference of"  # torch 1.13's warning, per custom node: "... OP type is missing"
STRATEGY = ("assert_onnx_program has no strategy= before 2.7, nor the check of how the program was "
            "captured that strategy=None turns off: the page's strategy=None is left out")


def made_up_before_2_0(op):
    """torch 1.13 types a custom node's outputs with dims it makes up, whatever setType says, and
    warns through Python's warnings at each export that OP's shape inference is missing: held
    back and checked here (the step says so)."""
    if harness.TORCH >= (2, 0):
        return contextlib.nullcontext()
    return harness.quiet(f"{MISSING} {op} type is missing")


if assert_onnx_program is not None and harness.TORCH < (2, 7):
    # torch 2.6's assert_onnx_program has no strategy= (_testing.py): a reader there deletes the
    # page's strategy=None, and so does this (step 5 says so).
    _assert_onnx_program = assert_onnx_program

    def assert_onnx_program(program, *, strategy=None, **kwargs):
        return _assert_onnx_program(program, **kwargs)


# ---------------------------------------------------------------------------------------------
# 1. A fixed-size model fed another batch
# ---------------------------------------------------------------------------------------------


# region ThresholdModel
class ThresholdModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.threshold = torch.nn.Threshold(0.1, 20)  # y = 20 if x <= 0.1 else x

    def forward(self, x):
        y = self.threshold(x)
        return y.view(y.size(0), -1)  # one row per sample, as before a classifier's Linear


def signature(path):
    """A model file's inputs and outputs with their dims: a number, or a symbolic dim's name."""
    graph = onnx.load(path).graph

    def typed(value):
        dims = [d.dim_param or str(d.dim_value) for d in value.type.tensor_type.shape.dim]
        return f"{value.name}[{','.join(dims)}]"

    inputs = ", ".join(typed(value) for value in graph.input)
    return f"{inputs} -> {', '.join(typed(value) for value in graph.output)}"
# endregion


# region threshold_symbolic
# register_onnx_symbolic's symbolic, for dynamo=False: one rknn_cst::cstThreshold node, typed
# like its input
@parse_args("v", "f", "f")
def threshold_symbolic(g, x, threshold, value):
    y = g.op("rknn_cst::cstThreshold", x, threshold_f=threshold, value_f=value)
    return y.setType(x.type())  # x's dtype and dims, symbolic ones included
# endregion


def step1_fixed_size():
    """A fixed-size model fed another batch"""
    # region fixed_size_inputs
    os.makedirs("failures", exist_ok=True)  # the models of this step are failure demonstrations
    model, x = ThresholdModel().eval(), torch.randn(2, 3, 16)
    bigger = torch.randn(4, 3, 16)  # another batch size
    # endregion

    if harness.TORCH < (2, 5):
        harness.differs(DYNAMO_EXPORT)
    else:
        # region fixed_size_dynamo
        program = torch.onnx.export(model, (x,), dynamo=True, verbose=False)
        program.save("failures/threshold_fixed_dynamo.onnx")
        print("  dynamo=True: ", signature("failures/threshold_fixed_dynamo.onnx"))
        with expect_error("Got invalid dimensions for input: x for the following indices"):
            run_ort("failures/threshold_fixed_dynamo.onnx", {"x": bigger.numpy()})
        # endregion

        assert harness.output_dims(harness.show("failures/threshold_fixed_dynamo.onnx")) == [2, 48]

    with made_up_before_2_0("rknn_cst::cstThreshold"):
        # region fixed_size_torchscript
        register_custom_op_symbolic("aten::threshold", threshold_symbolic, 17)
        torch.onnx.export(
            model, (x,), "failures/threshold_fixed.onnx", dynamo=False, opset_version=17,
            input_names=["x"], output_names=["y"], custom_opsets={"rknn_cst": 1},
        )
        print("  dynamo=False:", signature("failures/threshold_fixed.onnx"))
        # endregion

    dims = harness.output_dims(harness.show("failures/threshold_fixed.onnx"))
    if harness.TORCH < (2, 0):
        assert all(isinstance(d, str) for d in dims), dims  # Reshapey_dim_0, Reshapey_dim_1
        harness.differs(SET_TYPE)
    else:
        assert dims == [2, 48], dims


# ---------------------------------------------------------------------------------------------
# 2. dynamo=True: dynamic_shapes, and a fake kernel that derives the sizes
# ---------------------------------------------------------------------------------------------

# region rknn_cst_opset
programs = {}  # file name -> ONNXProgram: step 5 runs each again at other sizes

rknn_cst = onnxscript.values.Opset("rknn_cst", 1)
# endregion
# threshold_schema and cst_threshold: lesson_code.py's region threshold_schema, on the page here
# (register_onnx_symbolic's local schema: it types the node; onnx never registers it)


# region threshold_translation
def threshold_translation(x, threshold: float, value: float):
    return cst_threshold(x, threshold=threshold, value=value)
# endregion


if hasattr(torch.library, "custom_op"):  # torch.library.custom_op came with torch 2.4
    # region box_blur
    @torch.library.custom_op("dynshape::box_blur", mutates_args=())
    def box_blur(x: torch.Tensor, width: int) -> torch.Tensor:
        """The mean of every `width` neighbours along the last axis: length - width + 1 values."""
        return x.unfold(-1, width, 1).mean(-1)  # a new tensor, never a view of x


    class BoxBlurModel(torch.nn.Module):
        def forward(self, x):
            return box_blur(x, 3)
    # endregion


if hasattr(torch.library, "custom_op"):  # torch.library.custom_op came with torch 2.4
    # region box_blur_fake
    @box_blur.register_fake
    def _(x, width):
        # The output's sizes, from the input's: symbolic sizes give symbolic ones
        return x.new_empty(*x.shape[:-1], x.shape[-1] - width + 1)


    dynshape = onnxscript.values.Opset("dynshape", 1)
    box_blur_schema = OpSchema(
        "BoxBlur",
        "dynshape",
        1,
        inputs=[OpSchema.FormalParameter("X", "T")],
        outputs=[OpSchema.FormalParameter("Y", "T")],
        type_constraints=[("T", ["tensor(float)"], "float32 tensors")],
        attributes=[OpSchema.Attribute("width", OpSchema.AttrType.INT, "values per mean")],
    )
    box_blur_op = onnxscript.values.Op(dynshape, "BoxBlur", box_blur_schema)


    def box_blur_translation(x, width: int):
        return box_blur_op(x, width=width)
    # endregion


if hasattr(torch.library, "custom_op"):  # torch.library.custom_op came with torch 2.4
    # region box_blur_fixed
    @torch.library.custom_op("dynshape::box_blur_fixed", mutates_args=())
    def box_blur_fixed(x: torch.Tensor, width: int) -> torch.Tensor:
        return x.unfold(-1, width, 1).mean(-1)


    @box_blur_fixed.register_fake
    def _(x, width):
        return x.new_empty(2, 3, 14)  # the example's output size, written out


    class SharpenModel(torch.nn.Module):
        def forward(self, x):
            return 2 * x[..., 1:-1] - box_blur_fixed(x, 3)  # x minus its blur, plus x
    # endregion


if hasattr(torch.library, "custom_op"):  # torch.library.custom_op came with torch 2.4
    # region positive
    @torch.library.custom_op("dynshape::positive", mutates_args=())
    def positive(x: torch.Tensor) -> torch.Tensor:
        """The values of x above 0, in order, as one row: how many depends on the values."""
        return x[x > 0]  # a new tensor (boolean indexing copies)


    @positive.register_fake
    def _(x):
        count = torch.library.get_ctx().new_dynamic_size()  # a size no input size gives
        return x.new_empty(count)


    class PositiveModel(torch.nn.Module):
        def forward(self, x):
            return positive(x)


    op = onnxscript.opset18  # ONNX's standard ops


    def positive_translation(x):
        flat = op.Reshape(x, op.Constant(value_ints=[-1]))
        return op.Compress(flat, op.Greater(flat, op.CastLike(op.Constant(value_float=0.0), flat)))
    # endregion


# region MinMaxNode
class MinMaxNode(torch.autograd.Function):
    """The min and the max over the last axis (autograd_function/'s node), as one node."""

    @staticmethod
    def forward(ctx, x):
        # torch.onnx.export only; dynamo=False traces (MinMax adds its symbolic, step 3)
        if torch.onnx.is_in_onnx_export() and not torch.jit.is_tracing():
            reduced = x.shape[:-1]  # symbolic sizes under dynamic shapes: (batch, 3)
            return torch.onnx.ops.symbolic_multi_out(
                "tutorial::MinMax", (x,), {"axis": -1}, dtypes=(x.dtype, x.dtype),
                shapes=(reduced, reduced), version=1,
            )
        return torch.aminmax(x, dim=-1)


class MinMaxNodeModel(torch.nn.Module):
    def forward(self, x):
        return MinMaxNode.apply(x)
# endregion


# region PlainCDistModel
class PlainCDistModel(torch.nn.Module):
    def forward(self, x1, x2):
        return torch.cdist(x1, x2)  # register_onnx_symbolic's: the default compute_mode
# endregion


# region CDistModel
class CDistModel(torch.nn.Module):
    def forward(self, x1, x2):
        # The distance from every row of x1 to every row of x2, computed one way at every size
        # (by default torch.cdist takes a matrix product above 25 rows: a branch, above)
        return torch.cdist(x1, x2, compute_mode="donot_use_mm_for_euclid_dist")
# endregion


# region CholeskyModel
class CholeskyModel(torch.nn.Module):
    def forward(self, a):
        return torch.linalg.cholesky(a)  # a: a batch of symmetric positive-definite matrices


def cholesky_translation(self, upper: bool = False):
    # register_onnx_symbolic's step 8: unrolled for the size known at export time
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


# region cdist_translation
msft = onnxscript.values.Opset("com.microsoft", 1)
cdist_schema = OpSchema(  # ONNX Runtime's CDist (ContribOperators.md), a local schema
    "CDist",
    "com.microsoft",
    1,
    inputs=[OpSchema.FormalParameter("A", "T"), OpSchema.FormalParameter("B", "T")],
    outputs=[OpSchema.FormalParameter("C", "T")],
    type_constraints=[("T", ["tensor(float)", "tensor(double)"], "float32 or float64 tensors")],
    attributes=[OpSchema.Attribute("metric", OpSchema.AttrType.STRING, "the distance")],
)
cdist_op = onnxscript.values.Op(msft, "CDist", cdist_schema)


def cdist_translation(x1, x2, p: float = 2.0, compute_mode=None):
    return cdist_op(x1, x2, metric="euclidean")  # no sizes: the exporter types the node
# endregion


# region export_captured
def export_captured(path, model, args, dynamic_shapes, table):
    """Capture MODEL with torch.export, export the program through TABLE, save it to PATH."""
    ep = torch.export.export(model, args, dynamic_shapes=dynamic_shapes, strict=False)
    program = torch.onnx.export(
        ep, dynamo=True, verbose=False, custom_translation_table=table,
        dynamic_shapes=dynamic_shapes,  # again: the file's dims take the Dims' names
    )
    program.save(path)
    programs[path] = program  # step 5 runs it again at other sizes
    print(f"  {path}:", signature(path))
# endregion


@harness.needs_torch("2.6", TABLE)
def step2_dynamic_shapes():
    """dynamo=True: dynamic_shapes, and a fake kernel that derives the sizes"""
    dims_and_names()
    fake_kernels()
    data_dependent_size()
    function_node_and_baked_sizes()


def dims_and_names():
    model, x = ThresholdModel().eval(), torch.randn(2, 3, 16)  # step 1's

    # region threshold_dynamic_shapes
    table = {torch.ops.aten.threshold.default: threshold_translation}
    names = {"x": {0: "batch", 2: "length"}}  # a string: Dim.DYNAMIC, the dim's name in the file
    program = torch.onnx.export(
        model, (x,), dynamo=True, verbose=False, custom_translation_table=table,
        dynamic_shapes=names,
    )
    program.save("threshold_dynamo.onnx")
    programs["threshold_dynamo.onnx"] = program
    print("  threshold_dynamo.onnx:", signature("threshold_dynamo.onnx"))
    # endregion

    if harness.TORCH < (2, 7):
        strings_leave_the_dims_static(model, x, table)
    exported = harness.show("threshold_dynamo.onnx")
    assert input_dims(exported) == in_file(["batch", "3", "length"]), input_dims(exported)
    assert harness.output_dims(exported) == in_file(["batch", "3*length"]), exported.graph.output
    assert harness.op_types("threshold_dynamo.onnx").count("rknn_cst.cstThreshold") == 1
    assert not onnx.defs.has("cstThreshold", "rknn_cst")
    dynamic_axes_under_dynamo(model, x, table)

    # region explicit_capture
    batch, length = Dim("batch"), Dim("length")
    dynamic_shapes = {"x": {0: batch, 2: length}}  # keyed by forward's parameter names
    ep = torch.export.export(model, (x,), dynamic_shapes=dynamic_shapes, strict=False)
    shapes = [str(node.meta["val"].shape) for node in ep.graph.nodes if node.op == "placeholder"]
    print("  torch.export:", shapes, ep.range_constraints)

    unnamed = torch.onnx.export(ep, dynamo=True, verbose=False, custom_translation_table=table)
    print("  without names:", [str(value.shape) for value in unnamed.model.graph.inputs])

    # The same dynamic_shapes again: the exporter renames the file's dims after the Dims
    named = torch.onnx.export(
        ep, dynamo=True, verbose=False, custom_translation_table=table,
        dynamic_shapes=dynamic_shapes,
    )
    print("  with names:", [str(value.shape) for value in named.model.graph.inputs])
    # endregion

    assert str(unnamed.model.graph.inputs[0].shape[0]).startswith("s"), unnamed.model.graph.inputs
    if harness.TORCH < (2, 7):  # torch.export's own names, as without names
        assert str(named.model.graph.inputs[0].shape) == str(unnamed.model.graph.inputs[0].shape)
        harness.differs("dynamic_shapes does not rename the file's dims after the Dims: s0, s1")
    else:
        assert [str(d) for d in named.model.graph.inputs[0].shape] == ["batch", "3", "length"]

    # region dim_auto
    # Dim.AUTO: torch.export decides which dims are dynamic; strings name them in the file
    auto = {"x": {0: Dim.AUTO, 2: Dim.AUTO}}
    ep_auto = torch.export.export(model, (x,), dynamic_shapes=auto, strict=False)
    program = torch.onnx.export(
        ep_auto, dynamo=True, verbose=False, custom_translation_table=table, dynamic_shapes=names
    )
    inputs = [str(value.shape) for value in program.model.graph.inputs]
    print("  Dim.AUTO, named by strings:", inputs)
    # endregion

    assert [str(d) for d in program.model.graph.inputs[0].shape] == in_file(["batch", "3", "length"])


def input_dims(model):
    """A model file's first input's dims, as text: a number, or a symbolic dim's name."""
    return [d.dim_param or str(d.dim_value) for d in model.graph.input[0].type.tensor_type.shape.dim]


def in_file(dims):
    """DIMS as the file has them: torch 2.6 keeps torch.export's names, s0 and s1, for the Dims'."""
    if harness.TORCH >= (2, 7):
        return dims
    unnamed = {"batch": "s0", "rows1": "s0", "length": "s1", "rows2": "s1"}

    def rename(dim):
        return re.sub(r"\b(batch|rows1|length|rows2)\b", lambda name: unnamed[name[1]], dim)

    return [rename(d) if isinstance(d, str) else d for d in dims]


def dynamic_axes_under_dynamo(model, x, table):
    """What the README says of dynamic_axes under dynamo=True: converted to strings, with a
    UserWarning; its output names ignored. torch 2.6 to 2.9 leave the dims unnamed (Notes)."""
    axes = {"x": {0: "batch", 2: "length"}, "y": {0: "batch", 1: "features"}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        program = torch.onnx.export(
            model, (x,), dynamo=True, verbose=False, custom_translation_table=table,
            input_names=["x"], output_names=["y"], dynamic_axes=axes,
        )
    said = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert any("'dynamic_axes' is not recommended when dynamo=True" in m for m in said), said
    (value,), (output,) = program.model.graph.inputs, program.model.graph.outputs
    dims = [str(d) for d in value.shape], [str(d) for d in output.shape]
    if harness.TORCH < (2, 8):
        assert dims == (["s0", "3", "s1"], ["s0", "3*s1"]), dims
    elif harness.TORCH < (2, 10):
        assert dims == (["s77", "3", "s53"], ["s77", "3*s53"]), dims
    else:
        assert dims == (["batch", "3", "length"], ["batch", "3*length"]), dims


def fake_kernels():
    x = torch.randn(2, 3, 16)  # step 1's size
    # region box_blur_opcheck
    for sample in [x, torch.randn(5, 3, 40)]:  # two sizes: a fixed size fails the second
        torch.library.opcheck(box_blur, (sample, 3))
    print("  torch.library.opcheck(box_blur, ...): passed at two sizes")
    # endregion

    if harness.TORCH < (2, 8):
        guard_says_at_least_3(x)
    else:
        # region box_blur_guard
        batch, length = Dim("batch"), Dim("length")
        with expect_error("satisfy the generated guard ((-2) + L['x'].size()[2]) != 1"):
            torch.export.export(
                BoxBlurModel(), (x,), dynamic_shapes={"x": {0: batch, 2: length}}, strict=False
            )
        # endregion

    # region box_blur_export
    batch, length = Dim("batch"), Dim("length", min=4)  # length - 2 blurred values: at least 2
    dynamic_shapes = {"x": {0: batch, 2: length}}
    table = {torch.ops.dynshape.box_blur.default: box_blur_translation}
    export_captured("box_blur_dynamo.onnx", BoxBlurModel(), (x,), dynamic_shapes, table)
    # endregion

    exported = harness.show("box_blur_dynamo.onnx")
    assert harness.output_dims(exported) == in_file(["batch", 3, "length - 2"]), exported.graph.output

    # region box_blur_fixed_opcheck
    torch.library.opcheck(box_blur_fixed, (x, 3))  # the example's size: passes
    with expect_error("Shapes torch.Size([5, 3, 38]) and torch.Size([2, 3, 14]) are not equal"):
        torch.library.opcheck(box_blur_fixed, (torch.randn(5, 3, 40), 3))
    # endregion
    if harness.TORCH < (2, 8):
        specialized_says_inferred_to_be_a_constant(x, dynamic_shapes)
    else:
        # region box_blur_fixed_specialized
        with expect_error("You marked batch as dynamic but your code specialized it"):
            torch.export.export(SharpenModel(), (x,), dynamic_shapes=dynamic_shapes, strict=False)
        # endregion

    names = {"x": {0: "batch", 2: "length"}}  # this step's strings
    if harness.TORCH < (2, 9):
        sharpen_in_one_call_exports(x, names)
        return
    if harness.TORCH == (2, 9):
        sharpen_in_one_call_names_the_dims(x, names)
        return
    # region sharpen_one_call
    with expect_error("but tracing inferred a static shape of 2"):  # the same model, in one call
        torch.onnx.export(
            SharpenModel().eval(), (x,), dynamo=True, verbose=False, dynamic_shapes=names
        )
    # endregion


def data_dependent_size():
    x = torch.randn(2, 3, 16)  # step 1's size
    # region positive_export
    torch.library.opcheck(positive, (x,))
    print("  torch.library.opcheck(positive, ...): passed")
    dynamic_shapes = {"x": {0: Dim("batch"), 2: Dim("length")}}
    table = {torch.ops.dynshape.positive.default: positive_translation}
    export_captured("positive_dynamo.onnx", PositiveModel(), (x,), dynamic_shapes, table)
    # endregion

    (count,) = harness.output_dims(harness.show("positive_dynamo.onnx"))
    assert count.startswith("u"), count  # an unbacked symbol: no input dim gives it


def function_node_and_baked_sizes():
    x = torch.randn(2, 3, 16)  # step 1's size
    if harness.TORCH < (2, 8):
        min_max_node_before_2_8(x)
    else:
        min_max_node(x)
    cholesky_and_cdist()


def min_max_node(x):
    # region min_max_node_export
    names = {"x": {0: "batch", 2: "length"}}  # in one call: explicit capture runs aminmax
    program = torch.onnx.export(
        MinMaxNodeModel().eval(), (x,), dynamo=True, verbose=False, dynamic_shapes=names,
        output_names=["low", "high"],
    )
    program.save("min_max_dynamo.onnx")
    print("  min_max_dynamo.onnx:", signature("min_max_dynamo.onnx"))
    # endregion

    harness.show("min_max_dynamo.onnx")
    assert harness.op_types("min_max_dynamo.onnx") == ["tutorial.MinMax"]
    assert harness.output_dims(onnx.load("min_max_dynamo.onnx")) == ["batch", 3]


def cholesky_and_cdist():
    # region cholesky_dynamic_n
    m = torch.randn(2, 4, 4)
    a = m @ m.mT + 4 * torch.eye(4)  # symmetric positive definite: the Cholesky factor exists
    table = {torch.ops.aten.linalg_cholesky.default: cholesky_translation}
    n = Dim("n")
    dynamic_shapes = {"a": {0: Dim("batch"), 1: n, 2: n}}  # the matrix size too
    ep = torch.export.export(CholeskyModel(), (a,), dynamic_shapes=dynamic_shapes, strict=False)
    with expect_error("'SymbolicDim' object cannot be interpreted as an integer"):
        torch.onnx.export(ep, dynamo=True, verbose=False, custom_translation_table=table)
    # endregion

    # region cholesky_static_n
    dynamic_shapes = {"a": {0: Dim("batch")}}  # the matrix size stays 4: the loop needs it
    export_captured("cholesky_dynamo.onnx", CholeskyModel(), (a,), dynamic_shapes, table)
    # endregion

    assert harness.output_dims(harness.show("cholesky_dynamo.onnx")) == in_file(["batch", 4, 4])

    # region cdist_dims
    x1, x2 = torch.randn(5, 3), torch.randn(7, 3)
    dynamic_shapes = {"x1": {0: Dim("rows1")}, "x2": {0: Dim("rows2")}}
    # endregion
    if harness.TORCH < (2, 8):
        cdist_guard_names_the_arguments(x1, x2, dynamic_shapes)
    else:
        # region plain_cdist_guard
        with expect_error("generated guard 2 <= L['x1'].size()[0] and L['x1'].size()[0] <= 25"):
            torch.export.export(
                PlainCDistModel(), (x1, x2), dynamic_shapes=dynamic_shapes, strict=False
            )
        # endregion

    # region cdist_export
    table = {torch.ops.aten.cdist.default: cdist_translation}
    export_captured("cdist_dynamo.onnx", CDistModel(), (x1, x2), dynamic_shapes, table)
    # endregion

    assert harness.output_dims(harness.show("cdist_dynamo.onnx")) == in_file(["rows1", "rows2"])

# ---------------------------------------------------------------------------------------------
# 3. dynamo=False: dynamic_axes, and a setType that keeps them
# ---------------------------------------------------------------------------------------------


# region threshold_frozen
# The same node with the example's sizes written out: the mistake this step shows
@parse_args("v", "f", "f")
def threshold_frozen(g, x, threshold, value):
    y = g.op("rknn_cst::cstThreshold", x, threshold_f=threshold, value_f=value)
    return y.setType(x.type().with_sizes([2, 3, 16]))
# endregion


if hasattr(torch.library, "custom_op"):  # torch.library.custom_op came with torch 2.4
    # region box_blur_symbolic
    @parse_args("v", "i")
    def box_blur_symbolic(g, x, width):
        y = g.op("dynshape::BoxBlur", x, width_i=width)
        sizes = x.type().varyingSizes()  # [None, 3, None] under dynamic_axes: None is symbolic
        length = None if sizes[-1] is None else sizes[-1] - width + 1
        return y.setType(x.type().with_sizes([*sizes[:-1], length]))
    # endregion


# region MinMax
class MinMax(MinMaxNode):
    """MinMaxNode with a symbolic, for dynamo=False: the same node, typed by setType."""

    @staticmethod
    def symbolic(g, x):
        low, high = g.op("tutorial::MinMax", x, axis_i=-1, outputs=2)
        reduced = x.type().with_sizes(x.type().varyingSizes()[:-1])  # x's dims but the last
        return low.setType(reduced), high.setType(reduced)


class MinMaxModel(torch.nn.Module):
    def forward(self, x):
        return MinMax.apply(x)
# endregion


# region cdist_symbolics
# register_onnx_symbolic's step 9, as written there: sizes() is None once a dim is symbolic
@parse_args("v", "v", "f", "none")
def cdist_contrib(g, x1, x2, p, compute_mode):
    y = g.op("com.microsoft::CDist", x1, x2, metric_s="euclidean")
    rows = [x1.type().sizes()[0], x2.type().sizes()[0]]
    y.setType(x1.type().with_sizes(rows))  # [rows of x1, rows of x2]
    return y


# The fix: varyingSizes() gives None for a symbolic dim, which with_sizes keeps symbolic
@parse_args("v", "v", "f", "none")
def cdist_dynamic(g, x1, x2, p, compute_mode):
    y = g.op("com.microsoft::CDist", x1, x2, metric_s="euclidean")
    rows = [x1.type().varyingSizes()[0], x2.type().varyingSizes()[0]]
    y.setType(x1.type().with_sizes(rows))
    return y
# endregion


def step3_dynamic_axes():
    """dynamo=False: dynamic_axes, and a setType that keeps them"""
    model, x = ThresholdModel().eval(), torch.randn(2, 3, 16)
    bigger = torch.randn(4, 3, 16)
    register_custom_op_symbolic("aten::threshold", threshold_symbolic, 17)  # step 1's
    x1, x2 = torch.randn(5, 3), torch.randn(7, 3)  # step 2's

    with made_up_before_2_0("rknn_cst::cstThreshold"):
        # region threshold_dynamic_axes
        axes = {"x": {0: "batch", 2: "length"}, "y": {0: "batch", 1: "features"}}
        torch.onnx.export(
            model, (x,), "threshold.onnx", dynamo=False, opset_version=17, input_names=["x"],
            output_names=["y"], dynamic_axes=axes, custom_opsets={"rknn_cst": 1},
        )
        print("  threshold.onnx:", signature("threshold.onnx"))
        print("    ops:", " ".join(node.op_type for node in onnx.load("threshold.onnx").graph.node))
        # endregion

    exported = harness.show("threshold.onnx")
    assert harness.output_dims(exported) == ["batch", "features"]
    (node,) = [n for n in exported.graph.node if n.op_type == "cstThreshold"]
    kept = harness.type_text([v for v in exported.graph.value_info if v.name == node.output[0]][0].type)
    if harness.TORCH < (2, 0):  # cstThreshold/threshold/cstThreshold_output_0_dim_0, ...
        assert "_dim_0" in kept and "batch" not in kept, kept
        harness.differs(SET_TYPE + ": the frozen sizes below do not reach it either")
    else:
        assert kept == "float32[batch,3,length]", kept  # setType kept them

    with made_up_before_2_0("rknn_cst::cstThreshold"):
        # region threshold_frozen_export
        register_custom_op_symbolic("aten::threshold", threshold_frozen, 17)
        torch.onnx.export(
            model, (x,), "failures/threshold_frozen.onnx", dynamo=False, opset_version=17,
            input_names=["x"], output_names=["y"], dynamic_axes=axes, custom_opsets={"rknn_cst": 1},
        )
        register_custom_op_symbolic("aten::threshold", threshold_symbolic, 17)  # back to step 1's
        frozen = onnx.load("failures/threshold_frozen.onnx")
        print("  failures/threshold_frozen.onnx:", signature("failures/threshold_frozen.onnx"))
        print("    ops:", " ".join(node.op_type for node in frozen.graph.node))
        (y,) = onnx.shape_inference.infer_shapes(frozen, strict_mode=True).graph.output
        dims = [d.dim_param or d.dim_value for d in y.type.tensor_type.shape.dim]
        print(f"    ONNX shape inference: y is {dims}")
        # endregion

    if harness.TORCH < (2, 0):  # nothing frozen: the file is threshold.onnx's
        assert [n.op_type for n in frozen.graph.node] == [n.op_type for n in exported.graph.node]
        assert dims == ["batch", "features"], dims
    else:
        assert [n.op_type for n in frozen.graph.node] == ["cstThreshold", "Constant", "Reshape"]
        assert dims == [2, 48], dims
    harness.show("failures/threshold_frozen.onnx")

    # region box_blur_min_max_kernels
    if onnx_op is not None:  # and for this page's own custom nodes

        @onnx_op(
            op_type="dynshape::BoxBlur",
            inputs=[PyCustomOpDef.dt_float],
            outputs=[PyCustomOpDef.dt_float],
            attrs={"width": PyCustomOpDef.dt_int64},
        )
        def box_blur_kernel(x, width):
            windows = np.lib.stride_tricks.sliding_window_view(x, int(width), axis=-1)
            return (windows.sum(axis=-1) / np.float32(width)).astype(np.float32)

        @onnx_op(
            op_type="tutorial::MinMax",
            inputs=[PyCustomOpDef.dt_float],
            outputs=[PyCustomOpDef.dt_float, PyCustomOpDef.dt_float],
            attrs={"axis": PyCustomOpDef.dt_int64},
        )
        def min_max_kernel(x, axis):
            return x.min(axis=int(axis)), x.max(axis=int(axis))
    # endregion

    ort.set_default_logger_severity(2)  # its warnings, which harness holds back: checked here
    frozen_warns = onnx_op is not None and harness.TORCH >= (2, 0)  # before, nothing is frozen
    with harness.quiet(*([FROZEN_WARNING] if frozen_warns else [])):
        # region frozen_at_batch_4
        if onnx_op is not None:  # batch 4 through the frozen file
            (y,) = run_ort("failures/threshold_frozen.onnx", {"x": bigger.numpy()}, ortx_options())
            expected = model(bigger)
            print(f"  batch 4: ONNX Runtime gives {list(y.shape)}, PyTorch {list(expected.shape)}")
        # endregion
    ort.set_default_logger_severity(4)
    if frozen_warns:
        print("    ONNX Runtime only logged: Expected shape from model of {2,48} does not ...")
        assert list(y.shape) == [2, 96], y.shape
    elif onnx_op is not None:
        assert list(y.shape) == [4, 48], y.shape

    if hasattr(torch.library, "custom_op"):
        # region box_blur_dynamic_axes
        axes = {"x": {0: "batch", 2: "length"}, "y": {0: "batch", 2: "blurred"}}
        register_custom_op_symbolic("dynshape::box_blur", box_blur_symbolic, 17)
        torch.onnx.export(
            BoxBlurModel(), (x,), "box_blur.onnx", dynamo=False, opset_version=17,
            input_names=["x"], output_names=["y"], dynamic_axes=axes, custom_opsets={"dynshape": 1},
        )
        print("  box_blur.onnx:", signature("box_blur.onnx"))
        # endregion

        assert harness.output_dims(harness.show("box_blur.onnx")) == ["batch", 3, "blurred"]
    else:
        harness.differs(CUSTOM_OP)

    with made_up_before_2_0("tutorial::MinMax"):
        # region min_max_dynamic_axes
        axes = {"x": {0: "batch", 2: "length"}, "low": {0: "batch"}, "high": {0: "batch"}}
        torch.onnx.export(
            MinMaxModel(), (x,), "min_max.onnx", dynamo=False, opset_version=17, input_names=["x"],
            output_names=["low", "high"], dynamic_axes=axes, custom_opsets={"tutorial": 1},
        )
        print("  min_max.onnx:", signature("min_max.onnx"))
        # endregion

    dims = harness.output_dims(harness.show("min_max.onnx"))
    assert dims == (["batch", "MinMaxlow_dim_1"] if harness.TORCH < (2, 0) else ["batch", 3]), dims

    # The exporter dumps the TorchScript graph before it raises; 1.13 warns of CDist's types
    held = IR_DUMP + (f"{MISSING} com.microsoft::CDist",) * (harness.TORCH < (2, 0))
    with harness.quiet(*held):
        # region cdist_dynamic_axes
        axes = {"x1": {0: "rows1"}, "x2": {0: "rows2"}, "distances": {0: "rows1", 1: "rows2"}}
        register_custom_op_symbolic("aten::cdist", cdist_contrib, 17)
        with expect_error("'NoneType' object is not subscriptable"):
            torch.onnx.export(
                CDistModel(), (x1, x2), "failures/cdist.onnx", dynamo=False, opset_version=17,
                input_names=["x1", "x2"], output_names=["distances"], dynamic_axes=axes,
            )
        register_custom_op_symbolic("aten::cdist", cdist_dynamic, 17)
        torch.onnx.export(
            CDistModel(), (x1, x2), "cdist.onnx", dynamo=False, opset_version=17,
            input_names=["x1", "x2"], output_names=["distances"], dynamic_axes=axes,
        )
        print("  cdist.onnx:", signature("cdist.onnx"))
        # endregion

    assert harness.output_dims(harness.show("cdist.onnx")) == ["rows1", "rows2"]
    assert not os.path.exists("failures/cdist.onnx")
    if onnx_op is None:
        raise harness.Skip(harness.ortx_problem())



# ---------------------------------------------------------------------------------------------
# 4. A size no input gives, as a custom node with a Python kernel
# ---------------------------------------------------------------------------------------------

if hasattr(torch.library, "custom_op"):  # torch.library.custom_op came with torch 2.4
    # region positive_node
    # Step 2's positive as one custom node: its output's length is known at run time only
    positive_schema = OpSchema(
        "Positive",
        "dynshape",
        1,
        inputs=[OpSchema.FormalParameter("X", "T")],
        outputs=[OpSchema.FormalParameter("Y", "T")],
        type_constraints=[("T", ["tensor(float)"], "float32 tensors")],
    )
    positive_op = onnxscript.values.Op(dynshape, "Positive", positive_schema)


    def positive_node_translation(x):
        return positive_op(x)  # the exporter types its output from the fake kernel: [u0]
    # endregion


@harness.needs_torch("2.6", TABLE.replace("box_blur", "positive"))
def step4_custom_node_of_unknown_size():
    """A size no input gives, as a custom node with a Python kernel"""
    x = torch.randn(2, 3, 16)  # step 1's size

    # region positive_kernel
    if onnx_op is not None:

        @onnx_op(
            op_type="dynshape::Positive",
            inputs=[PyCustomOpDef.dt_float],
            outputs=[PyCustomOpDef.dt_float],
        )
        def positive_kernel(x):
            return x[x > 0]  # NumPy's boolean indexing: a new 1-D array, as long as it takes
    # endregion

    # region positive_node_export
    table = {torch.ops.dynshape.positive.default: positive_node_translation}
    program = torch.onnx.export(
        PositiveModel().eval(), (x,), dynamo=True, verbose=False, custom_translation_table=table,
        dynamic_shapes={"x": {0: Dim("batch"), 2: Dim("length")}},
    )
    program.save("positive_node_dynamo.onnx")
    programs["positive_node_dynamo.onnx"] = program
    print("  positive_node_dynamo.onnx:", signature("positive_node_dynamo.onnx"))
    if onnx_op is not None:
        program.initialize_inference_session(ortx_session)  # with the Python kernel
        for sample in [x, torch.randn(5, 3, 40), x.abs(), -x.abs()]:  # -x.abs(): none
            assert_onnx_program(program, args=(sample,), rtol=0, atol=0)
            print(f"    x{list(sample.shape)} -> {len(positive(sample))} values: matches PyTorch")
    # endregion

    if harness.TORCH < (2, 7):
        harness.differs("the file's dims are torch.export's s0, s1: dynamic_shapes does not rename "
                        "them after the Dims")
    exported = harness.show("positive_node_dynamo.onnx")
    assert input_dims(exported) == in_file(["batch", "3", "length"]), input_dims(exported)
    assert harness.op_types("positive_node_dynamo.onnx") == ["dynshape.Positive"]
    (count,) = harness.output_dims(exported)
    assert count.startswith("u"), count  # an unbacked symbol, as in step 2
    assert not onnx.defs.has("Positive", "dynshape")
    if onnx_op is None:
        raise harness.Skip(harness.ortx_problem())


# ---------------------------------------------------------------------------------------------
# 5. Every model at three batch sizes and two lengths
# ---------------------------------------------------------------------------------------------

# region inputs_for
SIZES = [(batch, length) for batch in (1, 2, 5) for length in (16, 40)]


def inputs_for(path, batch, length):
    """Inputs of the model in PATH for a batch size and a length."""
    if path.startswith("cdist"):  # x1 has `batch` rows, x2 `length` rows
        return torch.randn(batch, 3), torch.randn(length, 3)
    if path.startswith("cholesky"):  # `batch` matrices; their size stays 4
        m = torch.randn(batch, 4, 4)
        return (m @ m.mT + 4 * torch.eye(4),)
    return (torch.randn(batch, 3, length),)


def cdist_tolerance(x1, x2):
    # register_onnx_symbolic's step 9: ORT's |a|^2 + |b|^2 - 2 a.b, then the square root
    k = x1.shape[-1]
    largest = float((x1**2).sum(-1).max() + (x2**2).sum(-1).max())
    return float(np.sqrt(2 * (k + 2) * 2.0**-24 * largest))
# endregion


# region by_hand
def by_hand(path, model):
    """Run the file at PATH in ONNX Runtime at every size, and MODEL in PyTorch: the same?"""
    print(f"  {path}:", signature(path))
    custom = path != "cdist.onnx"  # ONNX Runtime implements CDist itself
    if custom and onnx_op is None:
        return  # its custom node needs the kernels of onnxruntime-extensions
    names = [value.name for value in onnx.load(path).graph.input]
    for batch, length in SIZES:
        args = inputs_for(path, batch, length)
        feeds = {name: arg.numpy() for name, arg in zip(names, args, strict=True)}
        actual = run_ort(path, feeds, ortx_options() if custom else None)
        expected = model(*args)
        expected = expected if isinstance(expected, tuple) else (expected,)
        atol = cdist_tolerance(*args) if path == "cdist.onnx" else 0
        for ours, torchs in zip(actual, expected, strict=True):
            np.testing.assert_allclose(ours, torchs.numpy(), rtol=0, atol=atol, err_msg=path)
    print(f"    matches PyTorch at (batch, length) {SIZES}")
# endregion


def step5_every_size():
    """Every model at three batch sizes and two lengths"""
    # region every_size_dynamo_false
    by_hand("threshold.onnx", ThresholdModel().eval())
    by_hand("min_max.onnx", MinMaxModel())
    by_hand("cdist.onnx", CDistModel())
    # endregion
    if hasattr(torch.library, "custom_op"):  # step 3 wrote it
        # region every_size_box_blur
        by_hand("box_blur.onnx", BoxBlurModel())
        # endregion

    if harness.TORCH < (2, 6):
        missing = "" if hasattr(torch.library, "custom_op") else " (no box_blur.onnx: step 3's)"
        harness.differs(f"only the dynamo=False files{missing}: steps 2 and 4 need torch 2.6")
    elif harness.TORCH < (2, 8):
        if harness.TORCH < (2, 7):
            harness.differs(STRATEGY)
        harness.differs("the dynamo=True programs but min_max_dynamo.onnx: step 2 writes it from 2.8")
        every_size_dynamo()
    elif harness.TORCH == (2, 9):  # its programs keep torch.export's guard x.size()[0] != 1
        harness.differs("assert_onnx_program runs the dynamo=True programs at batch 2 and 5 only: "
                        "torch 2.9's exported programs refuse batch 1 (Guard failed)")
        every_size_dynamo([size for size in SIZES if size[0] != 1])
    else:
        every_size_dynamo()
    if onnx_op is None:
        raise harness.Skip(harness.ortx_problem())


def every_size_dynamo(SIZES=SIZES):  # noqa: N803 - the page's SIZES (torch 2.9: fewer)
    # region every_size_dynamo
    for path, program in programs.items():
        print(f"  {path}:", signature(path))
        if path in ("threshold_dynamo.onnx", "box_blur_dynamo.onnx", "positive_node_dynamo.onnx"):
            if onnx_op is None:
                continue
            program.initialize_inference_session(ortx_session)  # with the Python kernels
        rtol, atol = (1e-5, 1e-5) if path == "cholesky_dynamo.onnx" else (0, 0)
        for batch, length in SIZES:
            args = inputs_for(path, batch, length)
            if path == "cdist_dynamo.onnx":
                atol = cdist_tolerance(*args)
            assert_onnx_program(program, args=args, rtol=rtol, atol=atol, strategy=None)
        print(f"    matches PyTorch at (batch, length) {SIZES}")
    # endregion

    assert set(programs) == set(KEPT[2] + KEPT[4]) - {"min_max_dynamo.onnx"}, programs
    if harness.TORCH < (2, 8):  # step 2 did not write it (min_max_node_before_2_8)
        return
    # region every_size_min_max
    model, path = MinMaxNodeModel(), "min_max_dynamo.onnx"
    print(f"  {path}:", signature(path))
    if onnx_op is not None:
        for batch, length in SIZES:
            (x,) = inputs_for(path, batch, length)
            actual = run_ort(path, {"x": x.numpy()}, ortx_options())
            for ours, torchs in zip(actual, model(x), strict=True):  # low, then high
                np.testing.assert_array_equal(ours, torchs.numpy(), err_msg=path)
        print(f"    matches PyTorch at (batch, length) {SIZES}")
    # endregion


# ---------------------------------------------------------------------------------------------
# 6. What RKNN needs instead
# ---------------------------------------------------------------------------------------------


def step6_rknn():
    """What RKNN needs instead"""
    # region rknn_dynamic_input
    # RKNN builds a model for a list of input shapes, not symbolic dims (rknn.config's
    # dynamic_input, experimental): one list of every input's shape per set.
    dynamic_input = [[[batch, 3, length]] for batch, length in SIZES]
    print("  rknn.config(dynamic_input=...) for threshold.onnx:", dynamic_input[:2], "...")
    # endregion

    assert len(dynamic_input) == 6 and dynamic_input[0] == [[1, 3, 16]]


# ---------------------------------------------------------------------------------------------
# 7. A float16 or bfloat16 model: the box blur between Casts, its dims still dynamic
# ---------------------------------------------------------------------------------------------

if hasattr(torch.library, "custom_op"):  # torch.library.custom_op came with torch 2.4
    # region box_blur_half
    # The kernel takes float32 only (onnxruntime-extensions' Python ops have no float16 or
    # bfloat16), so the schema's T stays tensor(float) and a half model casts around the node.
    def box_blur_cast_translation(x, width: int):  # step 2's node, for dynamo=True
        y = box_blur_op(op.Cast(x, to=onnx.TensorProto.FLOAT), width=width)
        return op.CastLike(y, x)  # back to the model's dtype; Cast and CastLike keep the dims


    @parse_args("v", "i")
    def box_blur_cast_symbolic(g, x, width):  # step 3's node, for dynamo=False
        x32 = g.op("Cast", x, to_i=onnx.TensorProto.FLOAT)
        y = g.op("dynshape::BoxBlur", x32, width_i=width)
        sizes = x.type().varyingSizes()  # None for a symbolic dim, as in step 3
        length = None if sizes[-1] is None else sizes[-1] - width + 1
        y.setType(x.type().with_dtype(torch.float32).with_sizes([*sizes[:-1], length]))
        return g.op("CastLike", y, x)


    def equal_at_two_sizes(path, dtype):
        """PATH in ONNX Runtime at two batch sizes and lengths, against PyTorch in DTYPE."""
        for shape in [(1, 3, 16), (5, 3, 40)]:
            x = torch.randn(shape).to(dtype)
            (actual,) = run_ort_torch(path, [x], ortx_options())
            assert actual.dtype == dtype and torch.equal(actual, BoxBlurModel()(x)), path
        print(f"    {actual.dtype} out at x[1,3,16] and x[5,3,40]: equal to PyTorch's")
    # endregion


@harness.needs_torch("2.4", "torch.library.custom_op came with 2.4: there is no box blur to export")
def step7_half_precision():
    """A float16 or bfloat16 model: the box blur between Casts, its dims still dynamic"""
    if harness.TORCH < (2, 6):
        harness.differs("custom_translation_table came with 2.6: only this step's dynamo=False files")
    else:
        half_dynamo()
    # region box_blur_half_torchscript
    register_custom_op_symbolic("dynshape::box_blur", box_blur_cast_symbolic, 17)
    axes = {"x": {0: "batch", 2: "length"}, "y": {0: "batch", 2: "blurred"}}  # step 3's
    files = {torch.float16: "box_blur_float16.onnx", torch.bfloat16: "box_blur_bfloat16.onnx"}
    for dtype, path in files.items():
        torch.onnx.export(
            BoxBlurModel().eval(), (torch.randn(2, 3, 16).to(dtype),), path, dynamo=False,
            opset_version=17, input_names=["x"], output_names=["y"], dynamic_axes=axes,
            custom_opsets={"dynshape": 1},
        )
        check_with_schemas(path, box_blur_schema)
        print(f"  {path}:", signature(path))
        if onnx_op is not None:
            equal_at_two_sizes(path, dtype)
    register_custom_op_symbolic("dynshape::box_blur", box_blur_symbolic, 17)  # back to step 3's
    # endregion
    for dtype, kind in HALF.items():
        path = f"box_blur_{str(dtype)[6:]}.onnx"
        exported = harness.show(path)
        assert harness.op_types(path) == ["Cast", "dynshape.BoxBlur", "CastLike"], path
        assert signature(path) == "x[batch,3,length] -> y[batch,3,blurred]", signature(path)
        assert exported.graph.input[0].type.tensor_type.elem_type == kind, path
    if onnx_op is None:
        raise harness.Skip(harness.ortx_problem())


HALF = {torch.float16: onnx.TensorProto.FLOAT16, torch.bfloat16: onnx.TensorProto.BFLOAT16}


def half_dynamo():
    # region box_blur_bf16_failure
    model, x = BoxBlurModel().eval(), torch.randn(2, 3, 16).to(torch.bfloat16)
    dynamic_shapes = {"x": {0: Dim("batch"), 2: Dim("length", min=4)}}  # step 2's
    table = {torch.ops.dynshape.box_blur.default: box_blur_translation}  # step 2's: T = float
    path = "failures/box_blur_bf16_dynamo.onnx"
    program = torch.onnx.export(
        model, (x,), dynamo=True, verbose=False, custom_translation_table=table,
        dynamic_shapes=dynamic_shapes,
    )
    program.save(path)
    print(f"  {path}: exported, BoxBlur on bfloat16 (schema: float)")
    if onnx_op is not None:
        with expect_error("Type 'tensor(bfloat16)' of input parameter (x) of operator (BoxBlur)"):
            ort.InferenceSession(path, ortx_options(), providers=["CPUExecutionProvider"])
    with expect_error("has unsupported type: tensor(bfloat16)"):
        check_with_schemas(path, box_blur_schema)  # right after the export: caught there
    # endregion
    assert harness.op_types(path) == ["dynshape.BoxBlur"]
    harness.show(path)

    # region box_blur_half_dynamo
    table = {torch.ops.dynshape.box_blur.default: box_blur_cast_translation}
    files = {
        torch.float16: "box_blur_float16_dynamo.onnx",
        torch.bfloat16: "box_blur_bfloat16_dynamo.onnx",
    }
    for dtype, path in files.items():
        program = torch.onnx.export(
            model, (torch.randn(2, 3, 16).to(dtype),), dynamo=True, verbose=False,
            custom_translation_table=table, dynamic_shapes=dynamic_shapes,
        )
        program.save(path)
        check_with_schemas(path, box_blur_schema)
        print(f"  {path}:", signature(path))
        if onnx_op is not None:
            equal_at_two_sizes(path, dtype)
    # endregion
    for dtype, path in files.items():
        exported = harness.show(path)  # torch 2.6 keeps the CastLike; later a Cast
        ops = harness.op_types(path)
        assert ops[:2] == ["Cast", "dynshape.BoxBlur"] and ops[2] in ("Cast", "CastLike"), ops
        assert input_dims(exported) == in_file(["batch", "3", "length"]), input_dims(exported)
        assert harness.output_dims(exported) == in_file(["batch", 3, "length - 2"])
        assert exported.graph.input[0].type.tensor_type.elem_type == HALF[dtype]


# ---------------------------------------------------------------------------------------------

KEPT = {  # what each step writes and claims valid; failure demonstrations below
    2: (
        "threshold_dynamo.onnx",
        "box_blur_dynamo.onnx",
        "positive_dynamo.onnx",
        "min_max_dynamo.onnx",
        "cholesky_dynamo.onnx",
        "cdist_dynamo.onnx",
    ),
    3: ("threshold.onnx", "box_blur.onnx", "min_max.onnx", "cdist.onnx"),
    4: ("positive_node_dynamo.onnx",),
    7: (
        "box_blur_float16_dynamo.onnx",
        "box_blur_bfloat16_dynamo.onnx",
        "box_blur_float16.onnx",
        "box_blur_bfloat16.onnx",
    ),
}
# What this torch does not write (steps 2 and 3 say why): this example's still, not required
NOT_HERE = (
    ("box_blur.onnx", "box_blur_float16.onnx", "box_blur_bfloat16.onnx")
    * (not hasattr(torch.library, "custom_op"))
    + ("box_blur_float16_dynamo.onnx", "box_blur_bfloat16_dynamo.onnx") * (harness.TORCH < (2, 6))
    + ("min_max_dynamo.onnx",) * (harness.TORCH < (2, 8))
)
KEPT = {step: tuple(m for m in models if m not in NOT_HERE) for step, models in KEPT.items()}
FAILURES = (
    "failures/threshold_fixed_dynamo.onnx",
    "failures/threshold_fixed.onnx",
    "failures/threshold_frozen.onnx",
    "failures/cdist.onnx",
    "failures/box_blur_bf16_dynamo.onnx",
)
# For ERRORS.md: part of each reproduced error -> (what raises it, its cause[, fixing step])
CAUSES = {
    "Got invalid dimensions for input: x for the following indices": ("ONNX Runtime",
        "the model was exported with fixed input sizes (no `dynamic_axes` / `dynamic_shapes`) "
        "and is fed another batch or length", 2),
    "'NoneType' object is not subscriptable": ("dynamo=False",
        "under `dynamic_axes`, `x.type().sizes()` is None once a dim is symbolic: a symbolic "
        "reads `varyingSizes()` (None per symbolic dim) instead", 3),
    "satisfy the generated guard ((-2) + L['x'].size()[2]) != 1": ("dynamo=True",
        "a fake kernel's output size `length - 2` must not be 1 (torch.export specializes "
        "sizes 0 and 1): give the input dim a range, `Dim(\"length\", min=4)`", 2),
    "Shapes torch.Size([5, 3, 38]) and torch.Size([2, 3, 14]) are not equal": ("PyTorch",
        "`torch.library.opcheck` on a second input size: the fake kernel returns the example's "
        "fixed sizes instead of deriving them from its inputs", 2),
    "You marked batch as dynamic but your code specialized it": ("dynamo=True",
        "a fake kernel returns fixed sizes, so torch.export ties the dynamic dims to the "
        "example's values: derive the output's sizes from the inputs", 2),
    "You marked L['x'].size()[0] as dynamic but your code specialized it": ("dynamo=True",
        "a fake kernel returns fixed sizes, so a dim that `dynamic_shapes` marks with a string "
        "(`Dim.DYNAMIC`) became the example's constant: derive the output's sizes from the inputs "
        "(torch 2.9's wording)", 2),
    "but tracing inferred a static shape of 2": ("dynamo=True",
        "a fake kernel returns fixed sizes, so a dim that `dynamic_shapes` marks with a string "
        "(`Dim.DYNAMIC`) became the example's constant: derive the output's sizes from the inputs", 2),
    "satisfy the generated guard 3 <= L['args'][0][0].size()[2]": ("dynamo=True",
        "a fake kernel's output size `length - 2` must be at least 1: give the input dim a range "
        "that starts at 3 or more, `Dim(\"length\", min=4)` (torch 2.6 and 2.7's wording)", 2),
    "because batch was inferred to be a constant (2)": ("dynamo=True",
        "a fake kernel returns fixed sizes, so torch.export ties the dynamic dims to the "
        "example's values: derive the output's sizes from the inputs (torch 2.6 and 2.7's wording)", 2),
    "L['args'][0][0].size()[0] <= 25": ("dynamo=True",
        "`torch.cdist` takes a matrix product above 25 rows, and torch.export keeps that branch "
        "as a range of the dim: pass `compute_mode=\"donot_use_mm_for_euclid_dist\"` (torch 2.6 "
        "and 2.7's wording)", 2),
    "L['x1'].size()[0] <= 25": ("dynamo=True",
        "`torch.cdist` takes a matrix product above 25 rows, and torch.export keeps that branch "
        "as a range of the dim: pass `compute_mode=\"donot_use_mm_for_euclid_dist\"`", 2),
    "'SymbolicDim' object cannot be interpreted as an integer": ("dynamo=True",
        "a translation loops over a traced size (`range(self.shape[-1])`) that is symbolic "
        "under `dynamic_shapes`: keep that dim static, or write the translation without it", 2),
    "Type 'tensor(bfloat16)' of input parameter (x) of operator (BoxBlur)": ("ONNX Runtime",
        "a custom node of a type its kernel is not declared for (`PyCustomOpDef.dt_float`): the "
        "exporter wrote the model's bfloat16, though the local schema lists `tensor(float)` only; "
        "cast to float32 around the node", 7),
    "has unsupported type: tensor(bfloat16)": ("onnx.checker",
        "with the op's schema registered, the checker refuses a node of a type the schema does not "
        "list: the check the exporter does not make for a local schema", 7),
}


def main(argv: list[str] | None = None) -> int:
    return harness.run(
        __file__, globals(), kept=KEPT, failures=FAILURES, causes=CAUSES, argv=argv,
        other_files=NOT_HERE,
    )


# ---------------------------------------------------------------------------------------------
# Test-only helpers: what the README says in its Notes, shown here
# ---------------------------------------------------------------------------------------------


def strings_leave_the_dims_static(model, x, table):
    """torch 2.6 (and 2.5, where step 2 does not run): torch.export refuses a string in
    dynamic_shapes, and torch.onnx.export, without a word at verbose=False, falls back to tracing
    with TorchScript, which writes the example's sizes. Named Dims keep the dims dynamic; the file
    then has torch.export's names for them, s0 and s1 (step 2's explicit capture)."""
    dims = input_dims(onnx.load("threshold_dynamo.onnx"))
    assert dims == ["2", "3", "16"], dims  # what the reader gets: no error, no dynamic dim
    try:
        torch.export.export(model, (x,), dynamic_shapes={"x": {0: "batch"}}, strict=False)
    except Exception as error:  # noqa: BLE001 - the refusal the exporter swallows
        assert "but got batch instead" in str(error), error
    else:
        raise AssertionError("torch.export took a string in dynamic_shapes")
    harness.differs("a string in dynamic_shapes leaves the dim static, silently: torch.export "
                    "refuses it and the exporter traces with TorchScript; named Dims work")
    # The fix: a named torch.export.Dim for each dynamic dim
    dynamic_shapes = {"x": {0: Dim("batch"), 2: Dim("length")}}
    program = torch.onnx.export(
        model, (x,), dynamo=True, verbose=False, custom_translation_table=table,
        dynamic_shapes=dynamic_shapes,
    )
    program.save("threshold_dynamo.onnx")
    programs["threshold_dynamo.onnx"] = program
    print("  with Dim(\"batch\"), Dim(\"length\"):", signature("threshold_dynamo.onnx"))


def guard_says_at_least_3(x):
    """torch 2.6 and 2.7: the same refusal of step 2's Dim("length"), as a range: the box blur
    needs length >= 3 (its fake kernel's length - 2 values), where later releases also keep
    length - 2 from being 1 (0/1 specialization). Dim("length", min=4) exports on all of them."""
    harness.differs("torch.export's guard for the box blur's length reads 3 <= length, not "
                    "length - 2 != 1")
    with expect_error("satisfy the generated guard 3 <= L['args'][0][0].size()[2]"):
        torch.export.export(
            BoxBlurModel(), (x,), dynamic_shapes={"x": {0: Dim("batch"), 2: Dim("length")}},
            strict=False,
        )


def specialized_says_inferred_to_be_a_constant(x, dynamic_shapes):
    """torch 2.6 and 2.7: step 2's refusal of SharpenModel's Dims, in their words."""
    harness.differs("torch.export says each dim 'was inferred to be a constant (2)', (16)")
    with expect_error("are valid because batch was inferred to be a constant (2)"):
        torch.export.export(SharpenModel(), (x,), dynamic_shapes=dynamic_shapes, strict=False)


def sharpen_in_one_call_exports(x, names):
    """torch 2.6 to 2.8: the one call does not fail, and its program (given a translation for
    box_blur_fixed) types the output with the example's sizes. torch 2.8 falls back to draft
    export, 2.7 takes the strings as Dim.AUTO, which lets torch.export fix the dims, and 2.6 traces
    with TorchScript, as for every string (above)."""
    how = {(2, 6): "traces with TorchScript", (2, 7): "takes the fixed sizes",
           (2, 8): "falls back to draft export"}[harness.TORCH]
    harness.differs(f"the one-call export of SharpenModel {how}: no error, output [2,3,14]")
    table = {torch.ops.dynshape.box_blur_fixed.default: box_blur_translation}
    held = {(2, 6): ("Attempted to insert a get_attr Node",), (2, 8): ("draft_export",)}
    with harness.quiet(*held.get(harness.TORCH, ())):  # their logs of it, held back
        program = torch.onnx.export(
            SharpenModel().eval(), (x,), dynamo=True, verbose=False, dynamic_shapes=names,
            custom_translation_table=table,
        )
    assert [str(d) for d in program.model.graph.outputs[0].shape] == ["2", "3", "14"]


def min_max_node_before_2_8(x):
    """torch 2.6 and 2.7: no torch.onnx.ops, and torch.onnx.is_in_onnx_export() is False under
    dynamo=True, so MinMaxNode's forward runs torch.aminmax, which exports as standard ops (shown
    with Dims: with strings, 2.6's TorchScript fallback crashes the process on this model)."""
    harness.differs(ONNX_OPS)
    assert not hasattr(torch.onnx, "ops")
    program = torch.onnx.export(
        MinMaxNodeModel().eval(), (x,), dynamo=True, verbose=False,
        dynamic_shapes={"x": {0: Dim("batch"), 2: Dim("length")}},
    )
    ops = [node.op_type for node in program.model.graph]
    assert {"ReduceMin", "ReduceMax"} <= set(ops) and "MinMax" not in ops, ops


def cdist_guard_names_the_arguments(x1, x2, dynamic_shapes):
    """torch 2.6 and 2.7: step 2's refusal of PlainCDistModel's rows, naming the dims by their
    place in the arguments."""
    harness.differs("torch.export names the dims L['args'][0][0].size()[0], not L['x1'].size()[0]")
    with expect_error("guard 2 <= L['args'][0][0].size()[0] and L['args'][0][0].size()[0] <= 25"):
        torch.export.export(
            PlainCDistModel(), (x1, x2), dynamic_shapes=dynamic_shapes, strict=False
        )


def sharpen_in_one_call_names_the_dims(x, names):
    """torch 2.9: the one call fails as on later releases, with torch.export's own words for it,
    and its guard logger writes 'Error while creating guard' to stderr (held back here)."""
    harness.differs("the one-call export's error names the dims L['x'].size()[0] and [2]")
    with harness.quiet("Error while creating guard"):
        with expect_error("You marked L['x'].size()[0] as dynamic but your code specialized it"):
            torch.onnx.export(
                SharpenModel().eval(), (x,), dynamo=True, verbose=False, dynamic_shapes=names
            )


if __name__ == "__main__":
    sys.exit(main())
