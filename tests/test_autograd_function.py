"""autograd_function/test.py's models, its tolerances on inputs other than its own, and its no-compiler paths."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import types
import warnings

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from conftest import CHILD_ENV, ROOT, load_example, passed
from onnx import AttributeProto, numpy_helper
from onnx.reference import ReferenceEvaluator

NAME = "autograd_function"
SEEDS = range(20)
example = load_example(NAME)


@pytest.fixture(scope="module")
def run(example_run):
    return passed(example_run(NAME))  # skips the module when the example skipped itself (no compiler)


def ops(model):
    return [n.op_type for n in model.graph.node]


OPS = {  # each model's nodes
    "my_relu.onnx": ["Constant", "Clip"], "my_relu_float64.onnx": ["Constant", "Clip"],
    "my_add_float32.onnx": ["Constant", "Mul", "Add"], "my_add_float64.onnx": ["Constant", "Mul", "Add"],
    "my_add_aten_direct.onnx": ["Constant", "Mul", "Add"], "my_add_cpp.onnx": ["Constant", "Mul", "Add"],
    "bicubic_upsample.onnx": ["Resize"], "my_relu_dynamo.onnx": ["Max"],
    "my_add_dynamo.onnx": ["Mul", "Add"], "my_add_onnx_ops_dynamo.onnx": ["Mul", "Add"],
    "my_leaky_relu.onnx": ["LeakyRelu"], "my_leaky_relu_dynamo.onnx": ["LeakyRelu"],
    "min_max_onnx_ops_dynamo.onnx": ["MinMax"],
    "my_leaky_relu_float16.onnx": ["Cast", "LeakyRelu", "CastLike"],
    "my_leaky_relu_bfloat16.onnx": ["Cast", "LeakyRelu", "CastLike"],
    "my_leaky_relu_float16_dynamo.onnx": ["Cast", "LeakyRelu", "Cast"],
    "my_leaky_relu_bfloat16_dynamo.onnx": ["Cast", "LeakyRelu", "Cast"],
}


@pytest.mark.parametrize("filename", OPS)
def test_op_types(run, filename):
    assert ops(run.model(filename)) == OPS[filename]


@pytest.mark.parametrize("filename, dtype", [("my_relu.onnx", np.float32), ("my_relu_float64.onnx", np.float64),
                                             ("failures/clip_float32_min_float64_input.onnx", np.float32)])
def test_clip_min_dtype(run, filename, dtype):
    assert numpy_helper.to_array(run.model(filename).graph.node[0].attribute[0].t).dtype == dtype


def test_one_function_writes_the_same_node_under_both_exporters_exact_on_20_seeds(run):
    paths = [str(run.out / f) for f in ("my_leaky_relu.onnx", "my_leaky_relu_dynamo.onnx")]
    nodes = [onnx.load(path).graph.node[0] for path in paths]
    assert nodes[0].domain == nodes[1].domain == "" and list(nodes[0].attribute) == list(nodes[1].attribute)
    sessions = [ort.InferenceSession(path, providers=["CPUExecutionProvider"]) for path in paths]
    for seed in SEEDS:
        x = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(seed)) * 10
        for session in sessions:
            np.testing.assert_array_equal(session.run(None, {"x": x.numpy()})[0], example.MyLeakyReluModel()(x).numpy())


def test_two_outputs_as_one_custom_node_exact_on_20_seeds(run):
    model = run.model("min_max_onnx_ops_dynamo.onnx")
    assert (model.graph.node[0].domain, list(model.graph.node[0].output)) == ("tutorial", ["low", "high"])
    evaluator = ReferenceEvaluator(model, new_ops=[example.MinMax])
    for seed in SEEDS:
        x = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(seed))
        for ours, theirs in zip(evaluator.run(None, {"x": x.numpy()}), (x.amin(-1), x.amax(-1)), strict=True):
            np.testing.assert_array_equal(ours, theirs.numpy())  # low, then high
    assert not (run.out / "failures/my_leaky_relu_unguarded.onnx").exists()  # the unguarded export failed


HALF = {  # dtype -> (ONNX element type, numpy dtype, torch dtype)
    "float16": (onnx.TensorProto.FLOAT16, np.float16, torch.float16),
    "bfloat16": (onnx.TensorProto.BFLOAT16, ml_dtypes.bfloat16, torch.bfloat16),
}


def half_runner(path, dtype: str):
    """PATH in plain ONNX Runtime as a function of raw 16-bit values of DTYPE (in and out): ONNX Runtime's own OrtValue
    API and a preallocated output, not test.py's DLPack helper."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [session.get_inputs()[0].type, session.get_outputs()[0].type] == [f"tensor({dtype})"] * 2
    elem_type, as_value = HALF[dtype][0], ort.OrtValue.ortvalue_from_numpy_with_onnx_type

    def run_half(bits: np.ndarray) -> np.ndarray:
        out = np.zeros(bits.shape, np.uint16)
        binding = session.io_binding()
        binding.bind_ortvalue_input(session.get_inputs()[0].name, as_value(np.ascontiguousarray(bits), elem_type))
        binding.bind_ortvalue_output(session.get_outputs()[0].name, as_value(out, elem_type))
        session.run_with_iobinding(binding)
        return out

    return run_half


def torch_bits(bits: np.ndarray, dtype: str) -> np.ndarray:
    """F.leaky_relu(x, 0.1) in PyTorch, in DTYPE, on the raw 16-bit values BITS: raw 16-bit values."""
    x = torch.from_numpy(bits.view(np.int16).copy()).view(HALF[dtype][2])
    return example.MyLeakyReluCastModel()(x).view(torch.int16).numpy().view(np.uint16)


@pytest.mark.parametrize("exporter", ["", "_dynamo"])
@pytest.mark.parametrize("dtype", HALF)
def test_half_precision_models_equal_torch_on_every_value_of_the_dtype(run, dtype, exporter):
    """Step 11's float16 and bfloat16 files on all 65536 bit patterns of the dtype (both zeros, the subnormals next
    to 0, infinities, NaNs), in 3 shuffles, against PyTorch's leaky_relu in that dtype: bit for bit (NaN: any NaN)."""
    path = run.out / f"my_leaky_relu_{dtype}{exporter}.onnx"
    model = onnx.load(str(path))
    casts = [n for n in model.graph.node if n.op_type == "Cast"]
    assert casts[0].attribute[0].i == onnx.TensorProto.FLOAT  # LeakyRelu computes in float32
    if exporter:  # the Cast back names the dtype; dynamo=False's CastLike takes it from x
        assert casts[1].attribute[0].i == HALF[dtype][0]
    (leaky,) = [n for n in model.graph.node if n.op_type == "LeakyRelu"]
    assert helper_value(leaky.attribute[0]) == np.float32(0.1)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]  # [2, 3, 4]: static
    size = int(np.prod(shape))
    every = np.arange(2**16, dtype=np.uint16)
    every = np.concatenate([every, every[: -len(every) % size]])  # whole batches
    run_half = half_runner(path, dtype)
    for seed in range(3):
        values = np.random.default_rng(seed).permutation(every).reshape(-1, *shape)
        actual = np.stack([run_half(x) for x in values])
        expected = torch_bits(values, dtype)
        nan = np.isnan(expected.view(HALF[dtype][1]).astype(np.float32))
        assert np.isnan(actual.view(HALF[dtype][1]).astype(np.float32))[nan].all(), f"{path.name}, seed {seed}"
        np.testing.assert_array_equal(actual[~nan], expected[~nan], err_msg=f"{path.name}, seed {seed}")


def helper_value(attribute):
    return onnx.helper.get_attribute_value(attribute)


def test_half_precision_failure_is_refused_and_caught(run, tmp_path):
    """Step 11's failing file: step 9's Function on bfloat16, LeakyRelu on bfloat16, which ONNX's schema allows and
    ONNX Runtime's CPU kernels do not; the page's check catches it. float16 without Casts runs (ONNX Runtime casts
    around a float32-only CPU kernel for float16 itself), and the check is stricter there than a session."""
    failed = run.out / "failures/my_leaky_relu_bfloat16_dynamo.onnx"
    onnx.checker.check_model(str(failed), full_check=True)
    with pytest.raises(Exception, match=r"Could not find an implementation for LeakyRelu\(16\)"):
        ort.InferenceSession(str(failed), providers=["CPUExecutionProvider"])
    with pytest.raises(TypeError, match=r"LeakyRelu reads tensor\(bfloat16\): no CPU kernel"):
        example.check_cpu_kernels(str(failed), "LeakyRelu")
    x = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(7)).to(torch.float16)
    plain = str(tmp_path / "f16.onnx")
    torch.onnx.export(example.MyLeakyReluModel().eval(), (x,), dynamo=True, verbose=False).save(plain)
    bits = x.view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(half_runner(plain, "float16")(bits), torch_bits(bits, "float16"))
    with pytest.raises(TypeError, match=r"LeakyRelu reads tensor\(float16\)"):
        example.check_cpu_kernels(plain, "LeakyRelu")
    for kept in ("my_leaky_relu_bfloat16.onnx", "my_leaky_relu_bfloat16_dynamo.onnx"):
        example.check_cpu_kernels(str(run.out / kept), "LeakyRelu")  # passes: LeakyRelu reads float32


def test_cpp_call_without_a_function_is_a_constant_of_zeros(run):
    # The tracer recorded only the kernel's torch::empty_like, which the exporter writes as zeros.
    direct = run.model("failures/my_add_cpp_direct.onnx")
    assert numpy_helper.to_array(direct.graph.node[0].attribute[0].t).shape == (2, 3)
    assert "my_lib.my_add traced as ['aten::empty_like']" in run.output
    assert "my_lib.my_add_aten traced as ['aten::mul', 'aten::add']" in run.output


def test_the_onnx_ops_fix_calls_the_cpp_kernel_outside_the_export(monkeypatch):
    calls = []  # a stand-in for step 2's compiled extension:
    monkeypatch.setattr(example, "my_lib", types.SimpleNamespace(my_add=lambda a, b: calls.append(1) or 2 * a + b))
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    torch.testing.assert_close(example.MyAddOnnxOps()(a, b), 2 * a + b)
    assert len(calls) == 1
    program = torch.onnx.export(example.MyAddOnnxOps().eval(), (a, b), dynamo=True, verbose=False)
    assert len(calls) == 1 and ops(program.model_proto) == ["Mul", "Add"]


@pytest.mark.parametrize("filename", ["bicubic_upsample.onnx", "super_resolution.onnx", "super_resolution_dynamo.onnx"])
def test_resize_takes_the_factor_as_a_graph_input(run, filename):
    model = run.model(filename)
    assert [i.name for i in model.graph.input] == ["x", "factor"]
    (resize,) = [n for n in model.graph.node if n.op_type == "Resize"]
    assert list(resize.input[:3]) == ["x", "", "factor"]
    attrs = {a.name: a for a in resize.attribute}
    assert attrs["mode"].type == AttributeProto.STRING and attrs["mode"].s == b"cubic"
    assert attrs["coordinate_transformation_mode"].s == b"pytorch_half_pixel"
    assert "cubic_coeff_a" not in attrs  # left at ONNX's default, which is PyTorch's bicubic A = -0.75
    assert onnx.defs.get_schema("Resize").attributes["cubic_coeff_a"].default_value.f == -0.75


@pytest.mark.parametrize("filename", ["super_resolution.onnx", "super_resolution_dynamo.onnx"])
def test_one_model_upsamples_by_2_and_by_3(run, filename):
    """Recompute the model in PyTorch from the file's own weights, at two run-time factors."""
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


def export_quietly(model, inputs, path, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the deprecation of dynamo=False and the tolist() TracerWarning
        torch.onnx.export(model, inputs, str(path), dynamo=False, opset_version=17, **kwargs)
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("size", [16, 64])
def test_upsampler_tolerance_holds_over_seeds(tmp_path, size):
    """Step 8's bound on 20 inputs at both factors; at factor 3 the page's former fixed atol of 1e-6 fails."""
    up, inputs = example.FunctionUpsample(), (torch.rand(1, 3, size, size), torch.tensor([1.0, 1.0, 3.0, 3.0]))
    session = export_quietly(up, inputs, tmp_path / "up.onnx", input_names=["x", "factor"])
    worst, fixed_atol_failed = {2.0: 0.0, 3.0: 0.0}, 0
    for seed in SEEDS:
        x = torch.rand(1, 3, size, size, generator=torch.Generator().manual_seed(seed))
        for f in (2.0, 3.0):
            scales = torch.tensor([1.0, 1.0, f, f])
            (actual,) = session.run(None, {"x": x.numpy(), "factor": scales.numpy()})
            expected, atol = up(x, scales).numpy(), example.upsample_atol(x)
            np.testing.assert_allclose(actual, expected, rtol=0, atol=atol, err_msg=f"seed {seed}, factor {f:g}")
            worst[f] = max(worst[f], float(np.max(np.abs(actual.astype(np.float64) - expected))) / atol)
            fixed_atol_failed += f == 3.0 and not np.allclose(actual, expected, rtol=1e-5, atol=1e-6)
    assert fixed_atol_failed > 0, "at factor 3 the old fixed tolerance held on every seed: revisit the README"
    assert worst[2.0] < worst[3.0] < 0.5, worst  # measured: at most 0.13 of the bound at factor 3


def test_super_resolution_tolerance_holds_over_seeds(tmp_path):
    """Step 8's model tolerance (rtol 1e-5, atol 1e-6) on 10 seeds of weights and inputs, both factors."""
    factor3 = torch.tensor([1.0, 1.0, 3.0, 3.0])
    for seed in range(10):
        torch.manual_seed(seed)
        sr = example.SuperResolution(example.FunctionUpsample()).eval()
        x = torch.rand(1, 3, 16, 16)
        path = tmp_path / f"sr{seed}.onnx"
        session = export_quietly(sr, (x, factor3), path, input_names=["x", "factor"], output_names=["y"])
        for f in (2.0, 3.0):
            scales = torch.tensor([1.0, 1.0, f, f])
            (actual,) = session.run(None, {"x": x.numpy(), "factor": scales.numpy()})
            expected = sr(x, scales).detach().numpy()
            np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6, err_msg=f"seed {seed}, factor {f:g}")


def test_ninja_is_found_beside_the_interpreter(monkeypatch, tmp_path):
    """A venv used without activation: ninja is only in the interpreter's scripts folder, not on PATH."""
    monkeypatch.setenv("CXX", shutil.which(os.environ.get("CXX", "c++")) or "c++")  # by its path
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
    assert example.harness.build_problem() == ""
    assert os.path.dirname(shutil.which("ninja")) == sysconfig.get_path("scripts")  # put on PATH for the build
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("sysconfig.get_path", lambda name: str(tmp_path))  # and not there either
    assert "ninja is not installed" in example.harness.build_problem()


def test_without_a_compiler_the_rest_runs_and_it_skips(tmp_path):
    proc = subprocess.run(
        [sys.executable, "test.py", "--out", str(tmp_path)], cwd=ROOT / NAME,
        env={**CHILD_ENV, "CXX": "no-such-compiler"}, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 77, proc.stdout + proc.stderr
    for step in (2, 7):  # the two steps that use the C++ extension (dynamo=True, dynamo=False)
        assert f"SKIP step {step}: no C++ compiler: 'no-such-compiler' is not on PATH" in proc.stdout
    last = proc.stdout.rstrip().splitlines()[-1]
    assert last.startswith("SKIP: step 2: no C++ compiler") and "; step 7: no C++ compiler" in last, last
    for model in ("my_add_onnx_ops_dynamo.onnx", "my_add_aten_direct.onnx", "my_add_cpp.onnx"):
        assert not (tmp_path / model).exists(), model
    for model in ("super_resolution_dynamo.onnx", "bicubic_upsample.onnx"):  # the steps after each still ran
        assert (tmp_path / model).is_file(), model
    assert "Traceback" not in proc.stdout + proc.stderr
    steps = json.loads((tmp_path / "steps.json").read_text(encoding="utf-8"))["steps"]
    statuses = {n: steps[n]["status"] for n in ("2", "3", "7", "8")}
    assert statuses == {"2": "skipped", "3": "runs", "7": "skipped", "8": "runs"}, steps
