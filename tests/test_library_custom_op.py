"""What library_custom_op/test.py writes (read back from its --out), its tolerances over many
inputs, and the README's claims that one run does not show: the exporter's `always_classified`
log, the local schema (unregistered, and needed), what the checker cannot see in a custom node,
the test copy of step 5 with several nodes, and that the TorchScript-based exporter deletes a
writing op before it looks for a symbolic."""

from __future__ import annotations

import importlib.util
import io
import json
import re
import subprocess
import sys
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import onnxscript
import pytest
import torch
from conftest import CHILD_ENV, ROOT, passed
from onnx import AttributeProto

NAME = "library_custom_op"
SEEDS = range(20)
RTOL, ATOL = 1e-5, 1e-6  # the README's tolerance, for every model
CUSTOM_NODE_MODELS = ["blur1d_dynamo.onnx", "blur1d_torchscript.onnx"]
STANDARD_MODELS = ["blur1d_standard_dynamo.onnx", "blur1d_standard_torchscript.onnx"]


@pytest.fixture(scope="module")
def run(example_run):
    return passed(example_run(NAME))


@pytest.fixture(scope="module")
def example():
    """The folder's test.py as a module: it runs nothing at import; it defines the ops."""
    spec = importlib.util.spec_from_file_location(f"{NAME}_example", ROOT / NAME / "test.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def with_fake_kernel(example):
    """Step 2's fake kernel, registered in this process."""

    @example.blur1d.register_fake
    def _(x, weights, dilation, padding):
        return torch.empty_like(x)

    return example


def inputs(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [
        rng.standard_normal((2, 3, 16)).astype(np.float32),
        (rng.standard_normal((2, 3, 16)) * 1000).astype(np.float32),  # where the rtol matters
    ]


# ---- The models test.py kept ----


@pytest.mark.parametrize("filename", CUSTOM_NODE_MODELS)
def test_one_custom_node_with_typed_attributes(run, filename):
    model = run.model(filename)
    (node,) = model.graph.node
    assert (node.domain, node.op_type, len(node.input)) == ("demo", "Blur1d", 1)
    kinds = {a.name: a.type for a in node.attribute}
    assert kinds == {
        "weights": AttributeProto.FLOATS,
        "dilation": AttributeProto.INT,
        "padding": AttributeProto.STRING,
    }
    values = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert values == {"weights": [0.25, 0.5, 0.25], "dilation": 2, "padding": b"reflect"}
    assert {o.domain: o.version for o in model.opset_import}["demo"] == 1


@pytest.mark.parametrize("filename", STANDARD_MODELS)
def test_standard_models_use_pad_and_conv(run, filename):
    ops = [n.op_type for n in run.model(filename).graph.node]
    assert "Pad" in ops and "Conv" in ops
    assert all(n.domain == "" for n in run.model(filename).graph.node)


def test_dynamo_standard_model_folded_its_constants(run):
    """README step 4: Reshape Pad Conv Reshape, the rest in initializers."""
    model = run.model("blur1d_standard_dynamo.onnx")
    assert [n.op_type for n in model.graph.node] == ["Reshape", "Pad", "Conv", "Reshape"]
    initializers = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    kernels = [v for v in initializers.values() if v.shape == (1, 1, 3)]
    assert len(kernels) == 1 and kernels[0].ravel().tolist() == [0.25, 0.5, 0.25]


def test_writing_op_gives_a_model_without_input(run):
    """README step 6, dynamo=False: no input, one Constant."""
    model = run.model("failures/blur1d_into_torchscript.onnx")
    assert list(model.graph.input) == []
    assert [n.op_type for n in model.graph.node] == ["Constant"]


@pytest.mark.parametrize("filename", STANDARD_MODELS)
def test_standard_models_match_torch_exactly_over_seeds(run, example, filename):
    session = ort.InferenceSession(str(run.out / filename), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    largest = 0.0
    for x in (x for seed in SEEDS for x in inputs(seed)):
        expected = example.Blur()(torch.from_numpy(x)).numpy()
        (actual,) = session.run(None, {name: x})
        np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL, err_msg=filename)
        largest = max(largest, float(np.max(np.abs(actual.astype(np.float64) - expected))))
    assert largest == 0.0, f"{filename}: the README says exact with its taps, got {largest:.1e}"


KERNEL_CHILD = """
import importlib.util, json, sys
import numpy as np, onnx, onnxruntime as ort, torch
from onnxruntime_extensions import PyCustomOpDef, get_library_path, onnx_op

spec = importlib.util.spec_from_file_location("example", {test_py!r})
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)
ort.set_default_logger_severity(4)


@onnx_op(
    op_type="Blur1d",
    inputs=[PyCustomOpDef.dt_float, PyCustomOpDef.dt_float],
    outputs=[PyCustomOpDef.dt_float],
    attrs={{"dilation": PyCustomOpDef.dt_int64, "padding": PyCustomOpDef.dt_string}},
)
def kernel(x, weights, dilation, padding):
    return example.blur1d_numpy(x, weights.tolist(), dilation, padding)


options = ort.SessionOptions()
options.register_custom_ops_library(get_library_path())
result = {{}}
for path in {paths!r}:
    test_copy = example.lists_as_inputs(onnx.load(path))
    session = ort.InferenceSession(
        test_copy.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    largest = 0.0
    for x in {inputs!r}:
        x = np.array(x, dtype=np.float32)
        expected = example.Blur()(torch.from_numpy(x)).numpy()
        (actual,) = session.run(None, {{session.get_inputs()[0].name: x}})
        np.testing.assert_allclose(actual, expected, rtol={rtol}, atol={atol}, err_msg=path)
        largest = max(largest, float(np.max(np.abs(actual.astype(np.float64) - expected))))
    result[path] = largest

# Several nodes, each with its own taps: each gets its own constant input.
weights = [[0.25, 0.5, 0.25], [1.0, -2.0, 1.0]]
nodes = [
    onnx.helper.make_node(
        "Blur1d", [src], [dst], domain="demo", weights=w, dilation=d, padding=p
    )
    for (src, dst), w, d, p in zip(
        [("x", "h"), ("h", "y")], weights, [1, 3], ["zeros", "replicate"]
    )
]
value = lambda name: onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, [2, 16])
graph = onnx.helper.make_graph(nodes, "g", [value("x")], [value("y")])
opsets = [onnx.helper.make_opsetid("demo", 1)]
model = onnx.helper.make_model(graph, opset_imports=opsets, ir_version=10)
test_copy = example.lists_as_inputs(model)
session = ort.InferenceSession(
    test_copy.SerializeToString(), options, providers=["CPUExecutionProvider"]
)
x = np.random.default_rng(0).standard_normal((2, 16)).astype(np.float32)
(actual,) = session.run(None, {{"x": x}})
hidden = example.blur1d(torch.from_numpy(x), weights[0], 1, "zeros")
expected = example.blur1d(hidden, weights[1], 3, "replicate")
np.testing.assert_allclose(actual, expected.numpy(), rtol={rtol}, atol={atol})
result["two nodes"] = [list(n.input) for n in test_copy.graph.node]
print(json.dumps(result))
"""


def test_custom_node_models_match_torch_over_seeds_with_the_python_kernel(run):
    """Step 5's way, over many inputs, in a child process (an @onnx_op kernel is per process)."""
    pytest.importorskip("onnxruntime_extensions")
    script = KERNEL_CHILD.format(
        test_py=str(ROOT / NAME / "test.py"),
        paths=[str(run.out / name) for name in CUSTOM_NODE_MODELS],
        inputs=[x.tolist() for seed in SEEDS for x in inputs(seed)],
        rtol=RTOL,
        atol=ATOL,
    )
    child = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600, env=CHILD_ENV
    )
    assert child.returncode == 0, child.stderr[-3000:]
    result = json.loads(child.stdout.strip().splitlines()[-1])
    for name in CUSTOM_NODE_MODELS:
        assert result[str(run.out / name)] == 0.0, result  # exact with the page's taps
    first, second = result["two nodes"]
    assert len(first) == 2 and len(second) == 2 and first[1] != second[1]  # one constant each


def test_random_taps_differ_by_a_few_ulps_and_stay_in_tolerance(example):
    """README Notes: NumPy against PyTorch with random taps, up to 4.8e-7 at unit scale."""
    largest = 0.0
    for seed in range(200):
        rng = np.random.default_rng(seed)
        taps = rng.uniform(-1, 1, int(rng.integers(1, 4)) * 2 + 1).tolist()
        dilation, padding = int(rng.integers(1, 3)), ["zeros", "replicate", "reflect"][seed % 3]
        x = rng.standard_normal((2, 3, 16)).astype(np.float32)
        expected = example.blur1d(torch.from_numpy(x), taps, dilation, padding).numpy()
        actual = example.blur1d_numpy(x, taps, dilation, padding)
        np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL)
        largest = max(largest, float(np.max(np.abs(actual.astype(np.float64) - expected))))
    assert 0.0 < largest <= 5e-7, largest


# ---- The README's claims about the libraries ----


def test_always_classified_is_the_placeholder_for_every_torch_runtime_error():
    """Step 1's details: strict=True wraps the error in TorchRuntimeError, always classified, and
    no exportdb example bears the placeholder name."""
    from torch._dynamo.exc import TorchRuntimeError
    from torch._export.db.logging import exportdb_error_message, get_class_if_classified_error

    assert get_class_if_classified_error(TorchRuntimeError("any")) == "always_classified"
    assert get_class_if_classified_error(RuntimeError("plain")) is None  # strict=False: no log
    assert exportdb_error_message("always_classified") == "always_classified is unsupported."


def op_without_schema():
    """An Op built without a schema."""
    return onnxscript.values.Op(onnxscript.values.Opset("demo", 1), "Blur1d")


def op_from_the_opset():
    """The op looked up by name on an Opset, which asks onnx.defs for its schema when called."""

    def call(x, **attributes):
        return onnxscript.values.Opset("demo", 1).Blur1d(x, **attributes)

    return call


@pytest.mark.parametrize(
    "make_call, expected",
    [
        (op_without_schema, "ValueError: OpSchema not found for op 'Blur1d'"),
        (
            op_from_the_opset,
            "SchemaError: No schema registered for 'Blur1d' version '1' and domain 'demo'!",
        ),
    ],
    ids=["Op-without-schema", "Opset-attribute"],
)
def test_the_local_schema_is_not_registered_and_is_needed(with_fake_kernel, make_call, expected):
    """Step 2: onnx.defs knows no demo::Blur1d, and without the local schema no node is written:
    an Op without one (ValueError), or the op taken from an Opset by name (SchemaError)."""
    example = with_fake_kernel
    assert not onnx.defs.has("Blur1d", "demo")
    call = make_call()

    def translation(x, weights, dilation, padding):
        return call(x, weights=weights, dilation=dilation, padding=padding)

    table = {torch.ops.demo.blur1d.default: translation}
    with pytest.raises(Exception) as caught:
        torch.onnx.export(
            example.Blur().eval(),
            (torch.randn(2, 3, 16),),
            dynamo=True,
            verbose=False,
            custom_translation_table=table,
        )
    chain, error = [], caught.value
    while error is not None:
        chain.append(f"{type(error).__name__}: {error}")
        error = error.__cause__
    assert any(expected in text for text in chain), chain
    assert not onnx.defs.has("Blur1d", "demo")


def test_without_a_translation_the_converter_finds_no_function(with_fake_kernel):
    """Step 2: the fake kernel gets the export past torch.export (step 1/3); the converter (step
    3/3) has no ONNX function for the op."""
    with pytest.raises(Exception) as caught:
        torch.onnx.export(
            with_fake_kernel.Blur().eval(), (torch.randn(2, 3, 16),), dynamo=True, verbose=False
        )
    chain, error = [], caught.value
    while error is not None:
        chain.append(re.sub(r"\x1b\[[0-9;]*m", "", f"{type(error).__name__}: {error}"))
        error = error.__cause__
    assert "This is step 3/3" in chain[0], chain[0]
    assert any(
        "DispatchError: No ONNX function found for <OpOverload(op='demo.blur1d', "
        "overload='default')>" in text
        for text in chain
    ), chain


def test_the_checker_does_not_check_a_custom_nodes_attributes(run):
    """Step 2: ONNX has no schema for demo, so a wrongly typed attribute passes the full check."""
    model = run.model("blur1d_dynamo.onnx")
    (node,) = model.graph.node
    (dilation,) = [a for a in node.attribute if a.name == "dilation"]
    node.attribute.remove(dilation)
    node.attribute.append(onnx.helper.make_attribute("dilation", 2.5))  # FLOAT, not INT
    onnx.checker.check_model(model, full_check=True)


def test_the_writing_op_is_deleted_before_any_symbolic_is_looked_up(example):
    """Step 6: a symbolic registered for demo::blur1d_into is never called."""
    calls = []

    def symbolic(g, *args):
        calls.append(args)
        return None

    torch.onnx.register_custom_op_symbolic("demo::blur1d_into", symbolic, 1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            buffer = io.BytesIO()
            model, x = example.BlurInto().eval(), torch.randn(2, 3, 16)
            torch.onnx.export(model, (x,), buffer, dynamo=False)
    finally:
        torch.onnx.unregister_custom_op_symbolic("demo::blur1d_into", 1)
    model = onnx.load_model_from_string(buffer.getvalue())
    assert calls == [] and [n.op_type for n in model.graph.node] == ["Constant"]


def test_page_code_never_names_a_kernel_twice():
    """Step 5: the page declares demo::Blur1d once (a second would conflict) and its working
    kernel in ai.onnx.contrib."""
    readme = (ROOT / NAME / "README.md").read_text(encoding="utf-8")
    assert readme.count('op_type="demo::Blur1d"') == 1
    assert readme.count('op_type="Blur1d"') == 1
    assert 'node.domain = "ai.onnx.contrib"' in readme
