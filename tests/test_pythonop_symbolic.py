"""What pythonop_symbolic/test.py writes: every prim::PythonOp translated, by name and by argument."""

from __future__ import annotations

import pytest
from onnx import numpy_helper

NAME = "pythonop_symbolic"


@pytest.fixture(scope="module")
def run(example_run):
    result = example_run(NAME)
    assert result.returncode == 0, result.output[-4000:]
    return result


def ops(model):
    return [n.op_type for n in model.graph.node]


def clip_mins(model):
    """The `min` of each Clip, read from the Constant node or initializer that feeds it."""
    constants = {
        n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in model.graph.node if n.op_type == "Constant"
    }
    constants.update({i.name: numpy_helper.to_array(i) for i in model.graph.initializer})
    return [float(constants[n.input[1]]) for n in model.graph.node if n.op_type == "Clip"]


@pytest.mark.parametrize(
    "filename", ["inlined.onnx", "pythonop.onnx", "pythonop_by_argument.onnx", "custom_ops_dynamo.onnx"]
)
def test_no_pythonop_and_only_standard_ops(run, filename):
    model = run.model(filename)
    assert all(n.domain == "" for n in model.graph.node)
    assert "PythonOp" not in ops(model)


def test_dispatch_by_name(run):
    model = run.model("pythonop.onnx")
    assert ops(model) == ["Constant", "Clip", "Relu"]  # MyClip(x, -0.5) -> Clip, MyRelu -> Relu
    assert clip_mins(model) == [-0.5]


def test_dispatch_by_argument(run):
    model = run.model("pythonop_by_argument.onnx")
    assert ops(model) == ["Relu", "Constant", "Clip", "Add"]  # MyClip(x, 0.0) -> Relu, MyClip(x, 0.5) -> Clip
    assert clip_mins(model) == [0.5]


def test_default_inlines_the_forward(run):
    model = run.model("inlined.onnx")
    assert ops(model).count("Clip") == 2 and "Relu" not in ops(model)


def test_dynamo_custom_ops_with_one_table(run):
    model = run.model("custom_ops_dynamo.onnx")
    assert sorted(ops(model)) == ["Add", "Add", "Clip", "Relu", "Relu"]
    assert clip_mins(model) == [0.5]
