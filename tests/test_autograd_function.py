"""What autograd_function/test.py writes: the op each symbolic chose, and one Resize model for every factor."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from conftest import ROOT
from onnx import AttributeProto, numpy_helper

NAME = "autograd_function"


@pytest.fixture(scope="module")
def run(example_run):
    result = example_run(NAME)  # skips the module when the example skipped itself (no compiler)
    assert result.returncode == 0, result.output[-4000:]
    return result


def ops(model):
    return [n.op_type for n in model.graph.node]


@pytest.mark.parametrize(
    "filename, expected",
    [
        ("my_relu.onnx", ["Constant", "Clip"]),
        ("my_relu_float64.onnx", ["Constant", "Clip"]),
        ("my_add_float32.onnx", ["Constant", "Mul", "Add"]),
        ("my_add_float64.onnx", ["Constant", "Mul", "Add"]),
        ("my_relu_dynamo.onnx", ["Max"]),
        ("my_add_dynamo.onnx", ["Mul", "Add"]),
        ("my_add_onnx_ops_dynamo.onnx", ["Mul", "Add"]),
        ("split_onnx_ops_dynamo.onnx", ["Split", "Mul"]),
    ],
)
def test_op_types(run, filename, expected):
    assert ops(run.model(filename)) == expected


def test_cpp_extension_model(run):
    assert ops(run.model("my_add_cpp.onnx")) == ["Constant", "Mul", "Add"]
    direct = run.model("failures/my_add_cpp_direct.onnx")  # C++ called without a Function
    assert len(direct.graph.input) == 0 and ops(direct) == ["Constant"]


@pytest.mark.parametrize("filename, dtype", [("my_relu.onnx", np.float32), ("my_relu_float64.onnx", np.float64)])
def test_clip_min_follows_the_input_dtype(run, filename, dtype):
    const = run.model(filename).graph.node[0].attribute[0].t
    assert numpy_helper.to_array(const).dtype == dtype


def test_source_clip_min_is_float32_on_float64_input(run):
    const = run.model("failures/clip_float32_min_float64_input.onnx").graph.node[0].attribute[0].t
    assert numpy_helper.to_array(const).dtype == np.float32


@pytest.mark.parametrize("filename", ["super_resolution.onnx", "super_resolution_dynamo.onnx"])
def test_resize_takes_the_factor_as_a_graph_input(run, filename):
    model = run.model(filename)
    assert [i.name for i in model.graph.input] == ["x", "factor"]
    (resize,) = [n for n in model.graph.node if n.op_type == "Resize"]
    assert resize.input[0] == "x" and resize.input[2] == "factor"
    attrs = {a.name: a for a in resize.attribute}
    assert attrs["mode"].type == AttributeProto.STRING and attrs["mode"].s == b"cubic"
    assert attrs["coordinate_transformation_mode"].s == b"pytorch_half_pixel"
    assert attrs["cubic_coeff_a"].type == AttributeProto.FLOAT and attrs["cubic_coeff_a"].f == -0.75


@pytest.mark.parametrize("filename", ["super_resolution.onnx", "super_resolution_dynamo.onnx"])
def test_one_model_upsamples_by_2_and_by_3(run, filename):
    """Recompute the model in PyTorch from the file's own weights, at two factors given at run time."""
    model = run.model(filename)
    w = {i.name: torch.from_numpy(numpy_helper.to_array(i).copy()) for i in model.graph.initializer}
    session = ort.InferenceSession(str(run.out / filename), providers=["CPUExecutionProvider"])
    x = torch.rand(1, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    for f in (2.0, 3.0):
        y = F.interpolate(x, scale_factor=(f, f), mode="bicubic", align_corners=False)
        y = torch.relu(F.conv2d(y, w["conv1.weight"], w["conv1.bias"], padding=4))
        y = torch.relu(F.conv2d(y, w["conv2.weight"], w["conv2.bias"]))
        y = F.conv2d(y, w["conv3.weight"], w["conv3.bias"], padding=2)
        (actual,) = session.run(None, {"x": x.numpy(), "factor": np.array([1, 1, f, f], dtype=np.float32)})
        assert actual.shape == (1, 3, int(16 * f), int(16 * f))
        np.testing.assert_allclose(actual, y.numpy(), rtol=1e-5, atol=1e-6)


def test_without_a_compiler_the_rest_runs_and_it_skips(tmp_path):
    proc = subprocess.run(
        [sys.executable, "test.py", "--out", str(tmp_path)],
        cwd=ROOT / NAME,
        env={**os.environ, "CXX": "no-such-compiler"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 77, proc.stdout + proc.stderr
    assert "SKIP: every other check passed; the C++ step was skipped: no C++ compiler" in proc.stdout
    assert (tmp_path / "super_resolution_dynamo.onnx").is_file()  # the steps after it still ran
    assert not (tmp_path / "my_add_cpp.onnx").exists()
