"""What pythonop_symbolic/test.py writes: every prim::PythonOp translated, by name and by argument;
the README's claim that ONNX Runtime matches PyTorch exactly, on many inputs, with its two edge
cases; and autograd_inlining (deprecated) set once on the page, by no step that needs it."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
import torch
from conftest import page_script, passed
from onnx import numpy_helper

NAME = "pythonop_symbolic"

# Each kept model and what it computes in PyTorch (the Functions' forward, written out).
CLIP_THEN_RELU = (lambda x: x.clamp(min=-0.5).clamp(min=0), 1)
TWO_CLIPS = (lambda x: x.clamp(min=0.0) + x.clamp(min=0.5), 1)
MODELS = {
    "inlined.onnx": CLIP_THEN_RELU,
    "pythonop.onnx": CLIP_THEN_RELU,
    "pythonop_by_argument.onnx": TWO_CLIPS,
    "clip_then_relu_dynamo.onnx": CLIP_THEN_RELU,
    "two_clips_dynamo.onnx": TWO_CLIPS,
    "custom_ops_dynamo.onnx": (
        lambda x, y: x.clamp(min=0) + y.clamp(min=0.0) + y.clamp(min=0.5),
        2,
    ),
    "patched_functions_dynamo.onnx": CLIP_THEN_RELU,  # the unedited ClipThenRelu, apply patched
}
SEEDS = range(20)


@pytest.fixture(scope="module")
def run(example_run):
    return passed(example_run(NAME))


def ops(model):
    return [n.op_type for n in model.graph.node]


def clip_mins(model):
    """The `min` of each Clip, read from the Constant node or initializer that feeds it."""
    constants = {
        n.output[0]: numpy_helper.to_array(n.attribute[0].t)
        for n in model.graph.node
        if n.op_type == "Constant"
    }
    constants.update({i.name: numpy_helper.to_array(i) for i in model.graph.initializer})
    return [float(constants[n.input[1]]) for n in model.graph.node if n.op_type == "Clip"]


def ort_run(path, inputs):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, {name: t.numpy() for name, t in zip(names, inputs, strict=True)})[0]


@pytest.mark.parametrize("filename", list(MODELS))
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
    assert ops(model) == [
        "Relu",
        "Constant",
        "Clip",
        "Add",
    ]  # MyClip(x, 0.0) -> Relu, MyClip(x, 0.5) -> Clip
    assert clip_mins(model) == [0.5]


def test_default_inlines_the_forward(run):
    model = run.model("inlined.onnx")
    assert ops(model).count("Clip") == 2 and "Relu" not in ops(model)


def test_dynamo_traces_through_the_functions(run):
    assert ops(run.model("clip_then_relu_dynamo.onnx")) == ["Clip", "Max"]
    assert ops(run.model("two_clips_dynamo.onnx")) == ["Clip", "Clip", "Add"]


def test_dynamo_custom_ops_with_one_table(run):
    model = run.model("custom_ops_dynamo.onnx")
    assert sorted(ops(model)) == ["Add", "Add", "Clip", "Relu", "Relu"]
    assert clip_mins(model) == [0.5]


def test_patched_apply_exports_the_translations_folded_into_one_clip(run):
    """ClipThenRelu, unedited, with MyClip.apply and MyRelu.apply pointed at the custom ops: the
    translations' Clip(x, -0.5) and Relu, which the exporter's optimizer folds into Clip(x, 0)."""
    model = run.model("patched_functions_dynamo.onnx")
    assert ops(model) == ["Clip"]
    assert clip_mins(model) == [0.0]


def test_failures_write_only_the_ignored_registration_and_no_external_data(run):
    """The failing exports stop before writing; the one failure demonstration that exports (the
    `::prim_PythonOp` registration, never called) holds forward's inlined clamps, not the snippet's
    Clip and Relu. ONNXProgram.save writes no NAME.onnx.data beside a small model."""
    assert sorted(p.name for p in (run.out / "failures").iterdir()) == ["pythonop_old_name.onnx"]
    assert ops(run.model("failures/pythonop_old_name.onnx")) == ["Constant", "Clip"] * 2
    assert not list(run.out.glob("*.data"))


def test_every_step_header_and_the_legacy_warning_are_printed(run):
    for number in (1, 2, 3, 4):
        assert f"\n== {number}. " in run.output
    assert (
        "Starting in PyTorch 2.9, the new torch.export-based ONNX exporter has become the default"
        in run.output
    )
    assert "torch.onnx.SymbolicContext exists: False" in run.output
    assert (
        "Torch IR graph at exception" not in run.output
    )  # the exporter's dump is held back (harness.quiet)


def test_the_symbolic_runs_without_autograd_inlining_and_not_under_dynamo(run):
    """Steps 2 and 3 export with the default options and their symbolic still runs (its lines are
    printed); step 4's exports never call it, although it is still registered."""
    steps = run.output.split("\n== ")
    by_number = {s.split(".", 1)[0]: s for s in steps[1:]}
    assert "prim::PythonOp __main__.MyClip, args ['x.1', -0.5]" in by_number["2"]
    assert "prim::PythonOp __main__.MyClip, args ['x.1', 0.0]" in by_number["3"]
    assert "prim::PythonOp" not in by_number["4"]


def test_autograd_inlining_is_set_once_on_the_page():
    """The deprecated option appears in one export of the page, the one that shows its error."""
    script = page_script(NAME)
    assert script.count("autograd_inlining=False,") == 1  # the keyword argument, not a comment
    assert script.count("autograd_inlining") == 2  # and the comment above it, which says what


@pytest.mark.parametrize("filename", list(MODELS))
def test_exact_on_many_inputs(run, filename):
    """The README's rtol=0, atol=0 holds for any finite input, not just the example's seed 0."""
    reference, n_inputs = MODELS[filename]
    for seed in SEEDS:
        generator = torch.Generator().manual_seed(seed)
        scale = 10.0 ** (30 * seed / (len(SEEDS) - 1))  # 1 ... 1e30
        inputs = [torch.randn(2, 3, generator=generator) * scale for _ in range(n_inputs)]
        inputs[0][0, 0] = -0.5  # the clamp bounds themselves
        inputs[0][0, 1] = 0.5
        expected = reference(*inputs).numpy()
        np.testing.assert_array_equal(
            ort_run(run.out / filename, inputs), expected, err_msg=f"{filename} seed {seed}"
        )


SPECIAL = torch.tensor([[float("nan"), float("inf"), -float("inf")], [-0.0, 0.5, -0.5]])


@pytest.mark.parametrize("filename", list(MODELS))
def test_edge_cases_the_readme_names(run, filename):
    """NaN stays NaN; +inf through a Clip without max becomes the largest float32 (ONNX's default
    max); -0.0 may become +0.0. Exactly the differences the README lists, and no others."""
    reference, n_inputs = MODELS[filename]
    inputs = [SPECIAL.clone() for _ in range(n_inputs)]
    actual = ort_run(run.out / filename, inputs)
    expected = reference(*inputs).numpy()
    assert np.isnan(actual[0, 0]) and np.isnan(expected[0, 0])
    inf_to_max = filename in (
        "inlined.onnx",
        "pythonop.onnx",
        "clip_then_relu_dynamo.onnx",
        "patched_functions_dynamo.onnx",
    )  # a Clip, not summed with another term
    assert actual[0, 1] == (np.finfo(np.float32).max if inf_to_max else np.inf)
    assert expected[0, 1] == np.inf
    np.testing.assert_array_equal(actual[:, 2], expected[:, 2])
    np.testing.assert_array_equal(actual[1], expected[1])  # -0.0 == +0.0 as values


def test_every_step_runs_as_shown_on_the_pinned_torch(run):
    """steps.json: all four steps run on the pinned torch, none differs (the README's expected
    output is its output); `on torch X: ...` and `SKIP step N` appear on older torch only."""
    summary = json.loads((run.out / "steps.json").read_text(encoding="utf-8"))
    assert summary["torch"] == torch.__version__.split("+")[0]
    assert {n: s["status"] for n, s in summary["steps"].items()} == dict.fromkeys(
        ("1", "2", "3", "4"), "runs"
    )
    assert "\n  on torch " not in run.output and "SKIP" not in run.output
    assert not list(
        run.out.glob("*.sarif")
    )  # only torch < 2.5's dynamo_export writes one, and step 4 skips there
