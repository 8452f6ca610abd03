"""dynamic_shapes/test.py's models, their tolerances on 20 seeds at six sizes, README claims one run does not show."""

from __future__ import annotations

import json
import subprocess
import sys

import onnx
import pytest
import torch
from conftest import ROOT, load_example, passed, rknn_python

NAME = "dynamic_shapes"
SEEDS = 20
example = load_example(NAME)  # its ops and models, in the dynshape namespace, which no other folder uses


@pytest.fixture(scope="module")
def run(example_run):
    return passed(example_run(NAME))


def dims(value) -> list:
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


def signature(model) -> tuple[list, list]:
    return [dims(v) for v in model.graph.input], [dims(v) for v in model.graph.output]


@pytest.mark.parametrize(
    "filename, expected, node",
    [
        ("threshold.onnx", ([["batch", 3, "length"]], [["batch", "features"]]), "rknn_cst.cstThreshold"),
        ("box_blur.onnx", ([["batch", 3, "length"]], [["batch", 3, "blurred"]]), "dynshape.BoxBlur"),
        ("min_max.onnx", ([["batch", 3, "length"]], [["batch", 3], ["batch", 3]]), "tutorial.MinMax"),
        ("cdist.onnx", ([["rows1", 3], ["rows2", 3]], [["rows1", "rows2"]]), "com.microsoft.CDist"),
        ("threshold_dynamo.onnx", ([["batch", 3, "length"]], [["batch", "3*length"]]), "rknn_cst.cstThreshold"),
        ("box_blur_dynamo.onnx", ([["batch", 3, "length"]], [["batch", 3, "length - 2"]]), "dynshape.BoxBlur"),
        ("min_max_dynamo.onnx", ([["batch", 3, "length"]], [["batch", 3], ["batch", 3]]), "tutorial.MinMax"),
        ("cholesky_dynamo.onnx", ([["batch", 4, 4]], [["batch", 4, 4]]), None),
        ("cdist_dynamo.onnx", ([["rows1", 3], ["rows2", 3]], [["rows1", "rows2"]]), "com.microsoft.CDist"),
        ("failures/threshold_fixed.onnx", ([[2, 3, 16]], [[2, 48]]), None),
        ("failures/threshold_fixed_dynamo.onnx", ([[2, 3, 16]], [[2, 48]]), None),
        ("box_blur_float16_dynamo.onnx", ([["batch", 3, "length"]], [["batch", 3, "length - 2"]]), "dynshape.BoxBlur"),
        ("box_blur_bfloat16_dynamo.onnx", ([["batch", 3, "length"]], [["batch", 3, "length - 2"]]), "dynshape.BoxBlur"),
        ("box_blur_float16.onnx", ([["batch", 3, "length"]], [["batch", 3, "blurred"]]), "dynshape.BoxBlur"),
        ("box_blur_bfloat16.onnx", ([["batch", 3, "length"]], [["batch", 3, "blurred"]]), "dynshape.BoxBlur"),
        ("failures/box_blur_bf16_dynamo.onnx", ([["batch", 3, "length"]], [["batch", 3, "length - 2"]]), None),
    ],
)
def test_every_model_has_its_dims_and_custom_node(run, filename, expected, node):
    model = run.model(filename)
    onnx.checker.check_model(model, full_check=True)
    assert signature(model) == expected
    assert node is None or node in [f"{n.domain}.{n.op_type}" for n in model.graph.node]


@pytest.mark.parametrize(
    "filename, nodes",
    [
        ("positive_dynamo.onnx", ["Reshape", "Greater", "Compress"]),
        ("positive_node_dynamo.onnx", ["dynshape.Positive"]),
    ],
)
def test_the_data_dependent_size_is_an_unbacked_symbol(run, filename, nodes):
    """Steps 2 and 4: standard ops, or one custom node whose local schema ONNX never registers."""
    model = run.model(filename)
    onnx.checker.check_model(model, full_check=True)
    assert signature(model)[0] == [["batch", 3, "length"]]
    ((count,),) = signature(model)[1]
    assert count.startswith("u") and count[1:].isdigit(), count
    assert [f"{n.domain}.{n.op_type}".lstrip(".") for n in model.graph.node] == nodes
    assert not onnx.defs.has("Positive", "dynshape")


def test_with_symbolic_dims_the_view_computes_its_target_at_run_time(run):
    assert {"Shape", "Gather", "Concat"} <= {n.op_type for n in run.model("threshold.onnx").graph.node}


def test_a_frozen_size_folds_into_the_reshape(run):
    """Step 3: with [2, 3, 16] written into setType the view's target is the constant [2, -1]."""
    (constant,) = [n for n in run.model("failures/threshold_frozen.onnx").graph.node if n.op_type == "Constant"]
    assert onnx.numpy_helper.to_array(constant.attribute[0].t).tolist() == [2, -1]


# ---- The README's claims about torch, on the pinned torch ----


def test_a_string_in_dynamic_shapes_is_dim_dynamic_and_names_the_dim():
    from torch.onnx._internal.exporter import _dynamic_shapes

    converted, rename = _dynamic_shapes.convert_str_to_export_dim({"x": {0: "batch", 2: "length"}})
    assert converted == {"x": {0: torch.export.Dim.DYNAMIC, 2: torch.export.Dim.DYNAMIC}} and rename


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_is_in_onnx_export_is_true_under_torch_onnx_export_only():
    """Step 2's rule: is_in_onnx_export() under both exporters, jit.is_tracing() under dynamo=False only;
    explicit torch.export (as AOTInductor and ExecuTorch run it) sets is_exporting() but not the rule."""
    import io

    seen = []

    class Probe(torch.nn.Module):
        def forward(self, x):
            seen.append((torch.onnx.is_in_onnx_export(), torch.jit.is_tracing(), torch.compiler.is_exporting()))
            return x + 1

    torch.onnx.export(Probe().eval(), (torch.randn(2),), dynamo=True, verbose=False)
    assert set(seen) == {(True, False, True)}, seen
    seen.clear()
    torch.onnx.export(Probe().eval(), (torch.randn(2),), io.BytesIO(), dynamo=False)
    assert set(seen) == {(True, True, False)}, seen
    seen.clear()
    torch.export.export(Probe(), (torch.randn(2),), strict=False)
    assert seen == [(False, False, True)], seen
    assert not torch.onnx.is_in_onnx_export()


def test_explicit_capture_runs_the_real_op_and_the_one_call_writes_the_node():
    """Step 2: MinMaxNode's branch is taken by torch.onnx.export only, so explicit capture holds aminmax."""
    x = torch.randn(2, 3, 16)
    ep = torch.export.export(example.MinMaxNodeModel(), (x,), strict=False)
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert any("aminmax" in t for t in targets) and not any("onnx" in t for t in targets), targets
    program = torch.onnx.export(example.MinMaxNodeModel().eval(), (x,), dynamo=True, verbose=False)
    assert [f"{n.domain}.{n.op_type}" for n in program.model_proto.graph.node] == ["tutorial.MinMax"]


def test_onnx_ops_returns_zeros_in_the_exported_program():
    """Step 5: why min_max_dynamo.onnx is compared by hand, not with assert_onnx_program."""
    x = torch.randn(2, 3, 16)
    names = {"x": {0: "batch", 2: "length"}}
    model = example.MinMaxNodeModel().eval()
    program = torch.onnx.export(model, (x,), dynamo=True, verbose=False, dynamic_shapes=names)
    ep = program.exported_program
    assert not any(t.any() for t in ep.module()(x)) and all(t.any() for t in example.MinMaxModel()(x))


def test_a_fixed_fake_kernel_alone_exports_a_fixed_output():
    class OnlyFixed(torch.nn.Module):
        def forward(self, x):
            return example.box_blur_fixed(x, 3)

    shapes = {"x": {0: torch.export.Dim("batch"), 2: torch.export.Dim("length", min=4)}}
    ep = torch.export.export(OnlyFixed(), (torch.randn(2, 3, 16),), dynamic_shapes=shapes, strict=False)
    table = {torch.ops.dynshape.box_blur_fixed.default: example.box_blur_translation}
    program = torch.onnx.export(ep, dynamo=True, verbose=False, custom_translation_table=table, dynamic_shapes=shapes)
    assert [str(d) for d in program.model.graph.inputs[0].shape] == ["batch", "3", "length"]
    assert [str(d) for d in program.model.graph.outputs[0].shape] == ["2", "3", "14"]


def test_a_custom_op_may_not_return_a_view_of_its_input():
    @torch.library.custom_op("dynshape_test::flatten_view", mutates_args=())
    def flatten_view(x: torch.Tensor) -> torch.Tensor:
        return x.view(-1)

    with pytest.raises(RuntimeError, match="may not alias any inputs to this custom operator"):
        flatten_view(torch.randn(2, 3))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_new_dim_without_dynamic_axes_gets_a_made_up_name(tmp_path):
    path = str(tmp_path / "min_max.onnx")
    torch.onnx.export(
        example.MinMaxModel(), (torch.randn(2, 3, 16),), path, dynamo=False, opset_version=17, input_names=["x"],
        output_names=["low", "high"], dynamic_axes={"x": {0: "batch", 2: "length"}}, custom_opsets={"tutorial": 1},
    )
    outputs = signature(onnx.load(path))[1]
    assert outputs == [["MinMaxlow_dim_0", 3], ["MinMaxlow_dim_0", 3]], outputs


# A child process: onnxruntime-extensions keeps one kernel per op_type per process.
TOLERANCE_CHILD = """
import sys
import numpy as np, onnxruntime as ort, torch
from conftest import load_example
from onnxruntime_extensions import PyCustomOpDef as T, get_library_path, onnx_op

# importing the example registers page_helpers' rknn_cst kernels (a second one would conflict)
example, (out, seeds) = load_example("dynamic_shapes"), sys.argv[1:]

@onnx_op(op_type="dynshape::BoxBlur", inputs=[T.dt_float], outputs=[T.dt_float], attrs={"width": T.dt_int64})
def box_blur_kernel(x, width):
    windows = np.lib.stride_tricks.sliding_window_view(x, int(width), axis=-1)
    return (windows.sum(axis=-1) / np.float32(width)).astype(np.float32)

@onnx_op(op_type="tutorial::MinMax", inputs=[T.dt_float], outputs=[T.dt_float, T.dt_float], attrs={"axis": T.dt_int64})
def min_max_kernel(x, axis):
    return x.min(axis=int(axis)), x.max(axis=int(axis))

@onnx_op(op_type="dynshape::Positive", inputs=[T.dt_float], outputs=[T.dt_float])
def positive_kernel(x):
    return x[x > 0]

options = ort.SessionOptions()
options.register_custom_ops_library(get_library_path())
for path, model in [
    ("threshold.onnx", example.ThresholdModel().eval()), ("box_blur.onnx", example.BoxBlurModel()),
    ("min_max.onnx", example.MinMaxModel()), ("cdist.onnx", example.CDistModel()),
    ("threshold_dynamo.onnx", example.ThresholdModel().eval()), ("box_blur_dynamo.onnx", example.BoxBlurModel()),
    ("positive_dynamo.onnx", example.PositiveModel()), ("positive_node_dynamo.onnx", example.PositiveModel()),
    ("min_max_dynamo.onnx", example.MinMaxModel()),
    ("cholesky_dynamo.onnx", example.CholeskyModel()), ("cdist_dynamo.onnx", example.CDistModel()),
]:
    session = ort.InferenceSession(f"{out}/{path}", options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    for seed in range(int(seeds)):
        torch.manual_seed(seed)
        for batch, length in example.SIZES:
            args = example.inputs_for(path, batch, length)
            if "cholesky" not in path:  # inputs scaled by 1e-3, 1 and 1e3 in turn
                args = [a * (1e-3, 1.0, 1e3)[seed % 3] for a in args]
            actual = session.run(None, dict(zip(names, [a.numpy() for a in args])))
            expected = model(*args)
            rtol = 1e-5 if "cholesky" in path else 0
            atol = example.cdist_tolerance(*args) if "cdist" in path else rtol
            for ours, theirs in zip(actual, expected if isinstance(expected, tuple) else (expected,), strict=True):
                assert ours.shape == theirs.shape, (path, ours.shape, theirs.shape)
                np.testing.assert_allclose(
                    ours.astype(np.float64), theirs.numpy(), rtol=rtol, atol=atol, err_msg=f"{path} {batch}x{length}"
                )
    if path.startswith("positive"):  # every count from none to all, at each size
        counts = set()
        for batch, length in example.SIZES:
            x = torch.randn(batch, 3, length)
            for sample in [x.abs(), -x.abs(), torch.zeros_like(x), x, torch.where(x > 1, x, -x.abs())]:
                (ours,) = session.run(None, {names[0]: sample.numpy()})
                np.testing.assert_array_equal(ours, model(sample).numpy(), err_msg=path)
                counts.add(len(ours))
        assert 0 in counts and 5 * 3 * 40 in counts and len(counts) > 10, counts
"""


def test_every_model_matches_pytorch_on_many_seeds_at_six_sizes(run):
    """Exact for Threshold, the box blur, MinMax and positive (both files, every count from none to all);
    register_onnx_symbolic's for Cholesky and CDist."""
    pytest.importorskip("onnxruntime_extensions")
    child = subprocess.run(
        [sys.executable, "-c", TOLERANCE_CHILD, str(run.out), str(SEEDS)],
        capture_output=True, text=True, timeout=900, cwd=ROOT / "tests",
    )
    assert child.returncode == 0, child.stdout[-2000:] + child.stderr[-3000:]


# Step 7's files in a child process, with its own float32 BoxBlur kernel and ONNX Runtime's own OrtValue API (raw
# 16-bit values in and out), not test.py's DLPack helper.
HALF_CHILD = """
import sys
import ml_dtypes, numpy as np, onnx, onnxruntime as ort, torch
from conftest import load_example
from onnxruntime_extensions import PyCustomOpDef as T, get_library_path, onnx_op

example, (out, seeds) = load_example("dynamic_shapes"), sys.argv[1:]  # its rknn_cst kernels: loaded first

@onnx_op(op_type="dynshape::BoxBlur", inputs=[T.dt_float], outputs=[T.dt_float], attrs={"width": T.dt_int64})
def box_blur_kernel(x, width):  # float32 only: the Casts around the node bring the half values
    count = x.shape[-1] - int(width) + 1
    windows = np.stack([x[..., i : i + count] for i in range(int(width))])  # added in order, as test.py's kernel
    return (windows.sum(axis=0) / np.float32(width)).astype(np.float32)

options = ort.SessionOptions()
options.register_custom_ops_library(get_library_path())
KINDS = {
    torch.float16: (onnx.TensorProto.FLOAT16, np.float16),
    torch.bfloat16: (onnx.TensorProto.BFLOAT16, ml_dtypes.bfloat16),
}
as_value = ort.OrtValue.ortvalue_from_numpy_with_onnx_type

def edges(x):
    finfo = torch.finfo(x.dtype)
    flat = x.view(-1)  # NaN, infinities, the largest finite value (a float16 sum of three overflows), subnormals
    specials = [float("nan"), float("inf"), -float("inf"), finfo.max, finfo.max, finfo.max, -finfo.max,
                finfo.tiny * finfo.eps, finfo.tiny, -finfo.tiny * finfo.eps, 0.0, -0.0, 1 / 3, 2 / 3]
    for i, value in enumerate(specials):
        flat[(7 * i) % flat.numel()] = value
    return x

for name in ["box_blur_float16_dynamo", "box_blur_bfloat16_dynamo", "box_blur_float16", "box_blur_bfloat16"]:
    dtype = torch.bfloat16 if "bfloat16" in name else torch.float16
    elem_type, np_dtype = KINDS[dtype]
    session = ort.InferenceSession(f"{out}/{name}.onnx", options, providers=["CPUExecutionProvider"])
    (x_arg,), (y_arg,) = session.get_inputs(), session.get_outputs()
    assert x_arg.type == y_arg.type == f"tensor({str(dtype)[6:]})", (name, x_arg.type, y_arg.type)
    assert isinstance(x_arg.shape[0], str) and isinstance(x_arg.shape[2], str), (name, x_arg.shape)  # still symbolic
    sizes = set()
    for seed in range(int(seeds)):
        torch.manual_seed(seed)
        for batch, length in example.SIZES + [(3, 4), (7, 5)]:
            x = torch.randn(batch, 3, length) * (1e-3, 1.0, 1e3, 3e4)[seed % 4]
            x = x.to(dtype) if seed % 2 else edges(x.to(dtype))
            bits = x.contiguous().view(torch.int16).numpy().view(np.uint16)
            y_bits = np.zeros((batch, 3, length - 2), np.uint16)
            binding = session.io_binding()
            binding.bind_ortvalue_input(x_arg.name, as_value(bits, elem_type))
            binding.bind_ortvalue_output(y_arg.name, as_value(y_bits, elem_type))
            session.run_with_iobinding(binding)
            ours = y_bits.view(np_dtype).astype(np.float32)  # exact: every 16-bit value is a float32
            theirs = example.BoxBlurModel()(x)
            assert theirs.dtype == dtype
            # The page's tolerance: equal (NaN where PyTorch has NaN), each side rounding once from float32
            np.testing.assert_array_equal(ours, theirs.float().numpy(), err_msg=f"{name} seed {seed} {batch}x{length}")
            sizes.add((batch, length))
    assert len(sizes) == 8, sizes

# Step 7's failing file: the exporter wrote bfloat16 through the float-only schema; ONNX Runtime refuses it
path = f"{out}/failures/box_blur_bf16_dynamo.onnx"
assert onnx.load(path).graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16
try:
    ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
except Exception as error:
    assert "Type 'tensor(bfloat16)' of input parameter (x) of operator (BoxBlur)" in str(error), error
else:
    raise AssertionError("ONNX Runtime took a bfloat16 BoxBlur")
print("ok")
"""


def test_half_precision_models_equal_pytorch_in_their_dtype(run):
    """Step 7's float16 and bfloat16 files at eight sizes, 12 seeds, NaN, infinities, the largest finite value and
    subnormals: equal to BoxBlurModel in that dtype (the page's tolerance), their dims still symbolic."""
    pytest.importorskip("onnxruntime_extensions")
    child = subprocess.run(
        [sys.executable, "-c", HALF_CHILD, str(run.out), "12"],
        capture_output=True, text=True, timeout=900, cwd=ROOT / "tests",
    )
    assert child.returncode == 0 and child.stdout.split()[-1:] == ["ok"], child.stdout[-2000:] + child.stderr[-3000:]


def test_rknn_toolkit_documents_dynamic_input_and_input_size_list():
    """Step 5 quotes RKNN.config's and RKNN.load_onnx's docstrings of the installed toolkit."""
    if (python := rknn_python()) is None:
        pytest.skip("no RKNN-Toolkit2 environment (.venv-rknn)")
    code = "import inspect, json\nfrom rknn.api import RKNN as R\nprint(json.dumps([str(inspect.signature(R.config)),"
    code += " R.config.__doc__, str(inspect.signature(R.load_onnx))]))"
    child = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=600)
    assert child.returncode == 0, child.stderr[-2000:]
    config_signature, config_doc, load_onnx_signature = json.loads(child.stdout.strip().splitlines()[-1])
    assert "dynamic_input=None" in config_signature and "input_size_list=None" in load_onnx_signature
    doc = " ".join(config_doc.split())
    quoted = "simulate the function of dynamic input according to multiple sets of input shapes specified by the user"
    assert quoted in doc
    assert "experimental" in doc[doc.index("dynamic_input") :][:400]
