"""library_custom_op/test.py's models, their tolerances over many inputs, and README claims one run does not show."""

from __future__ import annotations

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
from conftest import CHILD_ENV, ROOT, load_example, passed

NAME = "library_custom_op"
SEEDS = range(20)
RTOL, ATOL = 1e-5, 1e-6  # the README's tolerance, for every model
CUSTOM_NODE_MODELS = ["blur1d_dynamo.onnx", "blur1d_torchscript.onnx"]
STANDARD_MODELS = ["blur1d_standard_dynamo.onnx", "blur1d_standard_torchscript.onnx"]
PICK_MODEL = "blur1d_pick_dynamo.onnx"  # step 5: a FLOATS and an INTS attribute
DEMO = onnxscript.values.Opset("demo", 1)
example = load_example(NAME)  # its ops, in the demo namespace


@pytest.fixture(scope="module")
def run(example_run):
    return passed(example_run(NAME))


@example.blur1d.register_fake  # step 2's fake kernel
def _(x, weights, dilation, padding):
    return torch.empty_like(x)


def inputs(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((2, 3, 16)) * scale).astype(np.float32) for scale in (1, 1000)]  # 1000: the rtol


@pytest.mark.parametrize("filename", CUSTOM_NODE_MODELS + STANDARD_MODELS + [PICK_MODEL])
def test_each_model_is_in_its_domain(run, filename):
    model, custom = run.model(filename), filename in CUSTOM_NODE_MODELS + [PICK_MODEL]
    assert {n.domain for n in model.graph.node} == ({"demo"} if custom else {""})
    assert not custom or {o.domain: o.version for o in model.opset_import}["demo"] == 1


def test_dynamo_standard_model_folded_its_constants(run):
    """README step 4: Reshape Pad Conv Reshape, the rest in initializers."""
    model = run.model("blur1d_standard_dynamo.onnx")
    assert [n.op_type for n in model.graph.node] == ["Reshape", "Pad", "Conv", "Reshape"]
    kernels = [onnx.numpy_helper.to_array(i) for i in model.graph.initializer]
    kernels = [k for k in kernels if k.shape == (1, 1, 3)]
    assert len(kernels) == 1 and kernels[0].ravel().tolist() == [0.25, 0.5, 0.25]


@pytest.mark.parametrize("filename", STANDARD_MODELS)
def test_standard_models_match_torch_exactly_over_seeds(run, filename):
    session = ort.InferenceSession(str(run.out / filename), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    for x in (x for seed in SEEDS for x in inputs(seed)):
        (actual,) = session.run(None, {name: x})
        np.testing.assert_array_equal(actual, example.Blur()(torch.from_numpy(x)).numpy(), err_msg=filename)


KERNEL_CHILD = """
import json, sys
import numpy as np, onnx, onnxruntime as ort, torch
from onnxruntime_extensions import PyCustomOpDef as T, get_library_path, onnx_op
from test_library_custom_op import ATOL, CUSTOM_NODE_MODELS, PICK_MODEL, RTOL, SEEDS, example, inputs

ort.set_default_logger_severity(4)


@onnx_op(op_type="Blur1d", inputs=[T.dt_float, T.dt_float], outputs=[T.dt_float],
         attrs={"dilation": T.dt_int64, "padding": T.dt_string})
def kernel(x, weights, dilation, padding):
    return example.blur1d_numpy(x, weights.tolist(), dilation, padding)


@onnx_op(op_type="Pick", inputs=[T.dt_float, T.dt_int64], outputs=[T.dt_float])  # before any session
def pick_kernel(x, indices):
    assert indices.dtype == np.int64, indices.dtype
    return x[..., indices]


options = ort.SessionOptions()
options.register_custom_ops_library(get_library_path())
for path in CUSTOM_NODE_MODELS:
    test_copy = example.lists_as_inputs(onnx.load(f"{sys.argv[1]}/{path}"))
    session = ort.InferenceSession(test_copy.SerializeToString(), options, providers=["CPUExecutionProvider"])
    for x in (x for seed in SEEDS for x in inputs(seed)):
        expected = example.Blur()(torch.from_numpy(x)).numpy()
        np.testing.assert_array_equal(session.run(None, {"x": x})[0], expected, err_msg=path)  # exact

# Step 5's file with both lists: exact, as its taps are (the pick only moves values)
test_copy = example.lists_as_inputs(onnx.load(f"{sys.argv[1]}/{PICK_MODEL}"))
session = ort.InferenceSession(test_copy.SerializeToString(), options, providers=["CPUExecutionProvider"])
for x in (x for seed in SEEDS for x in inputs(seed)):
    expected = example.BlurPick()(torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], expected, err_msg=PICK_MODEL)

# Several nodes, each with its own list: each gets its own constant input, int64 for INTS.
weights, picked = [[0.25, 0.5, 0.25], [1.0, -2.0, 1.0]], [[0, 2, 4, 6, 8, 10], [5, 0, 5]]
nodes = [
    onnx.helper.make_node("Blur1d", [src], [dst], domain="demo", weights=w, dilation=d, padding=p)
    for (src, dst), w, d, p in zip([("x", "h"), ("h", "g")], weights, [1, 3], ["zeros", "replicate"])
]
nodes += [onnx.helper.make_node("Pick", [src], [dst], domain="demo", indices=i)
          for (src, dst), i in zip([("g", "p"), ("p", "y")], picked)]
x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 16])
y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3])
model = onnx.helper.make_model(onnx.helper.make_graph(nodes, "g", [x], [y]), ir_version=10,
                               opset_imports=[onnx.helper.make_opsetid("demo", 1)])
test_copy = example.lists_as_inputs(model)
session = ort.InferenceSession(test_copy.SerializeToString(), options, providers=["CPUExecutionProvider"])
for seed in SEEDS:
    x = np.random.default_rng(seed).standard_normal((2, 16)).astype(np.float32)
    expected = example.blur1d(example.blur1d(torch.from_numpy(x), weights[0], 1, "zeros"), weights[1], 3, "replicate")
    expected = example.pick(example.pick(expected, picked[0]), picked[1])
    np.testing.assert_allclose(session.run(None, {"x": x})[0], expected.numpy(), rtol=RTOL, atol=ATOL)
constants = {i.name: onnx.numpy_helper.to_array(i).dtype.name for i in test_copy.graph.initializer}
print(json.dumps([[list(n.input) for n in test_copy.graph.node], constants]))
"""


def test_custom_node_models_match_torch_over_seeds_with_the_python_kernel(run):
    """Step 5's way, exact over many inputs, in a child process (an @onnx_op kernel is per process)."""
    pytest.importorskip("onnxruntime_extensions")
    child = subprocess.run(
        [sys.executable, "-c", KERNEL_CHILD, str(run.out)],
        capture_output=True, text=True, timeout=600, env=CHILD_ENV, cwd=ROOT / "tests",
    )
    assert child.returncode == 0, child.stderr[-3000:]
    inputs_of, constants = json.loads(child.stdout.strip().splitlines()[-1])
    assert all(len(names) == 2 for names in inputs_of), inputs_of  # one constant each
    assert len({names[1] for names in inputs_of}) == 4, inputs_of
    assert sorted(constants.values()) == ["float32", "float32", "int64", "int64"], constants


DECLARED_CHILD = """
import sys
import onnx, onnxruntime as ort
from onnxruntime_extensions import PyCustomOpDef as T, get_library_path, onnx_op

ort.set_default_logger_severity(4)
@onnx_op(op_type="demo::Pick", inputs=[T.dt_float], outputs=[T.dt_float], attrs={"indices": T.dt_int64})
def pick_as_declared(x, indices):
    return x

model = onnx.load(sys.argv[1])
options = ort.SessionOptions()
options.register_custom_ops_library(get_library_path())
try:
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
except Exception as error:
    print(error)
"""


def test_an_int_list_attribute_is_refused_like_a_float_list(run, tmp_path):
    """Step 5 and CAUSES: dt_int64 asks for one int, and ONNX Runtime refuses the INTS attribute."""
    pytest.importorskip("onnxruntime_extensions")
    model = run.model(PICK_MODEL)  # its Pick node alone, fed by the graph's input
    (node,) = [n for n in model.graph.node if n.op_type == "Pick"]
    node.input[0] = "x"
    graph = onnx.helper.make_graph(
        [node], "g", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3, 16])],
        [onnx.helper.make_tensor_value_info(node.output[0], onnx.TensorProto.FLOAT, [2, 3, 4])],
    )
    path = tmp_path / "pick_alone.onnx"
    onnx.save(onnx.helper.make_model(graph, ir_version=10, opset_imports=list(model.opset_import)), path)
    child = subprocess.run(
        [sys.executable, "-c", DECLARED_CHILD, str(path)],
        capture_output=True, text=True, timeout=600, env=CHILD_ENV, cwd=ROOT / "tests",
    )
    assert child.returncode == 0, child.stderr[-3000:]
    assert "Unable to find attribute 'indices' due to 'Attribute name and type don't match'" in child.stdout


def test_random_taps_differ_by_a_few_ulps_and_stay_in_tolerance():
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
    """Step 1: strict=True wraps the error in TorchRuntimeError, always classified; no exportdb example is named so."""
    from torch._dynamo.exc import TorchRuntimeError
    from torch._export.db.logging import exportdb_error_message, get_class_if_classified_error

    assert get_class_if_classified_error(TorchRuntimeError("any")) == "always_classified"
    assert get_class_if_classified_error(RuntimeError("plain")) is None  # strict=False: no log
    assert exportdb_error_message("always_classified") == "always_classified is unsupported."


@pytest.mark.parametrize(
    "call, expected",
    [
        (None, "DispatchError: No ONNX function found for <OpOverload(op='demo.blur1d', overload='default')>"),
        (lambda x, **a: onnxscript.values.Op(DEMO, "Blur1d")(x, **a), "ValueError: OpSchema not found for op 'Blur1d'"),
        (
            lambda x, **a: DEMO.Blur1d(x, **a),
            "SchemaError: No schema registered for 'Blur1d' version '1' and domain 'demo'!",
        ),
    ],
    ids=["no-translation", "Op-without-schema", "Opset-attribute"],
)
def test_the_converter_needs_a_translation_and_its_local_schema(call, expected):
    """Step 2: past torch.export (step 1/3) with the fake kernel, the converter (step 3/3) fails without a translation,
    or with one whose op has no schema (onnx.defs knows no demo::Blur1d)."""
    assert not onnx.defs.has("Blur1d", "demo")

    def translation(x, weights, dilation, padding):
        return call(x, weights=weights, dilation=dilation, padding=padding)

    table = None if call is None else {torch.ops.demo.blur1d.default: translation}
    with pytest.raises(Exception) as caught:
        torch.onnx.export(
            example.Blur().eval(), (torch.randn(2, 3, 16),), dynamo=True, verbose=False, custom_translation_table=table
        )
    chain, error = [], caught.value
    while error is not None:
        chain.append(re.sub(r"\x1b\[[0-9;]*m", "", f"{type(error).__name__}: {error}"))
        error = error.__cause__
    assert "This is step 3/3" in chain[0], chain[0]
    assert any(expected in text for text in chain), chain
    assert not onnx.defs.has("Blur1d", "demo")


def test_the_checker_does_not_check_a_custom_nodes_attributes(run):
    """Step 2: ONNX has no schema for demo, so a wrongly typed attribute passes the full check."""
    model = run.model("blur1d_dynamo.onnx")
    (node,) = model.graph.node
    (dilation,) = [a for a in node.attribute if a.name == "dilation"]
    node.attribute.remove(dilation)
    node.attribute.append(onnx.helper.make_attribute("dilation", 2.5))  # FLOAT, not INT
    onnx.checker.check_model(model, full_check=True)


def test_the_writing_op_is_deleted_before_any_symbolic_is_looked_up():
    """Step 6: a symbolic registered for demo::blur1d_into is never called."""
    calls, buffer = [], io.BytesIO()
    torch.onnx.register_custom_op_symbolic("demo::blur1d_into", lambda g, *args: calls.append(args), 1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(example.BlurInto().eval(), (torch.randn(2, 3, 16),), buffer, dynamo=False)
    finally:
        torch.onnx.unregister_custom_op_symbolic("demo::blur1d_into", 1)
    model = onnx.load_model_from_string(buffer.getvalue())
    assert calls == [] and [n.op_type for n in model.graph.node] == ["Constant"]


# ---- Step 7: the float16 and bfloat16 models, in ONNX Runtime's own API, on inputs test.py never used ----

HALF = {"float16": onnx.TensorProto.FLOAT16, "bfloat16": onnx.TensorProto.BFLOAT16}
HALF_MODELS = [f"blur1d_{dtype}_{exporter}.onnx" for exporter in ("dynamo", "torchscript") for dtype in HALF]


def half_inputs(dtype: str, seed: int) -> np.ndarray:
    """(2, 3, 16) in DTYPE (numpy float16, or ml_dtypes.bfloat16): values of every exponent, NaN, infinities, the
    largest and smallest values, and sums that fall on a rounding tie of DTYPE or just past one."""
    import ml_dtypes

    np_dtype = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(np.float16)
    info = ml_dtypes.finfo(np_dtype)
    rng = np.random.default_rng(1000 + seed)
    x = rng.standard_normal((2, 3, 16)) * np.exp2(rng.integers(-14, 12, (2, 3, 16)))  # every scale
    specials = [np.nan, np.inf, -np.inf, float(info.max), -float(info.max), float(info.smallest_subnormal),
                -float(info.smallest_subnormal), float(info.smallest_normal), 1.0, -0.0]
    x[0, 1, rng.permutation(16)[: len(specials)]] = specials
    x[1, 1] = float(info.max) * rng.choice([-1.0, 1.0, 0.5], 16)  # sums near the largest value
    # y[i] = x[i-2]/4 + x[i]/2 + x[i+2]/4 (step 7's taps): 2048/4 + ulp(512)/2 lands on a tie between 512 and the next
    # value; plus a quarter of a tiny c it is just past it, which float32 cannot hold: both sides round the tie
    ulp = 2.0 ** (9 - info.nmant)
    tiny = float(info.smallest_subnormal) if dtype == "float16" else 2.0 ** -30
    for row, c in zip(x[:, 2], [0.0, tiny, -tiny, 8 * tiny], strict=False):
        row[:] = rng.standard_normal(16)
        row[[4, 6, 8]] = [2048.0, ulp, c]
        row[[9, 11, 13]] = [-2048.0, -ulp, -c]
    return x.astype(np_dtype)


def run_half(model: bytes, x: np.ndarray, options) -> np.ndarray:
    """MODEL (bytes) in ONNX Runtime, X in and out as raw 16-bit values: the OrtValue API, not test.py's DLPack
    helper."""
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    dtype = "bfloat16" if x.dtype.name == "bfloat16" else "float16"
    assert [session.get_inputs()[0].type, session.get_outputs()[0].type] == [f"tensor({dtype})"] * 2
    out = np.zeros(x.shape, np.uint16)
    binding = session.io_binding()
    as_value = ort.OrtValue.ortvalue_from_numpy_with_onnx_type
    binding.bind_ortvalue_input(session.get_inputs()[0].name, as_value(x.view(np.uint16), HALF[dtype]))
    binding.bind_ortvalue_output(session.get_outputs()[0].name, as_value(out, HALF[dtype]))
    session.run_with_iobinding(binding)
    return out.view(x.dtype)


def blur1d_float64(x: np.ndarray, weights, dilation: int, padding: str) -> np.ndarray:
    """The op written anew, by index, in float64: not test.py's NumPy kernel nor PyTorch's conv1d."""
    n, total = x.shape[-1], (len(weights) - 1) * dilation
    out = np.zeros(x.shape, np.float64)
    for k, w in enumerate(weights):
        j = np.arange(n) + k * dilation - total // 2
        if padding == "reflect":
            j = np.abs(j)
            j = np.where(j > n - 1, 2 * (n - 1) - j, j)
        taken = x[..., np.clip(j, 0, n - 1)].astype(np.float64)
        if padding == "zeros":
            taken[..., (j < 0) | (j > n - 1)] = 0.0
        out += np.float64(w) * taken
    return out


HALF_CHILD = """
import json, sys
import numpy as np, onnx, onnxruntime as ort, torch
from onnxruntime_extensions import PyCustomOpDef as T, get_library_path, onnx_op
from test_library_custom_op import HALF, HALF_MODELS, blur1d_float64, example, half_inputs, run_half

ort.set_default_logger_severity(4)


@onnx_op(op_type="demo::Blur1d", inputs=[T.dt_float, T.dt_float], outputs=[T.dt_float],
         attrs={"dilation": T.dt_int64, "padding": T.dt_string})
def kernel(x, weights, dilation, padding):  # float32 in and out, as the page's kernel; computed in float64
    return blur1d_float64(x, weights.tolist(), dilation, padding).astype(np.float32)


options = ort.SessionOptions()
options.register_custom_ops_library(get_library_path())
equal = checked = 0
for name in HALF_MODELS:
    model = onnx.load(f"{sys.argv[1]}/{name}")
    (node,) = [n for n in model.graph.node if n.domain == "demo"]
    (weights,) = [a for a in node.attribute if a.name == "weights"]  # the kernel takes the list as an input
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.array(weights.floats, np.float32), "taps"))
    node.input.append("taps")
    node.attribute.remove(weights)
    dtype = name.split("_")[1]
    torch_dtype = getattr(torch, dtype)
    for seed in range(6):
        x = half_inputs(dtype, seed)
        actual = torch.from_numpy(run_half(model.SerializeToString(), x, options).view(np.uint16)).view(torch_dtype)
        expected = example.Blur()(torch.from_numpy(x.view(np.uint16)).view(torch_dtype))  # PyTorch in that dtype
        eps = torch.finfo(torch_dtype).eps  # one unit in the last place: the README's tolerance
        torch.testing.assert_close(actual, expected, rtol=eps, atol=torch.finfo(torch_dtype).tiny * eps,
                                   equal_nan=True, msg=lambda m: f"{name}, seed {seed}: {m}")
        equal += int(((actual == expected) | (actual.isnan() & expected.isnan())).sum())
        checked += actual.numel()
print(json.dumps([equal, checked]))
"""


def test_half_precision_models_follow_torch_in_onnxruntime(run):
    """Step 7's four files, run through ONNX Runtime's OrtValue API with a float64 kernel of the test's own, on
    NaN, infinities, the largest, smallest and subnormal values and rounding ties: within one unit in the last
    place of PyTorch in float16 or bfloat16 (the README's derivation), in a child process (one kernel per process)."""
    pytest.importorskip("onnxruntime_extensions")
    for name in HALF_MODELS:
        model = run.model(name)
        assert model.graph.input[0].type.tensor_type.elem_type == HALF[name.split("_")[1]], name
        casts = [n for n in model.graph.node if n.op_type == "Cast"][:1]
        assert [n.attribute[0].i for n in casts] == [onnx.TensorProto.FLOAT], name  # into the kernel: float32
    child = subprocess.run(
        [sys.executable, "-c", HALF_CHILD, str(run.out)],
        capture_output=True, text=True, timeout=600, env=CHILD_ENV, cwd=ROOT / "tests",
    )
    assert child.returncode == 0, child.stderr[-3000:]
    equal, checked = json.loads(child.stdout.strip().splitlines()[-1])
    assert checked == 4 * 6 * 96 and equal > 0.9 * checked, (equal, checked)


def test_half_precision_failure_is_bfloat16_and_caught(run):
    """Step 7's failing file: step 2's translation wrote a bfloat16 node, though the local schema lists float only;
    the full checker passes it until the schema is registered."""
    path = str(run.out / "failures/blur1d_bfloat16_dynamo.onnx")
    model = onnx.load(path)
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16
    assert [n.op_type for n in model.graph.node] == ["Blur1d"]
    onnx.checker.check_model(model, full_check=True)  # no schema for demo: nothing to check against
    with pytest.raises(onnx.shape_inference.InferenceError, match="has unsupported type: tensor[(]bfloat16[)]"):
        example.check_with_schemas(path, example.BLUR1D_SCHEMA)
    assert not onnx.defs.has("Blur1d", "demo")
