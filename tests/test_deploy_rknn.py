"""What deploy_rknn/test.py writes, and what RKNN-Toolkit2 does with it; in CI a SKIP fails."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import types

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from conftest import CHILD_ENV, ROOT, load_example, passed, rknn_python

NAME = "deploy_rknn"
MODELS = {  # each model's nodes, and its rknn_cst node's attributes
    "threshold": (["rknn_cst.cstThreshold"], {"threshold": 0.1, "value": 20.0}),
    "dual_residual": (["rknn_cst.cstDualResidual"], {"alpha": 0.5}),
    "conv_threshold": (["Conv", "rknn_cst.cstThreshold", "Conv"], {"threshold": 0.1, "value": 0.1}),
    "deform_conv": (["Conv", "DeformConv"], None),
}
KEPT = [f"{model}{suffix}.onnx" for model in MODELS for suffix in ("_dynamo", "")]  # steps 2 and 3
ELEMENTWISE = ("threshold", "dual_residual")  # each output element from one element of each input
REPRODUCED = ["Please call rknn.config first!", "No opset import for domain 'rknn_cst'", "IndexError: _Map_base::at",
              "The 'target_platform' has not been set yet", "Unsupport onnx opset 20, need <= 19!",
              "Type 'tensor(float16)' of input parameter (input)", "has unsupported type: tensor(float16)",
              "expected: (tensor(bfloat16))"]
HALF = {"float16": onnx.TensorProto.FLOAT16, "bfloat16": onnx.TensorProto.BFLOAT16}  # steps 2 and 3's half models
HALF_KEPT = [f"{m}_{d}{e}.onnx" for m in ("threshold", "dual_residual") for d in HALF for e in ("_dynamo", "")]


def skip_unless_ci(reason: str):
    if os.environ.get("CI") == "true":  # CI creates the RKNN environment: a skip there is a failure
        pytest.fail(f"{NAME} skipped itself in CI, where .ci/run creates the RKNN environment: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def run(example_run):
    try:  # skips when the example skipped itself (no RKNN environment)
        return passed(example_run(NAME))
    except pytest.skip.Exception as skipped:
        skip_unless_ci(str(skipped))


@pytest.fixture(scope="module")
def results(run):
    return json.loads((run.out / "rknn_results.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", KEPT)
def test_each_model_its_nodes_opsets_rknn_file_and_saved_case(run, name):
    stem, model = name.removesuffix(".onnx"), run.model(name)
    ops, attributes = MODELS[stem.removesuffix("_dynamo")]
    assert [f"{n.domain}.{n.op_type}" if n.domain else n.op_type for n in model.graph.node] == ops
    # RKNN-Toolkit2 2.5.0 reads opsets to 19, the first import as the model's; rknn_cst 1 with no custom_opsets
    assert (model.opset_import[0].domain, model.opset_import[0].version) == ("", 19)
    assert {o.domain: o.version for o in model.opset_import} == {"": 19} | ({"rknn_cst": 1} if attributes else {})
    for node in [n for n in model.graph.node if n.domain == "rknn_cst"]:  # one, as ops says
        assert {a.name: round(onnx.helper.get_attribute_value(a), 6) for a in node.attribute} == attributes
    rknn = run.out / f"{stem}.rknn"
    assert rknn.is_file() and rknn.stat().st_size > 1000, f"{rknn} is missing or empty"
    count = 2 if stem.startswith("dual_residual") else 1
    for case in [f"{stem}_{kind}_{i}.npy" for kind in ("input", "output") for i in range(count)]:
        assert (run.out / case).is_file(), case


def check_comparisons(out, comparisons: dict):
    """Each model's outputs against PyTorch's saved ones, within the README's float16 rules."""
    assert sorted(comparisons) == sorted(KEPT)
    for name, outputs in comparisons.items():
        assert [c["output"] for c in outputs] == list(range(2 if name.startswith("dual_residual") else 1)), name
        for c in outputs:
            expected = np.load(out / f"{name.removesuffix('.onnx')}_output_{c['output']}.npy")
            assert c["atol"] == pytest.approx(2**-8 * float(np.abs(expected).max()))  # 4 steps at the largest output
            assert 0 < c["max_abs_diff"] <= c["atol"] and c["cosine"] > 0.9999, (name, c)  # > 0: RKNN used float16
            # and each element within one step of its own value
            assert 0 < c["per_element"] < 1 if name.startswith(ELEMENTWISE) else "per_element" not in c, (name, c)


def test_reported_differences_within_the_float16_tolerance(run, results):
    check_comparisons(run.out, results["comparisons"])
    for name in KEPT[::2]:  # and both exporters' models give the same numbers
        assert results["comparisons"][name] == results["comparisons"][name.replace("_dynamo.onnx", ".onnx")]


def run_in_rknn_environment(code: str, cwd) -> str:
    """CODE under RKNN's interpreter in CWD: what it printed, both streams, colour codes removed."""
    proc = subprocess.run([str(rknn_python()), "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env=CHILD_ENV)
    output = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr)
    assert proc.returncode == 0, output[-3000:]
    return output


@pytest.mark.parametrize("name", ["threshold.onnx", "dual_residual.onnx"])
def test_the_per_element_check_catches_what_the_largest_output_allowance_lets_through(run, name):
    """threshold.onnx's allowance is 0.078 (20 is its largest output), its passed values below 3.5."""
    example = load_example(NAME)  # check_against_pytorch is NumPy's: it runs here too, given the half's glob
    example.glob = glob
    changes = {"float16": lambda e: e.astype(np.float16).astype(np.float32),
               "gain 2**-9": lambda e: e * np.float32(1 + 2**-9),
               "x*1.02 where x passes": lambda e: np.where(e == 20, e, e * np.float32(1.02))}

    def verdict(change, elementwise):  # check_against_pytorch's, on RKNN's outputs: PyTorch's saved ones, changed
        simulator = types.SimpleNamespace(inference=lambda inputs, data_format: [
            changes[change](np.load(run.out / f"{name[:-5]}_output_{i}.npy")) for i in range(len(inputs))])
        try:
            example.check_against_pytorch(simulator, str(run.out / name), elementwise)
            return "passes"
        except AssertionError:
            return "fails"

    verdicts = {change: [verdict(change, False), verdict(change, True)] for change in changes}
    assert verdicts["float16"] == ["passes", "passes"]  # RKNN's own rounding: half a step at most
    assert verdicts["gain 2**-9"] == ["passes", "fails"]
    if name == "threshold.onnx":
        assert verdicts["x*1.02 where x passes"] == ["passes", "fails"]


def test_dynamo_false_without_opset_version_writes_what_rknn_refuses(run, tmp_path):
    """On torch >= 2.9 a plain dynamo=False export writes opset 20 too, which load_onnx refuses."""
    import pages

    code = pages.regions(ROOT / NAME / "test.py")["threshold_symbolic"]  # as step 3 shows it
    register = next(line for line in code.splitlines() if '"aten::threshold"' in line)
    export = "\n".join([
        "import torch",
        "from torch.onnx import register_custom_op_symbolic",
        "from torch.onnx.symbolic_helper import parse_args",
        code.split("\n\n")[0],  # the page's threshold_symbolic
        register,
        "model, x = torch.nn.Threshold(0.1, 20.0).eval(), torch.randn(1, 3, 10, 10)",
        'torch.onnx.export(model, (x,), "plain.onnx", dynamo=False)',
    ])
    proc = subprocess.run([sys.executable, "-c", export], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    opsets = {o.domain: o.version for o in onnx.load(tmp_path / "plain.onnx").opset_import}
    assert opsets == {"": torch.onnx._constants.ONNX_DEFAULT_OPSET, "rknn_cst": 1}
    if tuple(int(p) for p in torch.__version__.split(".")[:2]) < (2, 9):
        pytest.skip(f"torch {torch.__version__} writes opset {opsets['']} by default, not 20")
    assert opsets[""] == 20
    output = run_in_rknn_environment("""
from rknn.api import RKNN
rknn = RKNN()
rknn.config(target_platform="rk3588")
try:
    rknn.load_onnx(model="plain.onnx")
except ValueError:
    print("load_onnx raised")
""", tmp_path)
    assert "load_onnx raised" in output and "Unsupport onnx opset 20, need <= 19!" in output


REGISTRATIONS = """
from rknn.api import RKNN

class Relu:
    op_type = "Relu"  # a standard ONNX op
    shape_infer = lambda self, node, in_shapes, in_dtypes: (in_shapes.copy(), in_dtypes.copy())
    compute = lambda self, node, inputs: [inputs[0]]
myThreshold = type("myThreshold", (Relu,), {"op_type": "myThreshold"})  # no cst prefix
assert "is recommended to start with 'cst'" in RKNN.reg_custom_op.__doc__
rknn = RKNN()
print("myThreshold returned", rknn.reg_custom_op(myThreshold()))
print("---")
print("Relu returned", rknn.reg_custom_op(Relu()))
"""


def test_reg_custom_op_names_and_its_warning(run, tmp_path):
    """The cst prefix is a recommendation; a standard op_type is refused with a duplicate's warning (steps 5, 8)."""
    before, after = run_in_rknn_environment(REGISTRATIONS, tmp_path).split("---", 1)
    assert "myThreshold returned 0" in before and "is invalid" not in before, before[-3000:]
    assert "Relu returned 0" in after and "The op_type = 'Relu' is invalid, Ignore this call!" in after
    assert "If you only need to overwrite the runtime implementation of the existing ONNX OP" in after


# Step 4: what RKNN hands ONNX Runtime when it folds constants (watched through the session's constructor).
FOLDING = """
import onnx
from onnxruntime.capi import onnxruntime_inference_collection as collection
from rknn.api import RKNN
create = collection.InferenceSession._create_inference_session
def watched(self, *args, **kwargs):
    model = onnx.load_from_string(self._model_bytes)
    print("session for", sorted(o.domain for o in model.opset_import), [n.op_type for n in model.graph.node])
    return create(self, *args, **kwargs)
collection.InferenceSession._create_inference_session = watched
rknn = RKNN()
rknn.config(target_platform="rk3588")
assert rknn.load_onnx(model="threshold.onnx") == 0
try:
    rknn.build(do_quantization=False)
except ValueError:
    print("build raised")
"""


def test_rknn_folds_constants_on_a_copy_without_the_custom_import(run):
    output = run_in_rknn_environment(FOLDING, run.out)
    assert "session for [''] ['cstThreshold']" in output, output[-3000:]
    assert "build raised" in output and "No opset import for domain 'rknn_cst'" in output


@pytest.mark.parametrize("message", REPRODUCED)
def test_each_error_was_reproduced(run, message):
    """Each reproduced error is in steps.json (for ERRORS.md), with its cause, and in the output."""
    steps = json.loads((run.out / "steps.json").read_text(encoding="utf-8"))["steps"]
    recorded = [e for s in steps.values() for e in s.get("reproduced", [])]
    entries = [e for e in recorded if message in e["error"] + "\n" + e["further_down"]]
    assert len(entries) == 1 and entries[0]["cause"], recorded
    assert any(line.strip().startswith("reproduced") and message in line for line in run.output.splitlines())


def test_rknn_log(run, results):
    """RKNN's log lines stay out of the output; step 7's, beyond what test.py asserts of them (and of step 8's)."""
    assert not [line for line in run.output.splitlines() if line.startswith(("I ", "W ", "E ", "D "))]
    assert "Please call rknn_register_custom_ops in the RKNN C API" in results["evidence"]["c_api_warning"]
    assert "Unkown op target: 0" in results["evidence"]["deform_conv_unknown_target"]


@pytest.mark.parametrize("setting", [None, "/nonexistent"])
def test_without_the_rknn_environment_steps_1_to_3_run_then_skip(tmp_path, setting):
    """A checkout without .venv-rknn, or RKNN_PYTHON naming no file: SKIP (77), once, naming the setup command."""
    repository = tmp_path / "repository"
    (repository / NAME).mkdir(parents=True)
    for path in [ROOT / NAME / "test.py", ROOT / NAME / "requirements.txt", *ROOT.glob("*.py")]:  # harness.py, ...
        shutil.copy(path, repository / path.relative_to(ROOT))
    env = {k: v for k, v in CHILD_ENV.items() if k != "RKNN_PYTHON"} | ({"RKNN_PYTHON": setting} if setting else {})
    command = [sys.executable, "test.py", "--out", str(tmp_path / "out")]
    proc = subprocess.run(command, cwd=repository / NAME, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 77, proc.stdout[-3000:] + proc.stderr[-3000:]
    venv, requirements = repository / ".venv-rknn", repository / NAME / "requirements.txt"
    setup = f"python3 -m venv {venv} && {venv / 'bin' / 'pip'} install -r {requirements}"
    why = f"RKNN_PYTHON={setting} is not a file: unset it, or create the environment with" if setting else (
        "no RKNN-Toolkit2 environment; create it with")
    last = proc.stdout.strip().splitlines()[-1]
    assert last == f"SKIP: steps 4-9: {why}: {setup}", last
    assert [line for line in proc.stdout.splitlines() if line.startswith("SKIP: ")] == [last]  # the reason, once
    assert (tmp_path / "out" / "conv_threshold_dynamo.onnx").is_file()  # steps 1-3 still ran
    steps = json.loads((tmp_path / "out" / "steps.json").read_text(encoding="utf-8"))["steps"]
    assert [steps[str(n)]["status"] for n in range(1, 10)] == ["runs"] * 3 + ["skipped"] * 6


# Other seeds than the README's 0 (an audit measured seeds 0-20: seed 6 came closest to deform_conv's allowance,
# seed 4 gave the largest absolute difference); about 20-30 s each.
@pytest.mark.parametrize("seed", [1, 4, 6])
def test_tolerances_hold_at_other_seeds(tmp_path, seed):
    command = [sys.executable, "test.py", "--seed", str(seed), "--out", str(out := tmp_path / "out")]
    proc = subprocess.run(command, cwd=ROOT / NAME, env=CHILD_ENV, capture_output=True, text=True, timeout=900)
    if proc.returncode == 77:
        skip_unless_ci(f"{NAME} skipped itself: {proc.stdout.strip().splitlines()[-1]}")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    torch.manual_seed(seed)  # the seed took effect: step 1's first draw from it is the saved input
    np.testing.assert_array_equal(np.load(out / "threshold_input_0.npy"), torch.randn(1, 3, 10, 10).numpy())
    check_comparisons(out, json.loads((out / "rknn_results.json").read_text(encoding="utf-8"))["comparisons"])


def test_steps_json_covers_steps_1_to_9(run, results):
    """The pinned torch: every step runs; the second half's statuses are folded into steps.json."""
    summary = json.loads((run.out / "steps.json").read_text(encoding="utf-8"))
    assert summary["torch"] == torch.__version__.split("+")[0]  # the pinned stack's, which the suite runs on
    assert {n: s["status"] for n, s in summary["steps"].items()} == {str(n): "runs" for n in range(1, 10)}
    assert {n: s["status"] for n, s in results["steps"].items()} == {str(n): "runs" for n in range(4, 10)}
    assert results["skipped"] == []


def test_second_half_without_step_2s_models(run, tmp_path):
    """As on torch 2.4 (step 2 needs 2.6): the second half converts what exists, says what it left out, passes."""
    shutil.copytree(run.out, out := tmp_path / "out")
    gone = KEPT[::2] + HALF_KEPT[::2] + [f"failures/{name}.onnx" for name in (
        "conv_threshold_opset20", "threshold_custom_domain_first", "threshold_float16_dynamo")]
    for name in gone:
        (out / name).unlink()
    summary = json.loads((out / "steps.json").read_text(encoding="utf-8"))
    step2 = {"2": {"status": "needs torch >= 2.6", "why": "no custom_translation_table"}}
    summary.update(torch="2.4.1", steps={n: s for n, s in summary["steps"].items() if int(n) < 4} | step2)
    (out / "steps.json").write_text(json.dumps(summary), encoding="utf-8")
    (out / "rknn_results.json").unlink()  # the second half writes it again
    command = [str(rknn_python()), "test.py", "--rknn-half", "--out", str(out)]
    proc = subprocess.run(command, cwd=ROOT / NAME, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads((out / "rknn_results.json").read_text(encoding="utf-8"))
    assert sorted(results["comparisons"]) == sorted(KEPT[1::2])
    statuses = {n: s["status"] for n, s in results["steps"].items()}
    assert statuses == {"4": "runs", "5": "runs", "6": "differs", "7": "runs", "8": "differs", "9": "differs"}
    assert [line.split(":")[0] for line in results["skipped"]] == ["step 6", "step 8", "step 9"]
    assert list(results["evidence"]["compute_dtypes"]) == ["threshold.onnx", "threshold_float16.onnx"]
    step6 = "converted the four dynamo=False models only: exported on torch 2.4.1, where step 2"
    assert step6 in proc.stdout, proc.stdout[-3000:]
    assert "Unsupport onnx opset 20" not in proc.stdout


# ---- cstThreshold: PyTorch's rule (x <= threshold gives value, else x; NaN stays NaN), where randn never goes ----

THRESHOLD_CLASS = """
import importlib.util, sys
import numpy as np
import onnx
sys.argv = ["test.py", "--rknn-half"]  # test.py imports RKNN's half with this flag
spec = importlib.util.spec_from_file_location("deploy_rknn_example", TEST_PY)
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)
registry = example.RKNN()
assert registry.reg_custom_op(example.cstThreshold()) == 0
registry.release()
rknn = example.to_rknn("threshold.onnx")  # step 6's: build in float16, the simulator
(out,) = rknn.inference(inputs=[np.load("edges.npy")], data_format="nchw")
rknn.release()
np.save("simulator.npy", out)
for threshold in (0.1, 0.3):  # the class on its own, on float16: the simulator hands it float32 only
    node = onnx.helper.make_node("cstThreshold", ["x"], ["y"], domain="rknn_cst", threshold=threshold, value=20.0)
    (y,) = example.cstThreshold().compute(node, [np.load(f"edges16_{threshold}.npy")])
    np.save(f"class16_{threshold}.npy", y)
"""


def threshold_edges(dtype, threshold: float = 0.1) -> np.ndarray:
    """A [1, 3, 10, 10] DTYPE array: NaN, +-inf, +-0, ordinary values, values around THRESHOLD (float32: it, its
    float32 neighbours, and float16's five values around it as float32; float16: its five values around it), then
    randn."""
    t = np.float32(threshold)
    bits = int(np.array([t]).astype(np.float16).view(np.uint16)[0])
    near = list(np.arange(bits - 2, bits + 3, dtype=np.uint16).view(np.float16).astype(np.float32))
    if dtype == np.float32:
        near += [t, np.nextafter(t, np.float32(np.inf)), np.nextafter(t, np.float32(-np.inf)), np.float32(0.100004)]
    values = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, -1.5, 3.25, 20.0, *near], np.float32)
    x = np.random.default_rng(0).standard_normal((1, 3, 10, 10)).astype(np.float32)
    x.flat[: len(values)] = values
    return x.astype(dtype)


def test_cst_threshold_class_follows_torch_in_the_simulator(run, tmp_path):
    """Step 5's class in RKNN's simulator (threshold.onnx built in float16): its outputs are PyTorch's rounded to
    float16, bit for bit (NaN, +-inf, 0.1 and its neighbours included). Called directly on float16 arrays, it
    compares in float32 as PyTorch's CPU kernel does (at 0.3 float16's nearest value is above it)."""
    shutil.copy(run.out / "threshold.onnx", tmp_path)
    x = threshold_edges(np.float32)
    np.save(tmp_path / "edges.npy", x)
    for threshold in (0.1, 0.3):
        np.save(tmp_path / f"edges16_{threshold}.npy", threshold_edges(np.float16, threshold))
    run_in_rknn_environment(f"TEST_PY = {str(ROOT / NAME / 'test.py')!r}\n" + THRESHOLD_CLASS, tmp_path)
    simulator = np.load(tmp_path / "simulator.npy")
    expected = torch.nn.Threshold(0.1, 20.0)(torch.from_numpy(x)).numpy()
    assert simulator.dtype == np.float32 and simulator.shape == expected.shape
    np.testing.assert_array_equal(  # RKNN rounds the class's float32 outputs to float16 (step 6)
        simulator, expected.astype(np.float16).astype(np.float32), err_msg="cstThreshold in the simulator"
    )
    for threshold in (0.1, 0.3):
        x16 = np.load(tmp_path / f"edges16_{threshold}.npy")
        actual = np.load(tmp_path / f"class16_{threshold}.npy")
        assert actual.dtype == np.float16, actual.dtype
        expected = torch.nn.Threshold(threshold, 20.0)(torch.from_numpy(x16)).numpy()
        np.testing.assert_array_equal(actual, expected, err_msg=f"cstThreshold on float16, threshold {threshold}")


# ---- Steps 2, 3 and 9: the float16 and bfloat16 models ----


@pytest.fixture(scope="module")
def example():
    return load_example(NAME)  # importing it registers page_helpers' rknn_cst kernels with onnxruntime-extensions


def as_bits(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.int16).numpy().view(np.uint16)


def half_inputs(dtype: str, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x: NaN, +-inf, +-0, the largest finite, the five values of DTYPE around 0.1, then randn (SEED); y: randn, with
    y = x*0.5 exactly and one step off it at a few places (cancellation), and an infinity against x's."""
    torch_dtype = getattr(torch, dtype)
    bits = int(as_bits(torch.tensor([0.1], dtype=torch_dtype))[0])
    near = torch.from_numpy(np.arange(bits - 2, bits + 3, dtype=np.uint16).view(np.int16)).view(torch_dtype)
    top = torch.finfo(torch_dtype).max
    edges = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, top, -top, 20.0, -1.5, 3.25])
    rng = np.random.default_rng(1000 + seed)  # not test.py's inputs (torch's seed 0)
    x = torch.from_numpy(rng.standard_normal((1, 3, 10, 10)).astype(np.float32)).to(torch_dtype)
    y = torch.from_numpy(rng.standard_normal((1, 3, 10, 10)).astype(np.float32)).to(torch_dtype)
    x.view(-1)[:15] = torch.cat([edges.to(torch_dtype), near])
    y.view(-1)[20:25] = x.view(-1)[20:25] * 0.5  # x*0.5 - y == 0
    y.view(-1)[25:30] = torch.nextafter(x.view(-1)[25:30].float() * 0.5, torch.tensor(9.0)).to(torch_dtype)
    y.view(-1)[1] = float("inf")  # inf*0.5 - inf: NaN on both sides
    return x, y


def run_half(path, inputs: list[torch.Tensor], dtype: str) -> list[np.ndarray]:
    """PATH in ONNX Runtime with page_helpers' float32 kernels: raw 16-bit inputs and preallocated outputs through
    ONNX Runtime's own OrtValue API (not test.py's DLPack helper), read back as NumPy float16 or ml_dtypes.bfloat16."""
    from onnxruntime_extensions import get_library_path

    options = ort.SessionOptions()
    options.register_custom_ops_library(get_library_path())
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    assert {a.type for a in session.get_inputs() + session.get_outputs()} == {f"tensor({dtype})"}
    as_value, binding = ort.OrtValue.ortvalue_from_numpy_with_onnx_type, session.io_binding()
    for arg, x in zip(session.get_inputs(), inputs, strict=True):
        binding.bind_ortvalue_input(arg.name, as_value(as_bits(x), HALF[dtype]))
    outputs = [np.zeros(tuple(inputs[0].shape), np.uint16) for _ in session.get_outputs()]
    for arg, out in zip(session.get_outputs(), outputs, strict=True):
        binding.bind_ortvalue_output(arg.name, as_value(out, HALF[dtype]))
    session.run_with_iobinding(binding)
    return [out.view(np.float16 if dtype == "float16" else ml_dtypes.bfloat16) for out in outputs]


def assert_same_bits(actual: np.ndarray, expected: torch.Tensor, what: str):
    """Equal bits (the page's tolerance: zero), NaN at the same places whatever its payload."""
    nan = expected.isnan().numpy()
    np.testing.assert_array_equal(np.isnan(actual.astype(np.float32)), nan, err_msg=f"{what}: NaN")
    np.testing.assert_array_equal(np.where(nan, 0, actual.view(np.uint16)), np.where(nan, 0, as_bits(expected)),
                                  err_msg=what)


@pytest.mark.parametrize("name", HALF_KEPT)
def test_half_precision_models_equal_torch_in_onnxruntime(run, example, name):
    """Steps 2 and 3's float16 and bfloat16 files, float32 nodes between Casts, on inputs test.py never used (NaN,
    infinities, the largest values, 0.1's neighbours in that dtype, cancellation, three seeds): PyTorch's bits."""
    dtype = "bfloat16" if "bfloat16" in name else "float16"
    model = run.model(name)
    (node,) = [n for n in model.graph.node if n.domain == "rknn_cst"]
    assert model.graph.node[0].op_type == "Cast" and model.graph.node[-1].op_type in ("Cast", "CastLike")
    attributes = {a.name: round(onnx.helper.get_attribute_value(a), 6) for a in node.attribute}
    for seed in range(3):
        x, y = half_inputs(dtype, seed)
        if name.startswith("threshold"):
            assert attributes == {"threshold": 0.1, "value": 20.0}
            inputs, expected = [x], [torch.nn.Threshold(0.1, 20.0)(x)]
        else:
            assert attributes == {"alpha": 0.5}
            inputs, expected = [x, y], [x * 0.5 - y, y * 0.5 - x]
        actual = run_half(run.out / name, inputs, dtype)
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_same_bits(a, e, f"{name} output {i}, seed {seed}")


HALF_IN_RKNN = """
import importlib.util, json, sys
import numpy as np
sys.argv = ["test.py", "--rknn-half"]  # test.py imports RKNN's half with this flag
spec = importlib.util.spec_from_file_location("deploy_rknn_example", TEST_PY)
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)
seen = {"compute": [], "shape_infer": []}

class cstThreshold(example.cstThreshold):  # step 5's class, recording what RKNN hands it
    def shape_infer(self, node, in_shapes, in_dtypes):
        seen["shape_infer"] += [str(np.dtype(d)) for d in in_dtypes]
        return super().shape_infer(node, in_shapes, in_dtypes)

    def compute(self, node, inputs):
        seen["compute"].append(inputs[0].dtype.name)
        return super().compute(node, inputs)

registry = example.RKNN()
assert registry.reg_custom_op(cstThreshold()) == 0
registry.release()
found = {}
for path in PATHS:
    seen["compute"].clear(), seen["shape_infer"].clear()
    rknn = example.to_rknn(path)
    x = np.load("x32.npy" if path == "threshold.onnx" else "x16.npy")
    (out,) = rknn.inference(inputs=[x], data_format="nchw")
    rknn.release()
    np.save(path.replace("/", "_") + ".out.npy", out)
    found[path] = {kind: sorted(set(dtypes)) for kind, dtypes in seen.items()} | {"out": out.dtype.name}
print("FOUND " + json.dumps(found))
"""


def test_rknn_hands_compute_float32_from_float16_models(run, tmp_path):
    """Step 9, beyond one input: RKNN converts a float16 model to float32 at load_onnx, with or without the Casts;
    step 5's class gets float32 (shape_infer and compute) and the simulator's output is float32, equal to PyTorch's
    float16 Threshold bit for bit on float16 inputs: NaN, 0.1's neighbours, the largest finite values."""
    paths = ["threshold.onnx", "threshold_float16.onnx", "threshold_float16_dynamo.onnx",
             "failures/threshold_float16_dynamo.onnx"]
    for path in paths:
        (tmp_path / path).parent.mkdir(exist_ok=True)
        shutil.copy(run.out / path, tmp_path / path)
    x16, _ = half_inputs("float16", 7)
    x16.view(-1)[1:3] = 1.0  # no infinities: test_cst_threshold_class_follows_torch_in_the_simulator has them
    np.save(tmp_path / "x16.npy", x16.numpy())
    np.save(tmp_path / "x32.npy", x16.float().numpy())
    code = f"TEST_PY = {str(ROOT / NAME / 'test.py')!r}\nPATHS = {paths!r}\n" + HALF_IN_RKNN
    output = run_in_rknn_environment(code, tmp_path)
    found = json.loads(output.split("FOUND ", 1)[1].splitlines()[0])
    assert found == {p: {"compute": ["float32"], "shape_infer": ["float32"], "out": "float32"} for p in paths}, found
    assert output.count("have been modified to float32!") == 3, output[-3000:]
    expected = torch.nn.Threshold(0.1, 20.0)(x16)
    for path in paths:
        actual = np.load(tmp_path / (path.replace("/", "_") + ".out.npy"))
        assert_same_bits(actual.astype(np.float16), expected, f"{path} in the simulator")
