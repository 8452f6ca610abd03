"""What register_pytorch_op/test.py writes (both exporters, every attribute kind), its tolerances, its skips."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from conftest import ROOT, load_example, passed
from onnx import AttributeProto, helper

from harness import opsets_of as opsets
from harness import type_text

NAME = "register_pytorch_op"
SEEDS = 20
MODELS = ["dual_residual_untyped.onnx", "dual_residual.onnx", "dual_residual_dynamo.onnx",
          "dual_residual_legacy_dynamo.onnx"]
# Run in the folder of the models the example wrote, with its C++ ops: what the README claims beyond test.py's checks.
PROBES = """\
import contextlib, io
import numpy as np, onnx, onnxscript, torch
from onnx.reference import ReferenceEvaluator
import test as example
with contextlib.redirect_stdout(io.StringIO()):
    example.step1_build()
model, inputs = example.DualResidualModel().eval(), (torch.randn(2, 3, 4), torch.randn(2, 3, 4))

# Step 5: without output_names, the inputs take the names of forward's parameters, the outputs are numbered.
torch.onnx.register_custom_op_symbolic("cst::dual_residual", example.dual_residual_symbolic, 12)
torch.onnx.export(model, inputs, unnamed := io.BytesIO(), dynamo=False, opset_version=12)
graph = onnx.load_model_from_string(unnamed.getvalue()).graph
print("names:", [i.name for i in graph.input], [o.name for o in graph.output])

# Step 3: an onnxscript.values.Op built without a schema fails the dynamo=True export.
@torch.library.register_fake("cst::dual_residual")
def _(x, y, alpha):
    return torch.empty_like(x), torch.empty_like(y)
no_schema = onnxscript.values.Op(example.rknn_cst, "cstDualResidual")
def translation(x, y, alpha: float):
    return no_schema(x, y, alpha=alpha)
table = {torch.ops.cst.dual_residual.default: translation}
try:
    torch.onnx.export(model, inputs, dynamo=True, custom_translation_table=table)
except Exception as error:
    while error is not None:  # the error and its causes, one a line
        print(f"{type(error).__name__}: {error}")
        error = error.__cause__

# Steps 3 to 5: ONNX Runtime with the Python kernel equals the C++ op on the four models; step 6: the reference Foo
# is within rtol=atol=1e-5 of foo_forward. Both over SEEDS inputs.
foo = ReferenceEvaluator(onnx.load("failures/foo_all_attributes.onnx"), new_ops=[example.Foo])
sessions = {path: example.ortx_session(path) for path in MODELS}
for seed in range(SEEDS):
    torch.manual_seed(seed)
    x, y = torch.randn(2, 3, 4), torch.randn(2, 3, 4)
    for path, session in sessions.items():  # two outputs each
        for got, want in zip(session.run(None, {"x": x.numpy(), "y": y.numpy()}), model(x, y), strict=True):
            np.testing.assert_array_equal(got, want.numpy(), err_msg=f"{path} seed {seed}")
    x, y = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5)
    (got,) = foo.run(None, {"x": x.numpy(), "y": y.numpy()})
    np.testing.assert_allclose(got, example.FooModel()(x, y).numpy(), rtol=1e-5, atol=1e-5, err_msg=f"seed {seed}")
print(f"every tolerance held over {SEEDS} seeds")
"""


@pytest.fixture(scope="module")
def run(example_run):
    return passed(example_run(NAME))  # skips the module when the example skipped itself (no compiler)


@pytest.fixture(scope="module")
def example(run):
    """The example module, with step 1's C++ op loaded (a cached build, after `run`), and page_helpers' @onnx_op
    kernels registered: a session that loads onnxruntime-extensions' library needs them."""
    module = load_example(NAME)
    module.step1_build()
    return module


def python(script: str, cwd, status=0, env=None) -> subprocess.CompletedProcess:
    """SCRIPT in this interpreter, able to `import test` from the example's folder; it must exit STATUS."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / NAME), **(env or {})}
    proc = subprocess.run([sys.executable, "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == status, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def main(out, status, env=None, before="") -> subprocess.CompletedProcess:
    """test.py's main(["--out", OUT]) in a process of its own, after BEFORE; it must exit STATUS, with no traceback."""
    script = f"import sys\nimport test as example\n{before}\nsys.exit(example.main(['--out', {str(out)!r}]))\n"
    proc = python(script, out.parent, status, env)
    assert "Traceback" not in proc.stdout + proc.stderr
    return proc


@pytest.mark.parametrize("filename", MODELS)
def test_one_custom_node_with_two_named_outputs(run, filename):
    model = run.model(filename)
    onnx.checker.check_model(model, full_check=True)  # in a process with no schema for the node
    (node,) = model.graph.node
    assert (node.domain, node.op_type) == ("rknn_cst", "cstDualResidual")
    assert list(node.input) == [i.name for i in model.graph.input] == ["x", "y"]
    # output_names: without it the TorchScript exporter names the outputs "2" and "3"
    assert [o.name for o in model.graph.output] == list(node.output) == ["x_res", "y_res"]
    assert [(a.name, a.type, a.f) for a in node.attribute] == [("alpha", AttributeProto.FLOAT, 0.5)]
    assert opsets(model)["rknn_cst"] == 1 and ("dynamo" in filename or opsets(model) == {"": 12, "rknn_cst": 1})
    types = [type_text(o.type) for o in model.graph.output]  # float32[2,3,4]; a named dimension by its name
    if filename == "dual_residual_untyped.onnx":  # no setType: three dimensions the exporter names
        assert all(re.fullmatch(r"float32\[[A-Za-z_]\w*(,[A-Za-z_]\w*){2}\]", t) for t in types), types
    else:
        assert types == ["float32[2,3,4]"] * 2


def test_the_failure_models_every_attribute_kind_and_the_op_traced_through(run):
    traced = run.model("failures/dual_residual_traced_through.onnx")  # dynamo=True and a RegisterOperators op
    assert [n.op_type for n in traced.graph.node] == ["Mul", "Sub", "Mul", "Sub"] and "rknn_cst" not in opsets(traced)
    model = run.model("failures/foo_all_attributes.onnx")
    (node,) = model.graph.node
    assert (node.domain, node.op_type) == ("rknn_cst", "Foo")
    kinds = {a.name: (AttributeProto.AttributeType.Name(a.type), helper.get_attribute_value(a)) for a in node.attribute}
    assert kinds == {"alpha": ("FLOAT", 0.5), "beta": ("INT", 2), "mode": ("STRING", b"sub"),
                     "scales": ("FLOATS", [1.0, 2.0, 3.0]), "dims": ("INTS", [2, 3])}
    assert [type_text(o.type) for o in model.graph.output] == ["float32[2,3,1,1]"]


def test_fake_kernel_passes_every_opcheck_test_and_noise_is_held_back(run):
    (line,) = [line for line in run.output.splitlines() if line.startswith("  opcheck: ")]
    results = dict(item.split(": ") for item in line.removeprefix("  opcheck: ").split(", "))
    assert "test_faketensor" in results and set(results.values()) == {"SUCCESS"}, line
    assert "No CUDA runtime" not in run.output
    held_back = "  held back (shown with -v): the exporter's dump 'Torch IR graph at exception:'"
    assert run.output.count(held_back) == 2  # steps 5 and 6; the dumps themselves are not printed
    assert "Torch IR graph at exception: graph(" not in run.output and "graph(%x : Float(" not in run.output


def test_tolerances_over_seeds_unnamed_outputs_and_a_translation_op_without_schema(run):
    probes = python(f"SEEDS, MODELS = {SEEDS}, {MODELS!r}\n{PROBES}", run.out).stdout  # fails if a tolerance does
    assert f"every tolerance held over {SEEDS} seeds" in probes
    assert "names: ['x', 'y'] ['2', '3']" in probes, probes
    assert "ValueError: OpSchema not found for op 'cstDualResidual'." in probes, probes


def test_ninja_beside_the_interpreter_is_found(tmp_path):
    """A venv used without activation (python called by path) has ninja only in its bin/: not a SKIP."""
    ninja = os.path.join(sysconfig.get_path("scripts"), "ninja")
    if not os.path.isfile(ninja):
        pytest.skip(f"no {ninja}")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "c++").symlink_to("/usr/bin/c++")  # a compiler on PATH, but no ninja
    script = "import shutil, test\nprint(repr(test.harness.build_problem()), shutil.which('ninja'))"
    assert python(script, tmp_path, env={"PATH": str(tmp_path / "bin")}).stdout == f"'' {ninja}\n"


def test_a_failed_build_is_one_fail_line_then_what_the_compiler_said(tmp_path):
    """A stand-in compiler reports a full disk (as a CI machine's did): never only the build's command line."""
    compiler = tmp_path / "cxx"
    compiler.write_text(  # the real compiler for torch's `--version` probe, a failure for each compile
        '#!/bin/sh\ncase " $* " in *" -c "*)\n'
        "  echo 'main.cpp: fatal error: cannot write main.o: No space left on device' >&2; exit 1;;\n"
        'esac\nexec c++ "$@"\n'
    )
    compiler.chmod(0o755)
    proc = main(tmp_path / "out", 1, env={"CXX": str(compiler), "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")})
    (fail,) = [line for line in proc.stdout.splitlines() if line.startswith("FAIL")]
    assert fail.startswith("FAIL: unexpected RuntimeError: Error building extension") and "PASS" not in proc.stdout
    assert "fatal error: cannot write main.o: No space left on device" in proc.stdout.split(fail, 1)[1], proc.stdout


def test_without_a_compiler_it_skips_with_the_reason(tmp_path):
    proc = main(tmp_path / "out", 77, env={"CXX": "no-such-compiler"})
    assert "SKIP step 1: no C++ compiler: 'no-such-compiler' is not on PATH" in proc.stdout
    assert all(f"SKIP step {n}: needs the C++ ops of step 1" in proc.stdout for n in (2, 3, 4, 5, 6, 8)), proc.stdout
    assert not list(tmp_path.rglob("*.onnx"))


def test_without_onnxruntime_extensions_only_steps_3_to_5_and_8_skip(run, tmp_path):
    """The other steps still run and check their models; exit 77 names 3, 4, 5 and 8."""
    shadow = tmp_path / "shadow" / "onnxruntime_extensions"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text('raise ImportError("onnxruntime_extensions hidden by the test")\n')
    proc = main(tmp_path / "out", 77, env={"PYTHONPATH": f"{shadow.parent}{os.pathsep}{ROOT / NAME}"})
    reason = "onnxruntime-extensions cannot be imported (ImportError: onnxruntime_extensions hidden by the test): "
    reason += "pip install onnxruntime-extensions"
    skips = [line for line in proc.stdout.splitlines() if line.startswith("SKIP step")]
    assert skips == [f"SKIP step {n}: {reason}" for n in (3, 4, 5, 8)]
    models = ["dual_residual_dynamo.onnx", "dual_residual_legacy_dynamo.onnx", "dual_residual.onnx",
              "failures/foo_all_attributes.onnx"]
    assert [model for model in models if not (tmp_path / "out" / model).is_file()] == []
    assert "== 7. Deploying a model with a custom-domain node ==" in proc.stdout
    assert "dual_residual_dynamo.onnx needs rknn_cst::cstDualResidual" in proc.stdout


def test_torch_2_4_gates_steps_2_to_4_and_7(run, tmp_path):
    """With harness.TORCH set to (2, 4) on the pinned torch, steps 2 to 4 and 7 skip before any dynamo=True export,
    step 5 registers step 3's kernel itself, the example still passes and steps.json says so (the real 2.4 stack
    runs in run_stacks.py)."""
    out = tmp_path / "out"
    proc = main(out, 0, before="example.harness.TORCH = (2, 4)")
    skips = [line for line in proc.stdout.splitlines() if line.startswith("SKIP step")]
    why = (
        "custom_translation_table came with 2.6 (2.5's export takes it and ignores it, silently); "
        "on 2.4, dynamo=True is the old torch.onnx.dynamo_export"
    )
    assert skips == [f"SKIP step {n}: needs torch >= 2.6 ({why})" for n in (2, 3)] + [
        "SKIP step 4: needs torch >= 2.5 (on 2.4, dynamo=True is the older torch.onnx.dynamo_export)",
        "SKIP step 7: needs torch >= 2.6 (the other model, dual_residual_dynamo.onnx, comes from step 3)",
        f"SKIP step 8: needs torch >= 2.6 (the dynamo=True half of this step: {why})",
    ]
    assert "exporting with dynamo=True" not in proc.stdout
    assert "dual_residual.onnx y_res: matches PyTorch" in proc.stdout  # step 5 ran the kernel it registered
    assert "dual_residual.onnx needs rknn_cst::cstDualResidual" in proc.stdout  # step 7 lists what it has
    steps = json.loads((out / "steps.json").read_text("utf-8"))["steps"]
    statuses = {number: step["status"] for number, step in steps.items()}
    expected = ["runs"] + ["needs torch >= 2.6"] * 2 + ["needs torch >= 2.5"] + ["runs"] * 2
    expected += ["needs torch >= 2.6"] * 2
    assert statuses == dict(zip("12345678", expected, strict=True)), statuses
    assert "dual_residual_bfloat16.onnx: checked; within one ulp of PyTorch's, in bfloat16" in proc.stdout  # step 8's
    assert sorted(p.name for p in out.glob("*.onnx")) == [  # dynamo=False half ran
        "dual_residual.onnx", "dual_residual_bfloat16.onnx", "dual_residual_float16.onnx", "dual_residual_untyped.onnx"]
    assert not list(tmp_path.rglob("*.sarif"))


# Step 8: the float16 and bfloat16 models, run with ONNX Runtime's own OrtValue API (not test.py's DLPack helper)
HALF = {"float16": (onnx.TensorProto.FLOAT16, np.float16, torch.float16),
        "bfloat16": (onnx.TensorProto.BFLOAT16, ml_dtypes.bfloat16, torch.bfloat16)}
HALF_MODELS = [f"dual_residual_{dtype}{exporter}.onnx" for exporter in ("_dynamo", "") for dtype in HALF]


def ortx() -> ort.SessionOptions:
    """SessionOptions with onnxruntime-extensions' library: page_helpers' @onnx_op kernels (registered when the
    `example` fixture imported page_helpers)."""
    extensions = pytest.importorskip("onnxruntime_extensions")
    options = ort.SessionOptions()
    options.register_custom_ops_library(extensions.get_library_path())
    return options


def run_half(path, x: np.ndarray, y: np.ndarray, dtype: str) -> list[np.ndarray]:
    """PATH in ONNX Runtime, X and Y (float16, or bfloat16 as ml_dtypes) in, both outputs back as raw 16-bit values
    in preallocated buffers."""
    elem_type = HALF[dtype][0]
    session = ort.InferenceSession(str(path), ortx(), providers=["CPUExecutionProvider"])
    assert [a.type for a in session.get_inputs() + session.get_outputs()] == [f"tensor({dtype})"] * 4
    as_value = ort.OrtValue.ortvalue_from_numpy_with_onnx_type
    outputs = [np.zeros(x.shape, np.uint16) for _ in session.get_outputs()]
    binding = session.io_binding()
    for arg, value in zip(session.get_inputs(), (x, y), strict=True):
        binding.bind_ortvalue_input(arg.name, as_value(value.view(np.uint16), elem_type))
    for arg, buffer in zip(session.get_outputs(), outputs, strict=True):
        binding.bind_ortvalue_output(arg.name, as_value(buffer, elem_type))
    session.run_with_iobinding(binding)
    return [buffer.view(x.dtype) for buffer in outputs]


def half_edges(dtype: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """x and y of shape (2, 3, 4) in DTYPE, which test.py never used: NaN, infinities, the largest finite value, the
    smallest normal and subnormal values and their neighbours, y within a unit of x * 0.5 (cancellation), results
    past the largest finite value, and random 16-bit patterns."""
    _, np_dtype, _ = HALF[dtype]
    info = ml_dtypes.finfo(np_dtype)
    rng = np.random.default_rng(seed)
    special = np.array([np.nan, np.inf, -np.inf, info.max, -info.max, info.smallest_normal, info.smallest_subnormal,
                        -info.smallest_subnormal, 3 * info.smallest_subnormal, info.smallest_normal * 1.5, 0.0, -0.0,
                        1.0, -1.0], dtype=np.float32).astype(np_dtype)
    x = rng.permutation(np.concatenate([special, rng.standard_normal(10).astype(np_dtype)]))
    near = (x.astype(np.float32) * 0.5).astype(np_dtype)  # y = x * 0.5 or a unit away: the difference cancels
    away = np.nextafter(near, np.where(rng.random(24) < 0.5, np.inf, -np.inf).astype(np_dtype))
    bits = rng.integers(0, 1 << 16, 24, dtype=np.uint16).view(np_dtype)  # any value, NaN and subnormals included
    y = np.select([rng.random(24) < 0.3, rng.random(24) < 0.5], [bits, near], away)
    y[:4] = np.where(x[:4] < 0, info.max, -info.max)  # |x * 0.5 - y| past the largest finite value, or not
    if seed % 2:  # x and y swapped: the second output meets the edges
        x, y = y, x
    return x.reshape(2, 3, 4), y.reshape(2, 3, 4)


def torch_half(a: np.ndarray, dtype: str) -> torch.Tensor:
    return torch.from_numpy(a.view(np.uint16).astype(np.int16)).view(HALF[dtype][2])


@pytest.mark.filterwarnings("ignore:(invalid value|overflow) encountered:RuntimeWarning")  # NaN, inf: the kernel's
@pytest.mark.parametrize("filename", HALF_MODELS)
def test_half_precision_models_follow_torch_in_onnxruntime(run, example, filename):
    """Step 8's files: the custom node float32 between Casts, in ONNX Runtime on edge values and 20 seeds, against the
    C++ op in that dtype: within one unit in the last place (rtol = eps, atol = tiny * eps), and equal wherever x * 0.5
    (y * 0.5 for the second output) is exact in that dtype, that is, zero or normal: the page's derivation."""
    dtype = filename.split("_")[2].split(".")[0]
    model = onnx.load(str(run.out / filename))
    assert [i.type.tensor_type.elem_type for i in model.graph.input] == [HALF[dtype][0]] * 2
    ops = [n.op_type for n in model.graph.node]
    assert ops == ["Cast", "Cast", "cstDualResidual"] + (["Cast"] * 2 if "dynamo" in filename else ["CastLike"] * 2)
    assert [n.attribute[0].i for n in model.graph.node[:2]] == [onnx.TensorProto.FLOAT] * 2
    (node,) = [n for n in model.graph.node if n.domain == "rknn_cst"]
    assert [(a.name, a.type, a.f) for a in node.attribute] == [("alpha", AttributeProto.FLOAT, 0.5)]
    info = torch.finfo(HALF[dtype][2])
    differed = 0
    for seed in range(SEEDS):
        x, y = half_edges(dtype, seed)
        actual = run_half(run.out / filename, x, y, dtype)
        tx, ty = torch_half(x, dtype), torch_half(y, dtype)
        expected = torch.ops.cst.dual_residual(tx, ty, 0.5)
        for got, want, scaled in zip(actual, expected, (tx, ty), strict=True):
            got = torch_half(got, dtype)
            torch.testing.assert_close(got, want, rtol=info.eps, atol=info.tiny * info.eps, equal_nan=True,
                                       msg=lambda m, s=seed: f"{filename}, seed {s}: {m}")
            exact = (scaled == 0) | (scaled.abs() >= 2 * info.tiny) | scaled.isnan()  # x * 0.5 exact in dtype
            same = (got == want) | (got.isnan() & want.isnan())
            assert same[exact].all(), (filename, seed, got[exact & ~same], want[exact & ~same])
            differed += int((~same).sum())
    assert 0 < differed < SEEDS * 2 * 24 // 4, differed  # the edges reach an inexact x * 0.5, a few per seed


def test_half_precision_failure_is_bfloat16_and_refused(run, example):
    """Step 8's failing file: the exporter wrote bfloat16 through step 3's float-only local schema; ONNX Runtime
    refuses it, and so does the full checker once the schema is registered."""
    path = str(run.out / "failures/dual_residual_bf16_dynamo.onnx")
    model = onnx.load(path)
    assert [i.type.tensor_type.elem_type for i in model.graph.input] == [onnx.TensorProto.BFLOAT16] * 2
    assert [n.op_type for n in model.graph.node] == ["cstDualResidual"]
    with pytest.raises(Exception, match=r"Type 'tensor\(bfloat16\)' of input parameter \(x\)"):
        ort.InferenceSession(path, ortx(), providers=["CPUExecutionProvider"])
    onnx.checker.check_model(path, full_check=True)  # no schema registered: the checker passes it
    with pytest.raises(onnx.shape_inference.InferenceError, match="has unsupported type: tensor.bfloat16."):
        example.check_with_schemas(path, example.dual_residual_schema)
