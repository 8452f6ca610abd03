"""What dynamic_shapes/test.py writes (the dims of every file, read back from its --out), its
tolerances on 20 seeds at the six sizes, and the README's claims that one run does not show: a
string in dynamic_shapes is Dim.DYNAMIC, the flags explicit capture sets, torch.onnx.ops' zeros in
an exported program, a fixed fake kernel on its own, the exporter's made-up dim names, and
RKNN-Toolkit2's documented options."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import onnx
import pytest
import torch
from conftest import ROOT, load_example, passed

NAME = "dynamic_shapes"
SEEDS = 20


@pytest.fixture(scope="module")
def run(example_run):
    return passed(example_run(NAME))


@pytest.fixture(scope="module")
def example():
    """The folder's test.py as a module: it runs nothing at import, so this only defines its ops
    and models (in the dynshape namespace, which no other folder uses)."""
    return load_example(NAME)


def dims(value) -> list:
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


def signature(model) -> tuple[list, list]:
    return [dims(v) for v in model.graph.input], [dims(v) for v in model.graph.output]


@pytest.mark.parametrize(
    "filename, expected",
    [
        ("threshold.onnx", ([["batch", 3, "length"]], [["batch", "features"]])),
        ("box_blur.onnx", ([["batch", 3, "length"]], [["batch", 3, "blurred"]])),
        ("min_max.onnx", ([["batch", 3, "length"]], [["batch", 3], ["batch", 3]])),
        ("cdist.onnx", ([["rows1", 3], ["rows2", 3]], [["rows1", "rows2"]])),
        ("threshold_dynamo.onnx", ([["batch", 3, "length"]], [["batch", "3*length"]])),
        ("box_blur_dynamo.onnx", ([["batch", 3, "length"]], [["batch", 3, "length - 2"]])),
        ("min_max_dynamo.onnx", ([["batch", 3, "length"]], [["batch", 3], ["batch", 3]])),
        ("cholesky_dynamo.onnx", ([["batch", 4, 4]], [["batch", 4, 4]])),
        ("cdist_dynamo.onnx", ([["rows1", 3], ["rows2", 3]], [["rows1", "rows2"]])),
    ],
)
def test_every_kept_model_has_its_dims_named_by_meaning(run, filename, expected):
    model = run.model(filename)
    onnx.checker.check_model(model, full_check=True)
    assert signature(model) == expected


def test_the_data_dependent_size_is_an_unbacked_symbol(run):
    model = run.model("positive_dynamo.onnx")
    assert signature(model)[0] == [["batch", 3, "length"]]
    ((count,),) = signature(model)[1]
    assert count.startswith("u") and count[1:].isdigit(), count
    assert [n.op_type for n in model.graph.node] == ["Reshape", "Greater", "Compress"]


def test_the_custom_nodes_keep_their_domains(run):
    for filename, node in [
        ("threshold.onnx", "rknn_cst.cstThreshold"),
        ("threshold_dynamo.onnx", "rknn_cst.cstThreshold"),
        ("box_blur.onnx", "dynshape.BoxBlur"),
        ("box_blur_dynamo.onnx", "dynshape.BoxBlur"),
        ("min_max.onnx", "tutorial.MinMax"),
        ("min_max_dynamo.onnx", "tutorial.MinMax"),
        ("cdist.onnx", "com.microsoft.CDist"),
        ("cdist_dynamo.onnx", "com.microsoft.CDist"),
    ]:
        model = run.model(filename)
        assert node in [f"{n.domain}.{n.op_type}" for n in model.graph.node], filename


def test_setType_keeps_the_symbolic_dims_on_the_node(run):
    """Step 2: the custom node's output is typed [batch,3,length], and the view's target is
    computed from it at run time."""
    model = run.model("threshold.onnx")
    (node,) = [n for n in model.graph.node if n.op_type == "cstThreshold"]
    (typed,) = [v for v in model.graph.value_info if v.name == node.output[0]]
    assert dims(typed) == ["batch", 3, "length"]
    assert {"Shape", "Gather", "Concat"} <= {n.op_type for n in model.graph.node}


def test_a_frozen_size_folds_into_the_reshape(run):
    """Step 2: with [2, 3, 16] written into setType the view's target is the constant [2, -1]."""
    model = run.model("failures/threshold_frozen.onnx")
    assert [n.op_type for n in model.graph.node] == ["cstThreshold", "Constant", "Reshape"]
    (constant,) = [n for n in model.graph.node if n.op_type == "Constant"]
    target = onnx.numpy_helper.to_array(constant.attribute[0].t).tolist()
    assert target == [2, -1]
    (y,) = onnx.shape_inference.infer_shapes(model, strict_mode=True).graph.output
    assert dims(y) == [2, 48]


def test_the_fixed_models_have_the_example_sizes(run):
    for filename in ["failures/threshold_fixed.onnx", "failures/threshold_fixed_dynamo.onnx"]:
        assert signature(run.model(filename)) == ([[2, 3, 16]], [[2, 48]]), filename


def test_steps_json_says_every_step_runs_on_the_pinned_torch(run):
    summary = json.loads((run.out / "steps.json").read_text(encoding="utf-8"))
    statuses = {number: step["status"] for number, step in summary["steps"].items()}
    assert statuses == {str(n): "runs" for n in range(1, 6)}, statuses


# ---- The README's claims about torch, on the pinned torch ----


def test_a_string_in_dynamic_shapes_is_dim_dynamic_and_names_the_dim():
    """Step 3: in one torch.onnx.export call a string marks the dim Dim.DYNAMIC for torch.export,
    and the exporter renames the file's dims after the strings."""
    from torch.onnx._internal.exporter import _dynamic_shapes

    converted, rename = _dynamic_shapes.convert_str_to_export_dim({"x": {0: "batch", 2: "length"}})
    dynamic = torch.export.Dim.DYNAMIC
    assert converted == {"x": {0: dynamic, 2: dynamic}} and rename


def test_explicit_capture_sets_is_exporting_not_is_in_onnx_export():
    """Step 3: MinMaxNode branches on torch.compiler.is_exporting(), which torch.export sets and
    dynamo=False's tracer does not; torch.onnx.is_in_onnx_export() is False under torch.export."""
    seen = []

    class Probe(torch.nn.Module):
        def forward(self, x):
            seen.append((torch.compiler.is_exporting(), torch.onnx.is_in_onnx_export()))
            return x + 1

    torch.export.export(Probe(), (torch.randn(2),), strict=False)
    assert seen == [(True, False)]


def test_onnx_ops_returns_zeros_in_the_exported_program(example):
    """Step 4: why min_max_dynamo.onnx is compared by hand, not with assert_onnx_program."""
    x = torch.randn(2, 3, 16)
    dynamic_shapes = {"x": {0: torch.export.Dim("batch"), 2: torch.export.Dim("length")}}
    ep = torch.export.export(
        example.MinMaxNodeModel(), (x,), dynamic_shapes=dynamic_shapes, strict=False
    )
    low, high = ep.module()(x)
    assert not low.any() and not high.any()
    expected_low, expected_high = example.MinMaxModel()(x)
    assert expected_low.any() and expected_high.any()


def test_a_fixed_fake_kernel_alone_exports_a_fixed_output(example):
    """Step 3: a model that only returns box_blur_fixed's node exports, its output typed
    [2, 3, 14] whatever the input."""

    class OnlyFixed(torch.nn.Module):
        def forward(self, x):
            return example.box_blur_fixed(x, 3)

    batch, length = torch.export.Dim("batch"), torch.export.Dim("length", min=4)
    dynamic_shapes = {"x": {0: batch, 2: length}}
    ep = torch.export.export(
        OnlyFixed(), (torch.randn(2, 3, 16),), dynamic_shapes=dynamic_shapes, strict=False
    )
    table = {torch.ops.dynshape.box_blur_fixed.default: example.box_blur_translation}
    program = torch.onnx.export(
        ep, dynamo=True, verbose=False, custom_translation_table=table,
        dynamic_shapes=dynamic_shapes,
    )
    assert [str(d) for d in program.model.graph.inputs[0].shape] == ["batch", "3", "length"]
    assert [str(d) for d in program.model.graph.outputs[0].shape] == ["2", "3", "14"]


def test_a_custom_op_may_not_return_a_view_of_its_input():
    """Step 3: the eager function must return a new tensor (positive's x[x > 0] copies)."""

    @torch.library.custom_op("dynshape_test::flatten_view", mutates_args=())
    def flatten_view(x: torch.Tensor) -> torch.Tensor:
        return x.view(-1)

    with pytest.raises(RuntimeError, match="may not alias any inputs to this custom operator"):
        flatten_view(torch.randn(2, 3))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_new_dim_without_dynamic_axes_gets_a_made_up_name(example, tmp_path):
    """Step 2: MinMax's outputs, not named in dynamic_axes, get the exporter's own dim name."""
    path = str(tmp_path / "min_max.onnx")
    torch.onnx.export(
        example.MinMaxModel(), (torch.randn(2, 3, 16),), path, dynamo=False, opset_version=17,
        input_names=["x"], output_names=["low", "high"],
        dynamic_axes={"x": {0: "batch", 2: "length"}}, custom_opsets={"tutorial": 1},
    )
    outputs = signature(onnx.load(path))[1]
    assert outputs == [["MinMaxlow_dim_0", 3], ["MinMaxlow_dim_0", 3]], outputs


# ---- The tolerances, on 20 seeds at the six sizes, in a child process ----
# (onnxruntime-extensions keeps one kernel per op_type per process: a child keeps this file's
# kernels away from any other test's.)

TOLERANCE_CHILD = textwrap.dedent(
    """
    import importlib.util, json, sys
    import numpy as np
    import onnxruntime as ort
    import torch
    from onnxruntime_extensions import PyCustomOpDef, get_library_path, onnx_op

    spec = importlib.util.spec_from_file_location("example", sys.argv[1])
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    out, seeds = sys.argv[2], int(sys.argv[3])

    @onnx_op(op_type="rknn_cst::cstThreshold", inputs=[PyCustomOpDef.dt_float],
             outputs=[PyCustomOpDef.dt_float],
             attrs={"threshold": PyCustomOpDef.dt_float, "value": PyCustomOpDef.dt_float})
    def cst_threshold_kernel(x, threshold, value):
        return np.where(x > np.float32(threshold), x, np.float32(value)).astype(np.float32)

    @onnx_op(op_type="dynshape::BoxBlur", inputs=[PyCustomOpDef.dt_float],
             outputs=[PyCustomOpDef.dt_float], attrs={"width": PyCustomOpDef.dt_int64})
    def box_blur_kernel(x, width):
        windows = np.lib.stride_tricks.sliding_window_view(x, int(width), axis=-1)
        return (windows.sum(axis=-1) / np.float32(width)).astype(np.float32)

    @onnx_op(op_type="tutorial::MinMax", inputs=[PyCustomOpDef.dt_float],
             outputs=[PyCustomOpDef.dt_float, PyCustomOpDef.dt_float],
             attrs={"axis": PyCustomOpDef.dt_int64})
    def min_max_kernel(x, axis):
        return x.min(axis=int(axis)), x.max(axis=int(axis))

    options = ort.SessionOptions()
    options.register_custom_ops_library(get_library_path())
    models = {
        "threshold.onnx": example.ThresholdModel().eval(),
        "box_blur.onnx": example.BoxBlurModel(),
        "min_max.onnx": example.MinMaxModel(),
        "cdist.onnx": example.CDistModel(),
        "threshold_dynamo.onnx": example.ThresholdModel().eval(),
        "box_blur_dynamo.onnx": example.BoxBlurModel(),
        "positive_dynamo.onnx": example.PositiveModel(),
        "min_max_dynamo.onnx": example.MinMaxModel(),
        "cholesky_dynamo.onnx": example.CholeskyModel(),
        "cdist_dynamo.onnx": example.CDistModel(),
    }
    largest = {}
    for path, model in models.items():
        session = ort.InferenceSession(f"{out}/{path}", options, providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        worst = 0.0  # the largest difference over the tolerance's allowance (at most 1)
        for seed in range(seeds):
            torch.manual_seed(seed)
            scale = (1e-3, 1.0, 1e3)[seed % 3] if "cholesky" not in path else 1.0
            for batch, length in example.SIZES:
                args = [a * scale for a in example.inputs_for(path, batch, length)]
                if "cholesky" in path:
                    args = list(example.inputs_for(path, batch, length))
                actual = session.run(None, dict(zip(names, [a.numpy() for a in args])))
                expected = model(*args)
                expected = expected if isinstance(expected, tuple) else (expected,)
                if "cholesky" in path:
                    rtol, atol = 1e-5, 1e-5
                elif "cdist" in path:
                    rtol, atol = 0.0, example.cdist_tolerance(*args)
                else:
                    rtol, atol = 0.0, 0.0
                for ours, theirs in zip(actual, expected):
                    theirs = theirs.numpy()
                    assert ours.shape == theirs.shape, (path, ours.shape, theirs.shape)
                    diff = np.abs(ours.astype(np.float64) - theirs)
                    allowed = atol + rtol * np.abs(theirs)
                    if (diff > allowed).any():
                        raise SystemExit(f"{path}: {diff.max()} over {atol} at {batch}x{length}")
                    if (allowed > 0).any():
                        worst = max(worst, float((diff / np.maximum(allowed, 1e-30)).max()))
        largest[path] = worst
    print(json.dumps(largest))
    """
)


def test_every_model_matches_pytorch_on_many_seeds_at_six_sizes(run):
    """The README's tolerances (Notes): exact for Threshold, the box blur, MinMax and positive;
    register_onnx_symbolic's for Cholesky and CDist. Inputs scaled by 1e-3, 1 and 1e3 in turn."""
    pytest.importorskip("onnxruntime_extensions")
    child = subprocess.run(
        [
            sys.executable, "-c", TOLERANCE_CHILD, str(ROOT / NAME / "test.py"), str(run.out),
            str(SEEDS),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert child.returncode == 0, child.stdout[-2000:] + child.stderr[-3000:]
    largest = json.loads(child.stdout.strip().splitlines()[-1])
    assert set(largest) == {
        "threshold.onnx", "box_blur.onnx", "min_max.onnx", "cdist.onnx",
        "threshold_dynamo.onnx", "box_blur_dynamo.onnx", "positive_dynamo.onnx",
        "min_max_dynamo.onnx", "cholesky_dynamo.onnx", "cdist_dynamo.onnx",
    }
    assert all(share <= 1.0 for share in largest.values()), largest


# ---- Step 5: what the installed RKNN-Toolkit2 documents ----


def rknn_python():
    configured = os.environ.get("RKNN_PYTHON", "").strip()
    python = configured or str(ROOT / ".venv-rknn" / "bin" / "python")
    return python if os.path.isfile(python) else None


def test_rknn_toolkit_documents_dynamic_input_and_input_size_list():
    """Step 5 quotes RKNN.config's and RKNN.load_onnx's docstrings of the installed toolkit."""
    python = rknn_python()
    if python is None:
        pytest.skip("no RKNN-Toolkit2 environment (.venv-rknn)")
    code = (
        "import inspect, json\n"
        "from rknn.api import RKNN\n"
        "print(json.dumps({'config': [str(inspect.signature(RKNN.config)), RKNN.config.__doc__],"
        " 'load_onnx': [str(inspect.signature(RKNN.load_onnx)), RKNN.load_onnx.__doc__]}))\n"
    )
    child = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=600)
    assert child.returncode == 0, child.stderr[-2000:]
    found = json.loads(child.stdout.strip().splitlines()[-1])
    config_signature, config_doc = found["config"]
    assert "dynamic_input=None" in config_signature
    doc = " ".join(config_doc.split())
    assert (
        "simulate the function of dynamic input according to multiple sets of input shapes "
        "specified by the user" in doc
    )
    assert "experimental" in doc[doc.index("dynamic_input") :][:400]
    assert "input_size_list=None" in found["load_onnx"][0]
