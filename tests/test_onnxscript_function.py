"""What onnxscript_function/test.py writes, and a watch on the @onnxscript.script translation bug."""

from __future__ import annotations

import onnx
import onnx_ir
import onnxscript
import pytest
import torch
from onnx import AttributeProto
from onnxscript.onnx_opset import opset18

NAME = "onnxscript_function"


@pytest.fixture(scope="module")
def run(example_run):
    result = example_run(NAME)
    assert result.returncode == 0, result.output[-4000:]
    return result


def opsets(proto):
    return {o.domain: o.version for o in proto.opset_import}


def test_selu_function_is_in_the_model(run):
    model = run.model("selu_function.onnx")
    (node,) = model.graph.node
    assert (node.domain, node.op_type) == ("custom-onnx-script", "Selu")
    (function,) = model.functions
    assert (function.domain, function.name) == ("custom-onnx-script", "Selu")
    assert opsets(model) == {"": 15, "custom-onnx-script": 1}
    assert opsets(function) == {"": 15}  # the same opset as the model
    assert {"CastLike", "Exp", "Where"} <= {n.op_type for n in function.node}


def test_source_function_uses_castlike_at_opset_14(run):
    model = run.model("failures/selu_function_opset14.onnx")
    (function,) = model.functions
    assert opsets(function) == {"": 14}
    assert "CastLike" in {n.op_type for n in function.node}  # CastLike arrived in opset 15


def test_registration_above_the_export_opset_is_skipped(run):
    model = run.model("failures/selu_registered_above_export_opset.onnx")
    assert [(n.domain, n.op_type) for n in model.graph.node] == [("", "Selu")]
    assert not model.functions


def test_threshold_function_keeps_name_and_attributes(run):
    model = run.model("threshold_function.onnx")
    (node,) = model.graph.node
    assert (node.domain, node.op_type) == ("rknn_cst", "cstThreshold")
    attrs = {a.name: a for a in node.attribute}
    assert attrs["threshold"].type == AttributeProto.FLOAT and attrs["threshold"].f == pytest.approx(0.1)
    assert attrs["value"].type == AttributeProto.FLOAT and attrs["value"].f == 20.0
    (function,) = model.functions
    assert (function.domain, function.name) == ("rknn_cst", "cstThreshold")
    assert list(function.attribute) == ["threshold", "value"]
    assert opsets(model) == {"": 15, "rknn_cst": 1}


@pytest.mark.parametrize("filename", ["selu_dynamo_plain.onnx", "selu_dynamo_script_annotated.onnx"])
def test_dynamo_translation_is_inlined(run, filename):
    model = run.model(filename)
    ops = [n.op_type for n in model.graph.node]
    assert {"Exp", "Where"} <= set(ops) and "Selu" not in ops
    assert not model.functions


# The failing form, run here in the test process: when an onnxscript or torch release makes an
# unannotated @onnxscript.script translation work, this strict xfail turns into a failure that says so.
unannotated_opset = onnxscript.values.Opset(domain="custom-onnx-script", version=1)


@onnxscript.script(unannotated_opset)
def SeluScript(X):
    alpha = opset18.CastLike(1.6732632423543772, X)
    gamma = opset18.CastLike(1.0507009873554805, X)
    negative = gamma * (alpha * opset18.Exp(X) - alpha)
    return opset18.Where(X <= opset18.CastLike(0.0, X), negative, gamma * X)


@pytest.mark.xfail(
    strict=True,
    raises=onnx_ir.passes.PassError,  # the inliner's error: any other failure is a real one
    reason="torch 2.14.1 + onnxscript 0.7.2: an @onnxscript.script translation without a return annotation gets "
    "zero outputs (torch/onnx/_internal/exporter/_schemas.py op_signature_from_function) and the inliner fails",
)
def test_unannotated_script_translation_exports(tmp_path):
    program = torch.onnx.export(
        torch.nn.SELU().eval(),
        (torch.randn(2, 3),),
        dynamo=True,
        verbose=False,
        custom_translation_table={torch.ops.aten.selu.default: SeluScript},
    )
    program.save(tmp_path / "selu.onnx")
    onnx.checker.check_model(onnx.load(str(tmp_path / "selu.onnx")), full_check=True)
