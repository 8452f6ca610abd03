"""What register_pytorch_op/test.py writes: one custom node with two outputs, every attribute kind."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import ROOT
from onnx import AttributeProto, TensorProto

NAME = "register_pytorch_op"


@pytest.fixture(scope="module")
def run(example_run):
    result = example_run(NAME)  # skips the module when the example skipped itself (no compiler)
    assert result.returncode == 0, result.output[-4000:]
    return result


def opsets(model):
    return {o.domain: o.version for o in model.opset_import}


def output_shapes(model):
    return [
        (
            o.type.tensor_type.elem_type,
            [d.dim_value if d.HasField("dim_value") else d.dim_param for d in o.type.tensor_type.shape.dim],
        )
        for o in model.graph.output
    ]


@pytest.mark.parametrize("filename", ["dual_residual.onnx", "dual_residual_dynamo.onnx"])
def test_one_custom_node_with_two_outputs(run, filename):
    model = run.model(filename)
    (node,) = model.graph.node
    assert (node.domain, node.op_type) == ("rknn_cst", "cstDualResidual")
    assert list(node.input) == ["x", "y"]
    assert len(node.output) == 2
    assert [o.name for o in model.graph.output] == list(node.output) == ["x_res", "y_res"]
    (alpha,) = node.attribute
    assert alpha.name == "alpha" and alpha.type == AttributeProto.FLOAT and alpha.f == 0.5
    assert opsets(model)["rknn_cst"] == 1


def test_typed_shaped_outputs(run):
    assert output_shapes(run.model("dual_residual.onnx")) == [(TensorProto.FLOAT, [2, 3, 4])] * 2
    assert output_shapes(run.model("dual_residual_dynamo.onnx")) == [(TensorProto.FLOAT, [2, 3, 4])] * 2
    untyped = output_shapes(run.model("dual_residual_untyped.onnx"))
    assert [len(dims) for _, dims in untyped] == [3, 3]
    assert all(isinstance(d, str) for _, dims in untyped for d in dims)


def test_torchscript_opsets(run):
    assert opsets(run.model("dual_residual.onnx")) == {"": 12, "rknn_cst": 1}


def test_every_attribute_kind(run):
    model = run.model("failures/foo_all_attributes.onnx")
    (node,) = model.graph.node
    assert (node.domain, node.op_type) == ("rknn_cst", "Foo")
    a = {attr.name: attr for attr in node.attribute}
    assert a["alpha"].type == AttributeProto.FLOAT and a["alpha"].f == 0.5
    assert a["beta"].type == AttributeProto.INT and a["beta"].i == 2
    assert a["mode"].type == AttributeProto.STRING and a["mode"].s == b"sub"
    assert a["scales"].type == AttributeProto.FLOATS and list(a["scales"].floats) == [1.0, 2.0, 3.0]
    assert a["dims"].type == AttributeProto.INTS and list(a["dims"].ints) == [2, 3]
    assert output_shapes(model) == [(TensorProto.FLOAT, [2, 3, 1, 1])]


def test_dynamo_traces_through_the_registeroperators_op(run):
    model = run.model("failures/dual_residual_traced_through.onnx")
    assert [n.op_type for n in model.graph.node] == ["Mul", "Sub", "Mul", "Sub"]
    assert "rknn_cst" not in opsets(model)


def test_without_a_compiler_it_skips_with_the_reason(tmp_path):
    env = {**os.environ, "CXX": "no-such-compiler"}
    proc = subprocess.run(
        [sys.executable, "test.py", "--out", str(tmp_path)],
        cwd=ROOT / NAME,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 77, proc.stdout + proc.stderr
    assert "SKIP: no C++ compiler: 'no-such-compiler' is not on PATH" in proc.stdout
