"""What register_onnx_symbolic/test.py writes: the graphs it claims, read back from its --out."""

from __future__ import annotations

import onnx
import pytest
from onnx import AttributeProto

NAME = "register_onnx_symbolic"


@pytest.fixture(scope="module")
def run(example_run):
    result = example_run(NAME)
    assert result.returncode == 0, result.output[-4000:]
    return result


def nodes(model, skip=("Constant",)):
    return [n for n in model.graph.node if n.op_type not in skip]


def opsets(model):
    return {o.domain: o.version for o in model.opset_import}


def attrs(node):
    return {a.name: a for a in node.attribute}


def test_threshold_custom_node_with_float_attributes(run):
    for filename in ["threshold_custom.onnx", "threshold_untyped.onnx"]:
        model = run.model(filename)
        (node,) = nodes(model)
        assert (node.domain, node.op_type) == ("rknn_cst", "cstThreshold")
        a = attrs(node)
        assert set(a) == {"threshold", "value"}
        assert a["threshold"].type == AttributeProto.FLOAT and a["threshold"].f == pytest.approx(0.1)
        assert a["value"].type == AttributeProto.FLOAT and a["value"].f == 20.0
        assert opsets(model) == {"": 12, "rknn_cst": 1}


def test_set_type_gives_the_output_its_shape(run):
    def dims(model):
        return [d.dim_value or d.dim_param for d in model.graph.output[0].type.tensor_type.shape.dim]

    assert dims(run.model("threshold_custom.onnx")) == [1, 3, 10, 10]
    untyped = dims(run.model("threshold_untyped.onnx"))
    assert len(untyped) == 4 and all(isinstance(d, str) for d in untyped)


def test_threshold_attribute_styles_kept_under_failures(run):
    (bare,) = nodes(run.model("failures/threshold_no_attributes.onnx"))
    assert bare.op_type == "cstThreshold" and not bare.attribute
    (listed,) = nodes(run.model("failures/threshold_float_list.onnx"))
    (param,) = listed.attribute
    assert param.name == "param" and param.type == AttributeProto.FLOATS
    assert list(param.floats) == pytest.approx([0.1, 20.0])


def test_threshold_standard_ops(run):
    model = run.model("threshold_standard.onnx")
    assert [n.op_type for n in nodes(model)] == ["Greater", "Where"]
    assert all(n.domain == "" for n in model.graph.node)


def test_elu_override_replaces_builtin(run):
    assert [n.op_type for n in run.model("elu_builtin.onnx").graph.node] == ["Elu"]
    ops = {n.op_type for n in run.model("elu_override.onnx").graph.node}
    assert "Elu" not in ops and {"Exp", "Where", "Greater"} <= ops


@pytest.mark.parametrize("opset", [9, 17])
def test_asinh_registered_at_9_serves_later_opsets(run, opset):
    model = run.model(f"asinh_opset{opset}.onnx")
    assert [n.op_type for n in model.graph.node] == ["Asinh"]
    assert opsets(model) == {"": opset}


def test_source_call_as_written_ignores_the_symbolic(run):
    model = run.model("threshold_source_as_written.onnx")
    assert [n.op_type for n in model.graph.node] == ["LessOrEqual", "Where"]
    assert opsets(model)[""] != 12


def test_deform_conv_attributes_and_input_order(run):
    model = run.model("deform_conv2d.onnx")
    (node,) = nodes(model)
    assert node.op_type == "DeformConv" and node.domain == ""
    assert opsets(model)[""] == 19
    a = attrs(node)
    assert list(a["strides"].ints) == [2, 2]
    assert list(a["pads"].ints) == [1, 1, 1, 1]
    assert list(a["dilations"].ints) == [1, 1]
    assert a["group"].i == 1 and a["offset_group"].i == 1
    graph_inputs = [i.name for i in model.graph.input]
    assert graph_inputs == ["x", "offset", "weight", "bias", "mask"]
    assert list(node.input) == ["x", "weight", "offset", "bias", "mask"]  # ONNX order: X, W, offset, B, mask


def test_deform_conv_placeholder_drops_inputs(run):
    model = run.model("failures/deform_conv2d_placeholder.onnx")
    (node,) = nodes(model)
    assert (node.domain, node.op_type) == ("custom", "deform_conv2d")
    assert [i.name for i in model.graph.input] == ["x", "offset", "weight"]


@pytest.mark.parametrize(
    "filename, domain, op_type",
    [
        ("failures/deform_conv2d_onnx_fallthrough.onnx", "torchvision", "deform_conv2d"),
        ("failures/deform_conv2d_onnx_aten_fallback.onnx", "org.pytorch.aten", "ATen"),
    ],
)
def test_fallback_modes_leave_non_onnx_nodes(run, filename, domain, op_type):
    (node,) = nodes(run.model(filename))
    assert (node.domain, node.op_type) == (domain, op_type)


@pytest.mark.parametrize(
    "filename, ops",
    [
        ("threshold_dynamo.onnx", ["LessOrEqual", "Where"]),
        ("asinh_dynamo.onnx", ["Asinh"]),
        ("deform_conv2d_dynamo.onnx", ["DeformConv"]),
    ],
)
def test_dynamo_exports_natively_and_ignores_registrations(run, filename, ops):
    model = run.model(filename)
    assert [n.op_type for n in model.graph.node] == ops
    assert all(n.domain == "" for n in model.graph.node)


def test_dynamo_custom_translation_table_keeps_custom_node(run):
    model = run.model("threshold_custom_dynamo.onnx")
    (node,) = model.graph.node
    assert (node.domain, node.op_type) == ("rknn_cst", "cstThreshold")
    a = attrs(node)
    assert a["threshold"].type == AttributeProto.FLOAT and a["threshold"].f == pytest.approx(0.1)
    assert a["value"].type == AttributeProto.FLOAT and a["value"].f == 20.0
    assert opsets(model)["rknn_cst"] == 1


def test_output_dir_holds_only_valid_models(run):
    for path in run.out.glob("*.onnx"):
        onnx.checker.check_model(onnx.load(str(path)), full_check=True)
