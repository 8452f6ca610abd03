"""What pythonop_symbolic/test.py writes, and that ONNX Runtime matches PyTorch exactly on many inputs."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from conftest import page_script, passed
from onnx import numpy_helper

NAME = "pythonop_symbolic"
SEEDS = range(20)

# What each kept model computes in PyTorch (the Functions' forward, written out) and its number of inputs.
CLIP_THEN_RELU = (lambda x: x.clamp(min=-0.5).clamp(min=0), 1)
TWO_CLIPS = (lambda x: x.clamp(min=0.0) + x.clamp(min=0.5), 1)
CUSTOM_OPS = (lambda x, y: x.clamp(min=0) + y.clamp(min=0.0) + y.clamp(min=0.5), 2)
MODELS = {  # each kept model: what it computes, its ops in order, the `min` of each Clip
    "inlined.onnx": (CLIP_THEN_RELU, ["Constant", "Clip", "Constant", "Clip"], [-0.5, 0.0]),  # forward's clamps
    "pythonop.onnx": (CLIP_THEN_RELU, ["Constant", "Clip", "Relu"], [-0.5]),  # MyClip(x, -0.5), MyRelu
    "pythonop_by_argument.onnx": (TWO_CLIPS, ["Relu", "Constant", "Clip", "Add"], [0.5]),  # MyClip(x, 0.0): Relu
    "clip_then_relu_dynamo.onnx": (CLIP_THEN_RELU, ["Clip", "Max"], [-0.5]),
    "two_clips_dynamo.onnx": (TWO_CLIPS, ["Clip", "Clip", "Add"], [0.0, 0.5]),
    "custom_ops_dynamo.onnx": (CUSTOM_OPS, ["Relu", "Relu", "Add", "Clip", "Add"], [0.5]),
    # the unedited ClipThenRelu, apply patched: Clip(x, -0.5) and Relu, folded by the optimizer into Clip(x, 0)
    "patched_functions_dynamo.onnx": (CLIP_THEN_RELU, ["Clip"], [0.0]),
}


@pytest.fixture(scope="module")
def run(example_run):
    return passed(example_run(NAME))


def ops(model):
    return [n.op_type for n in model.graph.node]


def clip_mins(model):
    """The `min` of each Clip, read from the Constant node or initializer that feeds it."""
    nodes = model.graph.node
    constants = {n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in nodes if n.op_type == "Constant"}
    constants.update({i.name: numpy_helper.to_array(i) for i in model.graph.initializer})
    return [float(constants[n.input[1]]) for n in nodes if n.op_type == "Clip"]


@pytest.mark.parametrize("filename", list(MODELS))
def test_every_pythonop_translated_to_standard_ops(run, filename):
    model = run.model(filename)
    _, expected_ops, mins = MODELS[filename]
    assert all(n.domain == "" for n in model.graph.node) and "PythonOp" not in ops(model)
    assert ops(model) == expected_ops and clip_mins(model) == mins


@pytest.mark.parametrize("filename", list(MODELS))
def test_exact_on_many_inputs_and_the_edge_cases_the_readme_names(run, filename):
    """rtol=0, atol=0 for any finite input; NaN stays NaN, +inf may become float32's largest, -0.0 +0.0."""
    (reference, n_inputs), _, _ = MODELS[filename]
    session = ort.InferenceSession(str(run.out / filename), providers=["CPUExecutionProvider"])

    def ort_run(inputs):
        names = [i.name for i in session.get_inputs()]
        return session.run(None, {name: t.numpy() for name, t in zip(names, inputs, strict=True)})[0]

    for seed in SEEDS:
        generator = torch.Generator().manual_seed(seed)
        scale = 10.0 ** (30 * seed / (len(SEEDS) - 1))  # 1 ... 1e30
        inputs = [torch.randn(2, 3, generator=generator) * scale for _ in range(n_inputs)]
        inputs[0][0, 0], inputs[0][0, 1] = -0.5, 0.5  # the clamp bounds themselves
        np.testing.assert_array_equal(ort_run(inputs), reference(*inputs).numpy(), err_msg=f"{filename} seed {seed}")
    special = torch.tensor([[float("nan"), float("inf"), -float("inf")], [-0.0, 0.5, -0.5]])
    inputs = [special.clone() for _ in range(n_inputs)]
    actual, expected = ort_run(inputs), reference(*inputs).numpy()
    assert np.isnan(actual[0, 0]) and np.isnan(expected[0, 0])
    # +inf through a Clip without max becomes ONNX's default max, and stays so where the model ends in that Clip
    # (ClipThenRelu); a sum of two such Clips overflows back to inf
    assert actual[0, 1] == (np.finfo(np.float32).max if reference is CLIP_THEN_RELU[0] else np.inf)
    assert expected[0, 1] == np.inf
    np.testing.assert_array_equal(actual[:, 2], expected[:, 2])
    np.testing.assert_array_equal(actual[1], expected[1])  # -0.0 == +0.0 as values


def test_failures_write_only_the_ignored_registration_and_no_external_data(run):
    """The `::prim_PythonOp` registration, never called, writes forward's clamps, and step 8 saves its bfloat16 file;
    the other failures write nothing."""
    written = sorted(p.name for p in (run.out / "failures").iterdir())
    assert written == ["pythonop_old_name.onnx", "relu_and_clip_bf16_dynamo.onnx"]
    assert ops(run.model("failures/pythonop_old_name.onnx")) == ["Constant", "Clip"] * 2
    assert not list(run.out.glob("*.data"))  # ONNXProgram.save writes no NAME.onnx.data beside a small model


def test_the_symbolic_runs_by_default_and_not_under_dynamo(run):
    """Steps 5 and 6 export with the default options and call the symbolic; step 7's export, with the symbolic
    still registered, never does (nor do steps 1 to 3's, before it is registered)."""
    by_number = {s.split(".", 1)[0]: s for s in run.output.split("\n== ")[1:]}
    assert "prim::PythonOp __main__.MyClip, args ['x.1', -0.5]" in by_number["5"]
    assert "prim::PythonOp __main__.MyClip, args ['x.1', 0.0]" in by_number["6"]
    assert "symbolic registered: matches PyTorch exactly; ops Clip Clip Add" in by_number["7"]
    for number in ("1", "2", "3", "7"):
        assert "prim::PythonOp" not in by_number[number].split("\n", 1)[1], number  # below the step's title
    assert "Starting in PyTorch 2.9, the new torch.export-based ONNX exporter has become the default" in run.output
    assert "Torch IR graph at exception" not in run.output  # the exporter's dump is held back (harness.quiet)


def test_autograd_inlining_is_set_once_on_the_page():
    script = page_script(NAME)
    assert script.count("autograd_inlining=False,") == 1  # the keyword argument, in the export that shows its error
    assert script.count("autograd_inlining") == 2  # and the comment above it, which says what


def test_every_step_runs_as_shown_on_the_pinned_torch(run):
    """steps.json: all eight steps run, none differs; `on torch X: ...` and `SKIP step N` only on older torch."""
    summary = json.loads((run.out / "steps.json").read_text(encoding="utf-8"))
    assert summary["torch"] == torch.__version__.split("+")[0]
    assert {n: s["status"] for n, s in summary["steps"].items()} == dict.fromkeys(map(str, range(1, 9)), "runs")
    assert "\n  on torch " not in run.output and "SKIP" not in run.output
    assert not list(run.out.glob("*.sarif"))  # only torch < 2.5's dynamo_export writes one; those steps skip there


# Step 8: float16 and bfloat16 models, Relu and Clip computed in float32 between Casts.
HALF = {"float16": (onnx.TensorProto.FLOAT16, np.float16), "bfloat16": (onnx.TensorProto.BFLOAT16, ml_dtypes.bfloat16)}
HALF_MODELS = [f"relu_and_clip_{dtype}{exporter}.onnx" for dtype in HALF for exporter in ("_dynamo", "")]


def run_half(path, x: torch.Tensor) -> list[torch.Tensor]:
    """PATH in ONNX Runtime on X (float16 or bfloat16), in and out as raw 16-bit values through ONNX Runtime's own
    OrtValue API (not test.py's DLPack helper): each output preallocated as np.uint16 and read back in X's dtype."""
    elem_type, numpy_type = HALF[str(x.dtype)[6:]]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    as_value = ort.OrtValue.ortvalue_from_numpy_with_onnx_type
    binding = session.io_binding()
    bits = x.view(torch.int16).numpy().view(np.uint16)  # torch has no uint16 view before 2.3
    binding.bind_ortvalue_input(session.get_inputs()[0].name, as_value(bits, elem_type))
    outs = [np.zeros(tuple(x.shape), np.uint16) for _ in session.get_outputs()]
    for arg, out in zip(session.get_outputs(), outs, strict=True):
        binding.bind_ortvalue_output(arg.name, as_value(out, elem_type))
    session.run_with_iobinding(binding)
    return [torch.from_numpy(out.view(numpy_type).astype(np.float32)) for out in outs]


def half_edges(dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Values test.py never used, as (n, 2, 3) batches (the models' input shape): the bounds 0.5 and 0 with their
    neighbours in DTYPE, signed zeros, the smallest subnormal, the largest finite value, NaN, both infinities, then
    random values scaled by 10**(2*seed - 4)."""
    info = torch.finfo(dtype)
    edges = [0.5, 0.5 + 0.5 * info.eps, 0.5 - 0.25 * info.eps, 0.0, -0.0, info.tiny * info.eps]
    edges += [-info.tiny * info.eps, float("nan"), float("inf"), -float("inf"), info.max, -info.max]
    generator = torch.Generator().manual_seed(seed)
    noise = torch.randn(36, generator=generator) * 10.0 ** (2 * seed - 4)
    x = torch.cat([torch.tensor(edges), noise]).to(dtype)
    assert x[1] > 0.5 > x[2] and x[5] > 0 > x[6]  # the neighbours exist in DTYPE
    return x.reshape(-1, 2, 3)


@pytest.mark.parametrize("filename", HALF_MODELS)
def test_half_precision_models_equal_torch_in_that_dtype(run, filename):
    """Step 8's files: float16 or bfloat16 at both ends, Relu and Clip on float32 between Casts; in ONNX Runtime they
    equal PyTorch's clamps in that dtype exactly (selections: no rounding on either side), NaN and inf included."""
    dtype = getattr(torch, filename.split("_")[3].removesuffix(".onnx"))
    model = onnx.shape_inference.infer_shapes(run.model(filename), strict_mode=True)
    elem_type, _ = HALF[str(dtype)[6:]]
    ends = [*model.graph.input, *model.graph.output]
    assert [v.type.tensor_type.elem_type for v in ends] == [elem_type] * 3, filename
    types = {v.name: v.type.tensor_type.elem_type for v in [*model.graph.value_info, *ends]}
    computing = [n for n in model.graph.node if n.op_type in ("Relu", "Clip")]
    assert sorted(n.op_type for n in computing) == ["Clip", "Relu"], ops(model)
    assert all(types[n.input[0]] == onnx.TensorProto.FLOAT for n in computing), filename  # float32 between Casts
    for seed in range(5):
        for i, x in enumerate(half_edges(dtype, seed)):
            relu, clip = run_half(run.out / filename, x)
            for actual, expected in [(relu, x.clamp(min=0)), (clip, x.clamp(min=0.5))]:
                np.testing.assert_array_equal(actual, expected.float(), err_msg=f"{filename} seed {seed}, batch {i}")
            if i == 1:  # NaN stays NaN, +inf stays inf (Clip's float32 max, rounded back up to inf), as in PyTorch
                assert relu[0, 1].isnan() and relu[0, 2] == clip[0, 2] == float("inf"), (relu, clip)


def test_half_precision_failure_is_bfloat16_relu_and_refused(run):
    """Step 8's failing file: step 2's translations on bfloat16; the full checker passes it, ONNX Runtime refuses it."""
    path = run.out / "failures/relu_and_clip_bf16_dynamo.onnx"
    model = onnx.load(str(path))
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16
    assert "Cast" not in ops(model) and "Relu" in ops(model)
    onnx.checker.check_model(model, full_check=True)
    with pytest.raises(Exception, match=r"Could not find an implementation for Relu\(14\)"):
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
