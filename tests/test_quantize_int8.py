"""What quantize_int8/test.py writes, checked independently; its checks made to fail on purpose."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from conftest import CHILD_ENV, ROOT, load_example, passed, rknn_python

NAME = "quantize_int8"
FLOAT_NODES = ["Conv", "rknn_cst.cstThreshold", "Conv", "Conv", "rknn_cst.cstDualResidual", "Concat", "Conv"]


def skip_unless_ci(reason: str):
    if os.environ.get("CI") == "true":  # CI creates the RKNN environment and has a compiler
        pytest.fail(f"{NAME} skipped itself in CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def run(example_run):
    try:
        return passed(example_run(NAME))
    except pytest.skip.Exception as skipped:
        skip_unless_ci(str(skipped))


@pytest.fixture(scope="module")
def example():
    return load_example(NAME)


def nodes(model) -> list[str]:
    return [f"{n.domain}.{n.op_type}" if n.domain else n.op_type for n in model.graph.node]


def session(path):
    """An ONNX Runtime session with the stand-in kernels (page_helpers, registered once)."""
    import page_helpers

    return ort.InferenceSession(str(path), page_helpers.ortx_options(), providers=["CPUExecutionProvider"])


def fresh_inputs(seed: int, count: int = 8) -> list[np.ndarray]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(1, 3, 32, 32, generator=generator).numpy() for _ in range(count)]


def test_every_kept_model_passes_the_full_checker(run):
    for name in ("small_cnn.onnx", "small_cnn_qdq.onnx", "small_cnn_qdq_island.onnx"):
        onnx.checker.check_model(run.model(name), full_check=True)
    assert nodes(run.model("small_cnn.onnx")) == FLOAT_NODES
    for path in ("small_cnn_int8.xml", "small_cnn_int8.bin", "small_cnn_int8.rknn", "dataset.txt"):
        assert (run.out / path).is_file() and (run.out / path).stat().st_size > 0, path


def test_the_qdq_file_keeps_each_custom_node_float_between_dq_and_q(run):
    graph = run.model("small_cnn_qdq.onnx").graph
    for node in [n for n in graph.node if n.domain == "rknn_cst"]:
        before = {n.op_type for n in graph.node if set(n.output) & set(node.input)}
        after = {n.op_type for n in graph.node if set(n.input) & set(node.output)}
        assert (before, after) == ({"DequantizeLinear"}, {"QuantizeLinear"}), node.op_type
    assert nodes(run.model("small_cnn_qdq.onnx")).count("QuantizeLinear") == 9


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_int8_qdq_model_agrees_with_float_on_fresh_inputs(run, example, seed):
    """Independently of test.py's run: the int8 file in ONNX Runtime (default optimizations) against
    the float file, on inputs drawn from other seeds, within the README's bound; and the file run as
    written against PyTorch's roundings, within one output step."""
    torch.manual_seed(0)
    model = example.SmallCNN().eval()
    activations, weights = example.grids(str(run.out / "small_cnn_qdq.onnx"))
    int8, floating = session(run.out / "small_cnn_qdq.onnx"), session(run.out / "small_cnn.onnx")
    options = __import__("page_helpers").ortx_options()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    as_written = ort.InferenceSession(str(run.out / "small_cnn_qdq.onnx"), options, providers=["CPUExecutionProvider"])
    step = activations["y"][0]
    for x in fresh_inputs(seed):
        expected, bound, float_out = example.int8_in_pytorch(model, torch.from_numpy(x), activations, weights)
        np.testing.assert_allclose(floating.run(None, {"x": x})[0], float_out, rtol=1e-5, atol=1e-5)
        assert (np.abs(int8.run(None, {"x": x})[0] - float_out) < bound).all()
        steps = np.abs(as_written.run(None, {"x": x})[0] - expected) / step
        assert steps.max() < 2.001 and np.mean(steps > 0.001) < 0.02  # the README's allowance for ties


def test_a_wrong_kernel_fails_the_as_written_check(run, example, tmp_path):
    """The QDQ file with cstThreshold's value changed (as a kernel that computes max(x, 0) would):
    its output fails both parts of step 5's as-written check."""
    torch.manual_seed(0)
    model = example.SmallCNN().eval()
    activations, weights = example.grids(str(run.out / "small_cnn_qdq.onnx"))
    wrong = run.model("small_cnn_qdq.onnx")
    (node,) = [n for n in wrong.graph.node if n.op_type == "cstThreshold"]
    for attribute in node.attribute:
        if attribute.name == "value":
            attribute.f = 0.0
    onnx.save(wrong, tmp_path / "wrong.onnx")
    options = __import__("page_helpers").ortx_options()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    as_written = ort.InferenceSession(str(tmp_path / "wrong.onnx"), options, providers=["CPUExecutionProvider"])
    x = fresh_inputs(0, 1)[0]
    expected, _, _ = example.int8_in_pytorch(model, torch.from_numpy(x), activations, weights)
    steps = np.abs(as_written.run(None, {"x": x})[0] - expected) / activations["y"][0]
    assert steps.max() > 2.001 and np.mean(steps > 0.001) > 0.02, (steps.max(), np.mean(steps > 0.001))


def test_the_ort_errors_reproduced_and_recorded(run):
    steps = json.loads((run.out / "steps.json").read_text(encoding="utf-8"))["steps"]
    errors = {n: [e["error"] for e in s.get("reproduced", [])] for n, s in steps.items()}
    assert any("is not a registered function/op" in e for e in errors["2"])
    assert any("No opset import for domain rknn_cst" in e for e in errors["4"])
    assert all(steps[str(n)]["status"] == "runs" for n in range(1, 12)), steps


@pytest.mark.parametrize("seed", [1, 4])
def test_other_seeds_pass(example_run, tmp_path, seed):
    """test.py --seed N: the int8 models (ONNX Runtime, OpenVINO, RKNN) within their bounds on other inputs."""
    proc = subprocess.run([sys.executable, "test.py", "--out", str(tmp_path), "--seed", str(seed)],
                          cwd=ROOT / NAME, capture_output=True, text=True, env=CHILD_ENV, timeout=900)
    if proc.returncode == 77:
        skip_unless_ci(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert f"--seed {seed}: the 8 fresh inputs drawn from that seed" in proc.stdout


WRONG_OPENVINO = """
import sys
sys.argv = ["test.py"]
sys.path.insert(0, {tests!r})
from conftest import load_example
example = load_example("quantize_int8")
original = example.deploy_openvino_cpp
def wrong():
    sources = original()
    old = "? rounded<T>(value_) : x[i]"  # cstThreshold: value where x <= threshold
    assert old in sources["THRESHOLD_CPP"]
    sources["THRESHOLD_CPP"] = sources["THRESHOLD_CPP"].replace(old, "? T(0.0f) : x[i]")
    return sources
example.deploy_openvino_cpp = wrong
example.start_rknn_half = lambda out: None  # the OpenVINO steps only
sys.exit(example.main(["--out", {out!r}]))
"""


def test_a_wrong_openvino_kernel_fails_step_8(run, tmp_path):
    """The C++ cstThreshold returning 0 instead of `value`: step 8's float check fails."""
    script = WRONG_OPENVINO.format(tests=str(ROOT / "tests"), out=str(tmp_path / "out"))
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT / NAME, capture_output=True, text=True,
                          env=CHILD_ENV, timeout=900)
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "== 8. The OpenVINO IR" in proc.stdout and "FAIL: " in proc.stdout.split("== 8.", 1)[1], proc.stdout[-3000:]


WRONG_RKNN = """
import sys
sys.argv = ["test.py", "--rknn-half", "--out", {out!r}]
import importlib.util
spec = importlib.util.spec_from_file_location("quantize_int8_example", {test_py!r})
example = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = example
spec.loader.exec_module(example)
import numpy as np
MODE = {mode!r}
def compute(self, node, inputs):
    x, y = inputs
    return [x * 0.4 - y, y * 0.4 - x]  # alpha 0.4, not the node's 0.5
def zeros(self, node, inputs):
    self.received.append(inputs[0].copy())
    return [np.zeros_like(inputs[0])]
if MODE == "alpha":
    example.cstDualResidual.compute = compute
else:
    example.cstThreshold.compute = zeros
sys.exit(example.run_rknn_half(sys.argv[1:]))
"""


@pytest.mark.parametrize("mode", ["alpha", "zeros"])
def test_a_wrong_rknn_kernel_fails_step_11(run, tmp_path, mode):
    """RKNN's half again, on a copy of the run's files, with a wrong Python kernel: step 11 fails."""
    python = rknn_python()
    if python is None:
        skip_unless_ci("no RKNN environment")
    out = tmp_path / "out"
    shutil.copytree(run.out, out)
    script = WRONG_RKNN.format(out=str(out), test_py=str(ROOT / NAME / "test.py"), mode=mode)
    proc = subprocess.run([str(python), "-c", script], cwd=ROOT / NAME, capture_output=True, text=True,
                          env=CHILD_ENV, timeout=900)
    assert proc.returncode == 1, proc.stdout[-3000:]
    tail = proc.stdout.split("== 11.", 1)[1]
    assert "FAIL: " in tail, proc.stdout[-3000:]
    steps = json.loads((out / "rknn_results.json").read_text(encoding="utf-8"))["steps"]
    assert steps["10"]["status"] == "runs" and steps["11"]["status"] == "fails", steps
