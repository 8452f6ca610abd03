"""A Python op defined with torch.library.custom_op, exported to ONNX by both exporters.

Run: python test.py [--out DIR] [-v]

demo::blur1d(Tensor x, float[] weights, SymInt dilation, str padding) blurs the last dimension.
Exported as it is, it fails under each exporter (no fake kernel; an unrecognized namespace). With
register_fake (checked by torch.library.opcheck) the export gets past torch.export and fails in the
converter (no ONNX function for the op); a custom_translation_table then writes one demo::Blur1d
node whose attributes are typed by a local schema (dynamo=True); register_custom_op_symbolic writes
the same node (dynamo=False); a second translation writes standard ONNX ops instead. An
onnxruntime-extensions Python kernel cannot read the node's FLOATS attribute, so the node is run in
ONNX Runtime through a test copy that passes the list as a constant input; demo::pick(Tensor x,
int[] indices) after it sends an INTS attribute the same way. Last, an op that writes
into its `out` argument: what torch.export makes of it, what each exporter gives, and the fix.
Every python block of README.md is in this file.
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # the repository's harness.py
import harness  # the runner: the command line, the steps, the checks (harness.py)
from page_helpers import *  # noqa: F403 - the page's first block: common imports, helpers

# The page's imports, then its helpers, word for word (a pasted page starts with them) ---------

# region imports
import io
import typing

import onnxscript
import torch.nn.functional as F
from onnxscript import opset18 as op
# endregion

# ---------------------------------------------------------------------------------------------
# 1. The plain export fails under each exporter
# ---------------------------------------------------------------------------------------------


if hasattr(torch.library, "custom_op"):  # torch.library.custom_op came with torch 2.4
    # region blur1d
    # typing.Sequence[float], not list[float]: custom_op takes the built-in list from torch 2.7 on.
    @torch.library.custom_op("demo::blur1d", mutates_args=())
    def blur1d(
        x: torch.Tensor, weights: typing.Sequence[float], dilation: int, padding: str
    ) -> torch.Tensor:
        """Blur the last dimension: y[i] = sum_k weights[k] * x[i + (k - K // 2) * dilation] for K
        weights, reading past the ends as `padding` says: "zeros", "replicate" or "reflect"."""
        total = (len(weights) - 1) * dilation
        rows = x.reshape(-1, 1, x.shape[-1])  # conv1d's (batch, channels, length)
        mode = "constant" if padding == "zeros" else padding
        padded = F.pad(rows, (total // 2, total - total // 2), mode=mode)
        kernel = torch.tensor(weights, dtype=x.dtype).reshape(1, 1, -1)
        return F.conv1d(padded, kernel, dilation=dilation).reshape(x.shape)
    # endregion


# region Blur
WEIGHTS, DILATION, PADDING = [0.25, 0.5, 0.25], 2, "reflect"


class Blur(torch.nn.Module):
    def forward(self, x):
        return blur1d(x, WEIGHTS, DILATION, PADDING)
# endregion


@harness.needs_torch("2.4", "torch.library.custom_op came with torch 2.4")
def step1_plain_export():
    """The plain export fails under each exporter"""
    # region blur_model_and_input
    model = Blur().eval()
    x = torch.randn(2, 3, 16)
    # endregion

    if harness.TORCH < (2, 6):
        harness.differs(
            "dynamo=True is the older torch.onnx.dynamo_export before 2.6: not shown here"
        )
    elif harness.TORCH == (2, 8):  # its CAPTURE_STRATEGIES end in draft export; 2.7's do not
        harness.differs(
            "dynamo=True falls back to draft_export, which runs the op instead of a fake kernel, "
            "and fails at the translation (No ONNX function found); dynamo=False's message "
            "names the op as {op_name}"
        )
        with harness.quiet(), expect_error("No ONNX function found for <OpOverload(op='demo"):
            torch.onnx.export(model, (x,), dynamo=True, verbose=False)
    else:
        logged = "always_classified is unsupported."
        with harness.quiet(logged) as held:  # torch.export's log, explained in the README
            # region dynamo_no_fake_kernel_fails
            with expect_error("There was no fake impl registered for <CustomOpDef(demo::blur1d)>"):
                torch.onnx.export(model, (x,), dynamo=True, verbose=False)
            # endregion
        assert held[0].count(logged) == 2, held[0]
        print(f"  logged twice before the error: {logged}")

    with harness.quiet():  # the exporter's 'Torch IR graph at exception' dump
        # region torchscript_unknown_namespace_fails
        with expect_error("ONNX export failed on an operator with unrecognized namespace"):
            torch.onnx.export(model, (x,), "failures/blur1d_plain.onnx", dynamo=False)
        # endregion
    assert not os.path.exists("failures/blur1d_plain.onnx")


# ---------------------------------------------------------------------------------------------
# 2. dynamo=True: a fake kernel, and a translation to one custom node
# ---------------------------------------------------------------------------------------------

# region blur1d_translation
# The node's contract: its input, output and typed attributes. Local: not registered with ONNX.
BLUR1D_SCHEMA = onnx.defs.OpSchema(
    "Blur1d",
    "demo",
    1,
    doc="demo::blur1d of PyTorch: a 1-D blur of the last dimension",
    inputs=[onnx.defs.OpSchema.FormalParameter("x", "T")],
    outputs=[onnx.defs.OpSchema.FormalParameter("y", "T")],
    type_constraints=[("T", ["tensor(float)"], "float32, as the kernels")],
    attributes=[
        onnx.defs.OpSchema.Attribute("weights", onnx.defs.OpSchema.AttrType.FLOATS, "the taps"),
        onnx.defs.OpSchema.Attribute("dilation", onnx.defs.OpSchema.AttrType.INT, "spacing"),
        onnx.defs.OpSchema.Attribute("padding", onnx.defs.OpSchema.AttrType.STRING, "the ends"),
    ],
)
Blur1d = onnxscript.values.Op(onnxscript.values.Opset("demo", 1), "Blur1d", BLUR1D_SCHEMA)


def blur1d_translation(x, weights, dilation, padding):
    # The schema types each attribute: FLOATS, INT, STRING
    return Blur1d(x, weights=weights, dilation=dilation, padding=padding)
# endregion


# region print_node
def print_node(model):
    """The model's demo node: its op, and each attribute's ONNX type and value."""
    (node,) = [node for node in model.graph.node if node.domain == "demo"]
    attributes = []
    for attribute in sorted(node.attribute, key=lambda a: a.name):
        kind = onnx.AttributeProto.AttributeType.Name(attribute.type)
        value = onnx.helper.get_attribute_value(attribute)
        value = value.decode() if isinstance(value, bytes) else value
        attributes.append(f"{attribute.name} {kind} {value!r}")
    print(f"  {node.domain}.{node.op_type}: {', '.join(attributes)}")
# endregion


@harness.needs_torch("2.6", harness.TABLE)
def step2_dynamo_custom_node():
    """dynamo=True: a fake kernel, and a translation to one custom node"""
    model = Blur().eval()
    x = torch.randn(2, 3, 16)

    # region blur1d_fake_kernel
    @blur1d.register_fake
    def _(x, weights, dilation, padding):
        return torch.empty_like(x)  # the output's shape and dtype, from the input's

    checks = torch.library.opcheck(blur1d, (x, WEIGHTS, DILATION, PADDING))
    print("  opcheck:", checks)
    # endregion

    # Past torch.export (step 1/3) now; the converter (step 3/3) has no ONNX function for the op
    with harness.quiet():  # the exporter's log of the error, if any
        # region dynamo_no_translation_fails
        with expect_error("No ONNX function found for <OpOverload(op='demo.blur1d'"):
            torch.onnx.export(model, (x,), dynamo=True, verbose=False)
        # endregion

    # region dynamo_custom_node
    onnx_program = torch.onnx.export(
        model, (x,), dynamo=True, verbose=False,
        custom_translation_table={torch.ops.demo.blur1d.default: blur1d_translation},
    )
    onnx_program.save("blur1d_dynamo.onnx")
    print_node(onnx.load("blur1d_dynamo.onnx"))
    print("  registered with ONNX:", onnx.defs.has("Blur1d", "demo"))
    # endregion

    assert set(checks.values()) == {"SUCCESS"}, checks
    written = harness.show("blur1d_dynamo.onnx")
    assert harness.op_types("blur1d_dynamo.onnx") == ["demo.Blur1d"]
    assert harness.opsets_of(written)["demo"] == 1
    check_node(written)


# ---------------------------------------------------------------------------------------------
# 3. dynamo=False: the same node from a symbolic
# ---------------------------------------------------------------------------------------------


# region blur1d_symbolic
@parse_args("v", "fs", "i", "s")
def blur1d_symbolic(g, x, weights, dilation, padding):
    # The suffix types each attribute: _f FLOAT, or FLOATS when given a list; _i INT; _s STRING
    y = g.op("demo::Blur1d", x, weights_f=weights, dilation_i=dilation, padding_s=padding)
    return y.setType(x.type())
# endregion


@harness.needs_torch("2.4", "torch.library.custom_op came with torch 2.4")
def step3_torchscript_custom_node():
    """dynamo=False: the same node from register_custom_op_symbolic"""
    model = Blur().eval()
    x = torch.randn(2, 3, 16)

    # region torchscript_custom_node
    register_custom_op_symbolic("demo::blur1d", blur1d_symbolic, 1)
    torch.onnx.export(
        model, (x,), "blur1d_torchscript.onnx", dynamo=False, opset_version=18,
        input_names=["x"], output_names=["y"], custom_opsets={"demo": 1},
    )
    print_node(onnx.load("blur1d_torchscript.onnx"))
    # endregion

    harness.show("blur1d_torchscript.onnx")
    assert harness.op_types("blur1d_torchscript.onnx") == ["demo.Blur1d"]
    check_node(onnx.load("blur1d_torchscript.onnx"))


# ---------------------------------------------------------------------------------------------
# 4. Standard ONNX ops instead, for a runtime without a kernel
# ---------------------------------------------------------------------------------------------

# region blur1d_standard
PAD_MODES = {"zeros": "constant", "replicate": "edge", "reflect": "reflect"}  # ONNX's names


def blur1d_standard(x, weights, dilation, padding):
    # Every row of x becomes one sample of one channel for Conv: (rows, 1, length)
    length = op.Shape(x, start=-1)
    rows = op.Reshape(x, op.Concat(op.Constant(value_ints=[-1, 1]), length, axis=0))
    total = (len(weights) - 1) * dilation
    pads = op.Constant(value_ints=[0, 0, total // 2, 0, 0, total - total // 2])
    padded = op.Pad(rows, pads, mode=PAD_MODES[padding])  # the string picks Pad's mode
    kernel = op.Reshape(op.Constant(value_floats=weights), op.Constant(value_ints=[1, 1, -1]))
    y = op.Conv(padded, kernel, dilations=[dilation])  # the int becomes Conv's dilation
    return op.Reshape(y, op.Shape(x))
# endregion


# region blur1d_standard_symbolic
@parse_args("v", "fs", "i", "s")
def blur1d_standard_symbolic(g, x, weights, dilation, padding):
    def constant(values, dtype):
        return g.op("Constant", value_t=torch.tensor(values, dtype=dtype))

    length = g.op("Shape", x, start_i=-1)
    rows = g.op("Reshape", x, g.op("Concat", constant([-1, 1], torch.int64), length, axis_i=0))
    total = (len(weights) - 1) * dilation
    pads = constant([0, 0, total // 2, 0, 0, total - total // 2], torch.int64)
    padded = g.op("Pad", rows, pads, mode_s=PAD_MODES[padding])
    kernel = constant([[weights]], torch.float32)
    y = g.op("Conv", padded, kernel, dilations_i=[dilation])
    return g.op("Reshape", y, g.op("Shape", x))
# endregion


@harness.needs_torch("2.4", "torch.library.custom_op came with torch 2.4")
def step4_standard_ops():
    """Standard ONNX ops instead, for a runtime without a kernel"""
    model = Blur().eval()
    x = torch.randn(2, 3, 16)

    if harness.TORCH < (2, 6):
        harness.differs("the dynamo=True half needs custom_translation_table (torch 2.6)")
    else:
        standard_dynamo(model, x)

    # region standard_ops_torchscript
    register_custom_op_symbolic("demo::blur1d", blur1d_standard_symbolic, 1)
    torch.onnx.export(
        model, (x,), "blur1d_standard_torchscript.onnx", dynamo=False, opset_version=18,
        input_names=["x"], output_names=["y"],
    )
    (actual,) = run_ort("blur1d_standard_torchscript.onnx", {"x": x.numpy()})
    compare("blur1d_standard_torchscript.onnx", actual, model(x), rtol=1e-5, atol=1e-6)
    # endregion

    harness.show("blur1d_standard_torchscript.onnx")
    assert {"Pad", "Conv"} <= set(harness.op_types("blur1d_standard_torchscript.onnx"))


def standard_dynamo(model, x):
    # Needs torch >= 2.6 (custom_translation_table); relies on step 2's fake kernel.
    # region standard_ops_dynamo
    table = {torch.ops.demo.blur1d.default: blur1d_standard}
    onnx_program = torch.onnx.export(
        model, (x,), dynamo=True, verbose=False, custom_translation_table=table
    )
    assert_onnx_program(onnx_program, rtol=1e-5, atol=1e-6)  # ONNX Runtime vs PyTorch
    onnx_program.save("blur1d_standard_dynamo.onnx")
    print("  ops:", " ".join(node.op_type for node in onnx_program.model_proto.graph.node))
    # endregion

    harness.show("blur1d_standard_dynamo.onnx")
    ops = harness.op_types("blur1d_standard_dynamo.onnx")
    assert {"Pad", "Conv"} <= set(ops) and "demo.Blur1d" not in ops, ops


# ---------------------------------------------------------------------------------------------
# 5. The custom node in ONNX Runtime, with a Python kernel
# ---------------------------------------------------------------------------------------------


# region blur1d_numpy
def blur1d_numpy(x, weights, dilation, padding):
    """The op in NumPy, for the Python kernels: the same taps and ends as the PyTorch op."""
    total = (len(weights) - 1) * dilation
    ends = [(0, 0)] * (x.ndim - 1) + [(total // 2, total - total // 2)]
    padded = np.pad(x, ends, mode=PAD_MODES[padding])  # NumPy names the modes as ONNX does
    n = x.shape[-1]
    taps = [w * padded[..., k * dilation : k * dilation + n] for k, w in enumerate(weights)]
    return np.sum(taps, axis=0, dtype=np.float32)
# endregion


# region lists_as_inputs
LIST_DTYPES = {onnx.AttributeProto.FLOATS: np.float32, onnx.AttributeProto.INTS: np.int64}


def lists_as_inputs(model):
    """A test copy of MODEL for a Python kernel: each demo node moves to onnxruntime-extensions'
    own domain, ai.onnx.contrib, and passes each list attribute as a constant input instead."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for number, node in enumerate(n for n in copy.graph.node if n.domain == "demo"):
        for attribute in [a for a in node.attribute if a.type in LIST_DTYPES]:
            name = f"{node.op_type}_{number}_{attribute.name}"
            values = onnx.helper.get_attribute_value(attribute)
            values = np.array(values, dtype=LIST_DTYPES[attribute.type])  # float32 or int64
            copy.graph.initializer.append(onnx.numpy_helper.from_array(values, name))
            node.input.append(name)
            node.attribute.remove(attribute)
        node.domain = "ai.onnx.contrib"
    copy.opset_import.append(onnx.helper.make_opsetid("ai.onnx.contrib", 1))
    return copy
# endregion


if hasattr(torch.library, "custom_op"):  # torch.library.custom_op came with torch 2.4
    # region pick
    # An op with an int list: the values of the last dimension at `indices`, in that order
    @torch.library.custom_op("demo::pick", mutates_args=())
    def pick(x: torch.Tensor, indices: typing.Sequence[int]) -> torch.Tensor:
        return x[..., list(indices)]  # a new tensor: indexing with a list copies


    @pick.register_fake
    def _(x, indices):
        return x.new_empty(*x.shape[:-1], len(indices))


    PICK_SCHEMA = onnx.defs.OpSchema(
        "Pick",
        "demo",
        1,
        inputs=[onnx.defs.OpSchema.FormalParameter("x", "T")],
        outputs=[onnx.defs.OpSchema.FormalParameter("y", "T")],
        type_constraints=[("T", ["tensor(float)"], "float32, as the kernels")],
        attributes=[
            onnx.defs.OpSchema.Attribute("indices", onnx.defs.OpSchema.AttrType.INTS, "positions"),
        ],
    )
    Pick = onnxscript.values.Op(onnxscript.values.Opset("demo", 1), "Pick", PICK_SCHEMA)


    def pick_translation(x, indices):
        return Pick(x, indices=indices)  # the schema types it: INTS


    PICKED = [15, 10, 5, 0]


    class BlurPick(torch.nn.Module):
        def forward(self, x):
            return pick(blur1d(x, WEIGHTS, DILATION, PADDING), PICKED)  # a float and an int list
    # endregion


# region python_kernel_session
def python_kernel_session(model):
    """For initialize_inference_session: model bytes -> a session with the Python kernel."""
    test_copy = lists_as_inputs(onnx.load_model_from_string(model))
    options = ort.SessionOptions()
    options.register_custom_ops_library(get_library_path())
    return ort.InferenceSession(
        test_copy.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
# endregion


@harness.needs_torch("2.4", "torch.library.custom_op came with torch 2.4")
def step5_python_kernel():
    """The custom node in ONNX Runtime, with a Python kernel"""
    if onnx_op is None:
        raise harness.Skip(harness.ortx_problem())
    model = Blur().eval()
    x = torch.randn(2, 3, 16)

    # region blur1d_kernel_as_declared
    @onnx_op(
        op_type="demo::Blur1d",
        inputs=[PyCustomOpDef.dt_float],
        outputs=[PyCustomOpDef.dt_float],
        attrs={
            "weights": PyCustomOpDef.dt_float,  # no type for a list: FLOATS does not match
            "dilation": PyCustomOpDef.dt_int64,
            "padding": PyCustomOpDef.dt_string,
        },
    )
    def blur1d_kernel_as_declared(x, weights, dilation, padding):
        return blur1d_numpy(x, weights, dilation, padding)
    # endregion

    # region kernel_as_declared_fails
    options = ort.SessionOptions()
    options.register_custom_ops_library(get_library_path())
    with expect_error("Unable to find attribute 'weights' due to 'Attribute name and type don't"):
        ort.InferenceSession("blur1d_torchscript.onnx", options, providers=["CPUExecutionProvider"])
    # endregion

    # region blur1d_kernel
    @onnx_op(
        op_type="Blur1d",  # in onnxruntime-extensions' domain, where lists_as_inputs moves it
        inputs=[PyCustomOpDef.dt_float, PyCustomOpDef.dt_float],  # x, and weights as a tensor
        outputs=[PyCustomOpDef.dt_float],
        attrs={"dilation": PyCustomOpDef.dt_int64, "padding": PyCustomOpDef.dt_string},
    )
    def blur1d_kernel(x, weights, dilation, padding):
        print("  blur1d_kernel received:", weights.dtype, weights.tolist(), dilation, repr(padding))
        return blur1d_numpy(x, weights.tolist(), dilation, padding)
    # endregion

    # region pick_kernel
    @onnx_op(
        op_type="Pick",  # in ai.onnx.contrib too
        inputs=[PyCustomOpDef.dt_float, PyCustomOpDef.dt_int64],  # x, and indices as a tensor
        outputs=[PyCustomOpDef.dt_float],
    )
    def pick_kernel(x, indices):
        print("  pick_kernel received:", indices.dtype, indices.tolist())
        return x[..., indices]
    # endregion

    # region python_kernel_torchscript
    test_copy = lists_as_inputs(onnx.load("blur1d_torchscript.onnx"))
    options = ort.SessionOptions()
    options.register_custom_ops_library(get_library_path())
    (actual,) = run_ort(test_copy.SerializeToString(), {"x": x.numpy()}, options)
    compare("blur1d_torchscript.onnx", actual, model(x), rtol=1e-5, atol=1e-6)
    # endregion

    if harness.TORCH < (2, 6):
        harness.differs("the dynamo=True half needs custom_translation_table (torch 2.6)")
    else:
        python_kernel_dynamo(model, x)

    assert "ai.onnx.contrib.Blur1d" in [f"{n.domain}.{n.op_type}" for n in test_copy.graph.node]


def python_kernel_dynamo(model, x):
    # Needs torch >= 2.6 (custom_translation_table); relies on step 2's fake kernel.
    # region python_kernel_dynamo_pick
    torch.library.opcheck(pick, (x, PICKED))  # raises if the fake kernel is wrong
    table = {
        torch.ops.demo.blur1d.default: blur1d_translation,
        torch.ops.demo.pick.default: pick_translation,
    }
    onnx_program = torch.onnx.export(
        BlurPick().eval(), (x,), dynamo=True, verbose=False, custom_translation_table=table
    )
    onnx_program.save("blur1d_pick_dynamo.onnx")
    onnx_program.initialize_inference_session(python_kernel_session)
    assert_onnx_program(onnx_program, rtol=1e-5, atol=1e-6)  # ONNX Runtime vs PyTorch
    print("  the dynamo=True program matches PyTorch in ONNX Runtime, with the Python kernels")
    test_copy = lists_as_inputs(onnx_program.model_proto)
    nodes = [f"{n.op_type}({', '.join(n.input)})" for n in test_copy.graph.node]
    print("  test copy:", ", ".join(nodes))
    # endregion

    written = harness.show("blur1d_pick_dynamo.onnx")
    assert harness.op_types("blur1d_pick_dynamo.onnx") == ["demo.Blur1d", "demo.Pick"]
    (node,) = [n for n in written.graph.node if n.op_type == "Pick"]
    assert harness.attributes(node) == {"indices": ("INTS", PICKED)}, harness.attributes(node)
    ends = [tuple(n.input[1:]) for n in test_copy.graph.node]
    assert ends == [("Blur1d_0_weights",), ("Pick_1_indices",)], ends
    constants = {i.name: onnx.numpy_helper.to_array(i) for i in test_copy.graph.initializer}
    assert constants["Pick_1_indices"].dtype == np.int64, constants

    # The file step 2 wrote runs the same way (its kernel's line held back: the page shows it)
    session = python_kernel_session(pathlib.Path("blur1d_dynamo.onnx").read_bytes())
    with contextlib.redirect_stdout(io.StringIO()):
        (actual,) = session.run(None, {"x": x.numpy()})
    np.testing.assert_allclose(actual, model(x).numpy(), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# 6. An op that writes into its input
# ---------------------------------------------------------------------------------------------


if hasattr(torch.library, "custom_op"):  # torch.library.custom_op came with torch 2.4
    # region blur1d_into
    @torch.library.custom_op("demo::blur1d_into", mutates_args=("out",))
    def blur1d_into(
        x: torch.Tensor,
        weights: typing.Sequence[float],
        dilation: int,
        padding: str,
        out: torch.Tensor,
    ) -> None:
        out.copy_(blur1d(x, weights, dilation, padding))  # writes the result into `out`


    @blur1d_into.register_fake
    def _(x, weights, dilation, padding, out):
        return None  # nothing to return: it only writes


    class BlurInto(torch.nn.Module):
        def forward(self, x):
            out = torch.empty_like(x)
            blur1d_into(x, WEIGHTS, DILATION, PADDING, out)
            return out
    # endregion


@harness.needs_torch("2.4", "torch.library.custom_op came with torch 2.4")
def step6_writing_op():
    """An op that writes into its input"""
    x = torch.randn(2, 3, 16)

    # region blur1d_into_exported_graph
    out = torch.empty_like(x)
    checks = torch.library.opcheck(blur1d_into, (x, WEIGHTS, DILATION, PADDING, out))
    print("  opcheck:", checks)
    exported = torch.export.export(BlurInto(), (x,), strict=False).run_decompositions()
    for node in exported.graph.nodes:
        if node.op == "call_function":
            arguments = [str(a) for a in node.args] + [f"{k}={v}" for k, v in node.kwargs.items()]
            print(f"    {node.name} = {node.target.__name__}({', '.join(arguments)})")
    # endregion

    assert set(checks.values()) == {"SUCCESS"}, checks
    if harness.TORCH < (2, 6):
        harness.differs(
            "torch.export writes auto_functionalized (v1); the dynamo=True half is not shown "
            "(torch.onnx.dynamo_export before 2.6)"
        )
    elif harness.TORCH < (2, 9):
        harness.differs("torch.export writes auto_functionalized (v1), not auto_functionalized_v2")
        writing_op_dynamo(x)
    else:
        writing_op_dynamo(x)

    # region blur1d_into_torchscript_constant
    os.makedirs("failures", exist_ok=True)
    torch.onnx.export(
        BlurInto().eval(), (x,), "failures/blur1d_into_torchscript.onnx", dynamo=False,
        opset_version=18, input_names=["x"],
    )
    written = onnx.load("failures/blur1d_into_torchscript.onnx")
    inputs = [value.name for value in written.graph.input]
    print(f"  inputs {inputs}, nodes {[node.op_type for node in written.graph.node]}")
    # endregion

    assert inputs == [], inputs
    assert harness.op_types("failures/blur1d_into_torchscript.onnx") == ["Constant"]
    (constant,) = written.graph.node  # empty_like written as zeros_like, folded: all zeros
    value = onnx.numpy_helper.to_array(onnx.helper.get_attribute_value(constant.attribute[0]))
    assert value.shape == (2, 3, 16) and not value.any(), value
    model = BlurReturning().eval()

    # region blur1d_returning_torchscript
    register_custom_op_symbolic("demo::blur1d_returning", blur1d_symbolic, 1)
    buffer = io.BytesIO()  # no file: the node is step 3's
    torch.onnx.export(
        model, (x,), buffer, dynamo=False, opset_version=18, custom_opsets={"demo": 1}
    )
    print_node(onnx.load_model_from_string(buffer.getvalue()))
    # endregion

    check_node(onnx.load_model_from_string(buffer.getvalue()))


def writing_op_dynamo(x):
    # Needs torch >= 2.6: before, dynamo=True is torch.onnx.dynamo_export.
    with harness.quiet():  # the exporter's progress and its log of the error
        # region auto_functionalized_fails
        with expect_error("Error when translating node %auto_functionalized"):
            torch.onnx.export(BlurInto().eval(), (x,), dynamo=True, verbose=False)
        # endregion

    # region blur1d_returning_dynamo
    model = BlurReturning().eval()
    torch.library.opcheck(blur1d_returning, (x, WEIGHTS, DILATION, PADDING))  # raises if wrong
    table = {torch.ops.demo.blur1d_returning.default: blur1d_translation}
    onnx_program = torch.onnx.export(
        model, (x,), dynamo=True, verbose=False, custom_translation_table=table
    )
    print_node(onnx_program.model_proto)  # no file: the node is step 2's
    # endregion

    check_node(onnx_program.model_proto)


if hasattr(torch.library, "custom_op"):  # torch.library.custom_op came with torch 2.4
    # region blur1d_returning
    # The fix: an op that returns its result. The writing op can stay, inside it.
    @torch.library.custom_op("demo::blur1d_returning", mutates_args=())
    def blur1d_returning(
        x: torch.Tensor, weights: typing.Sequence[float], dilation: int, padding: str
    ) -> torch.Tensor:
        out = torch.empty_like(x)
        blur1d_into(x, weights, dilation, padding, out)  # inside the op, unseen by the exporters
        return out


    @blur1d_returning.register_fake
    def _(x, weights, dilation, padding):
        return torch.empty_like(x)


    class BlurReturning(torch.nn.Module):
        def forward(self, x):
            return blur1d_returning(x, WEIGHTS, DILATION, PADDING)
    # endregion


# ---------------------------------------------------------------------------------------------
# 7. A float16 or bfloat16 model: the node between Casts
# ---------------------------------------------------------------------------------------------

# region blur1d_half
# The kernels take float32 only (onnxruntime-extensions' Python ops have no float16 or
# bfloat16), so BLUR1D_SCHEMA's T stays tensor(float): a half model casts around the node.
def blur1d_cast_translation(x, weights, dilation, padding):
    x32 = op.Cast(x, to=onnx.TensorProto.FLOAT)
    y = Blur1d(x32, weights=weights, dilation=dilation, padding=padding)
    return op.CastLike(y, x)  # back to the model's dtype (ONNX's CastLike: opset 15 or later)


@parse_args("v", "fs", "i", "s")
def blur1d_cast_symbolic(g, x, weights, dilation, padding):  # the same Casts, for dynamo=False
    x32 = g.op("Cast", x, to_i=onnx.TensorProto.FLOAT)
    y = g.op("demo::Blur1d", x32, weights_f=weights, dilation_i=dilation, padding_s=padding)
    y.setType(x.type().with_dtype(torch.float32))
    return g.op("CastLike", y, x)
# endregion


# region compare_half
def compare_half(path, model, x):
    """PATH's test copy in ONNX Runtime with step 5's kernel, against MODEL in x's dtype, to one
    unit in the last place of that dtype (each side rounds once from float32: see below)."""
    test_copy = lists_as_inputs(onnx.load(path)).SerializeToString()
    with contextlib.redirect_stdout(io.StringIO()):  # step 5's kernel prints at each call
        (actual,) = run_ort_torch(test_copy, [x], ortx_options())
    eps = torch.finfo(x.dtype).eps  # the spacing at 1: 2**-10 (float16), 2**-7 (bfloat16)
    atol = torch.finfo(x.dtype).tiny * eps  # one unit in the last place below the normals
    torch.testing.assert_close(actual, model(x), rtol=eps, atol=atol)  # dtypes too
    print(f"  {path}: {actual.dtype} out, within 1 ulp of PyTorch's")
# endregion


@harness.needs_torch(
    "2.6",
    "custom_translation_table came with torch 2.6; PyTorch's CPU reflect padding takes float16 "
    "from 2.6 too (torch 2.4: \"reflection_pad1d\" not implemented for 'Half')",
)
def step7_half_precision():
    """A float16 or bfloat16 model: the node between Casts"""
    # region bfloat16_node_fails_check
    model, x = Blur().eval(), torch.randn(2, 3, 16).to(torch.bfloat16)
    table = {torch.ops.demo.blur1d.default: blur1d_translation}  # step 2's: T = tensor(float)
    path = "failures/blur1d_bfloat16_dynamo.onnx"
    program = torch.onnx.export(
        model, (x,), dynamo=True, verbose=False, custom_translation_table=table
    )
    program.save(path)
    (node,) = onnx.load(path).graph.node
    print(f"  {path}: exported, {node.op_type} on bfloat16 (its schema: float)")
    if onnx_op is not None:
        with expect_error("Type 'tensor(bfloat16)' of input parameter (x) of operator (Blur1d)"):
            python_kernel_session(onnx.load(path).SerializeToString())  # step 5's test copy
    with expect_error("has unsupported type: tensor(bfloat16)"):
        check_with_schemas(path, BLUR1D_SCHEMA)  # right after the export: caught there
    # endregion

    # region half_casts_dynamo
    table = {torch.ops.demo.blur1d.default: blur1d_cast_translation}
    for dtype, path in [
        (torch.float16, "blur1d_float16_dynamo.onnx"),
        (torch.bfloat16, "blur1d_bfloat16_dynamo.onnx"),
    ]:
        x = torch.randn(2, 3, 16).to(dtype)
        program = torch.onnx.export(
            model, (x,), dynamo=True, verbose=False, custom_translation_table=table
        )
        program.save(path)
        check_with_schemas(path, BLUR1D_SCHEMA)
        print(f"  {path}: {[n.op_type for n in onnx.load(path).graph.node]}, full check passed")
        if onnx_op is not None:
            compare_half(path, model, x)
    # endregion
    for path in ("blur1d_float16_dynamo.onnx", "blur1d_bfloat16_dynamo.onnx"):
        harness.show(path)  # torch 2.6 keeps the CastLike; later a Cast
        ops = harness.op_types(path)
        assert ops[:2] == ["Cast", "demo.Blur1d"] and ops[2] in ("Cast", "CastLike"), ops
        check_node(onnx.load(path))

    # region half_casts_torchscript
    register_custom_op_symbolic("demo::blur1d", blur1d_cast_symbolic, 1)
    for dtype, path in [
        (torch.float16, "blur1d_float16_torchscript.onnx"),
        (torch.bfloat16, "blur1d_bfloat16_torchscript.onnx"),
    ]:
        x = torch.randn(2, 3, 16).to(dtype)
        torch.onnx.export(
            model, (x,), path, dynamo=False, opset_version=18,
            input_names=["x"], output_names=["y"], custom_opsets={"demo": 1},
        )
        check_with_schemas(path, BLUR1D_SCHEMA)
        print(f"  {path}: {[n.op_type for n in onnx.load(path).graph.node]}, full check passed")
        if onnx_op is not None:
            compare_half(path, model, x)
    # endregion
    for path in ("blur1d_float16_torchscript.onnx", "blur1d_bfloat16_torchscript.onnx"):
        harness.show(path)
        assert harness.op_types(path) == ["Cast", "demo.Blur1d", "CastLike"], path
        check_node(onnx.load(path))
    if onnx_op is None:
        raise harness.Skip(harness.ortx_problem())


# ---------------------------------------------------------------------------------------------

DYNAMO = harness.TORCH >= (2, 6)  # custom_translation_table: step 4's dynamo=True file
KEPT = {  # what each step writes and claims valid; failure demonstrations below
    2: ("blur1d_dynamo.onnx",),
    3: ("blur1d_torchscript.onnx",),
    4: ("blur1d_standard_torchscript.onnx", *(("blur1d_standard_dynamo.onnx",) if DYNAMO else ())),
    5: ("blur1d_pick_dynamo.onnx",) if DYNAMO else (),
    7: (
        "blur1d_float16_dynamo.onnx",
        "blur1d_bfloat16_dynamo.onnx",
        "blur1d_float16_torchscript.onnx",
        "blur1d_bfloat16_torchscript.onnx",
    ) if DYNAMO else (),
}
FAILURES = (
    "failures/blur1d_plain.onnx",
    "failures/blur1d_into_torchscript.onnx",
    "failures/blur1d_bfloat16_dynamo.onnx",
)
# For ERRORS.md: part of each reproduced error -> (what raises it, its cause[, fixing step])
CAUSES = {
    "There was no fake impl registered for": (
        "dynamo=True",
        "`torch.export` runs the model on fake tensors and a `torch.library.custom_op` has no "
        "fake kernel to run: register one with `register_fake`",
        2,
    ),
    "No ONNX function found for <OpOverload(op='demo": (
        "dynamo=True",
        "the fake kernel gets the custom op past `torch.export`, but the converter has no ONNX "
        "function for it: add a translation to `custom_translation_table` (on torch 2.8 "
        "draft_export gets here without a fake kernel)",
        2,
    ),
    "ONNX export failed on an operator with unrecognized namespace": (
        "dynamo=False",
        "no symbolic is registered for the custom op's namespace: "
        "`register_custom_op_symbolic`",
        3,
    ),
    "Unable to find attribute 'weights' due to 'Attribute name and type don't match'": (
        "ONNX Runtime",
        "an onnxruntime-extensions Python kernel reads int, float and string attributes only; "
        "`weights` is FLOATS (an INTS attribute fails the same way): pass the list as a constant "
        "input",
        5,
    ),
    "Error when translating node %auto_functionalized": (
        "dynamo=True",
        "`torch.export` turned a custom op that writes into an input into an "
        "`auto_functionalized` call, which the exporter cannot translate: export an op that "
        "returns its result",
        6,
    ),
    "Type 'tensor(bfloat16)' of input parameter (x) of operator (Blur1d)": (
        "ONNX Runtime",
        "a custom node of a type its kernel is not declared for (`PyCustomOpDef.dt_float`): the "
        "exporter wrote the model's bfloat16, though the local schema lists `tensor(float)` only; "
        "cast to float32 around the node",
        7,
    ),
    "has unsupported type: tensor(bfloat16)": (
        "onnx.checker",
        "with the op's schema registered, the full checker refuses a node of a type the schema "
        "does not list: the check the exporter does not make for a local schema",
        7,
    ),
}


def main(argv: list[str] | None = None) -> int:
    return harness.run(__file__, globals(), kept=KEPT, failures=FAILURES, causes=CAUSES, argv=argv)


# ---------------------------------------------------------------------------------------------
# Test-only helpers
# ---------------------------------------------------------------------------------------------


def check_node(model):
    """MODEL holds one demo.Blur1d node with the example's attributes, each of its ONNX type."""
    (node,) = [node for node in model.graph.node if node.domain == "demo"]
    assert (node.op_type, len(node.input), len(node.output)) == ("Blur1d", 1, 1), node
    expected = {"weights": ("FLOATS", WEIGHTS), "dilation": ("INT", DILATION)}
    expected["padding"] = ("STRING", PADDING)
    assert harness.attributes(node) == expected, harness.attributes(node)


if __name__ == "__main__":
    sys.exit(main())
