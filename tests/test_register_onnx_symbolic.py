"""What register_onnx_symbolic/test.py writes, and what one run cannot show: its tolerances on many inputs, the
registry trap of step 11, the g.op and parse_args tables, the ops dynamo=True decomposes, its opset range, and that a
broken onnxruntime-extensions costs only the two steps that need it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import onnxscript
import pytest
import torch
from conftest import CHILD_ENV, ROOT, load_example, passed
from onnx import AttributeProto, helper

NAME = "register_onnx_symbolic"
SEEDS = range(20)


@pytest.fixture(scope="module")
def run(example_run):
    return passed(example_run(NAME))


@pytest.fixture(scope="module")
def example():
    return load_example(NAME)


KIND = AttributeProto.AttributeType.Name  # an attribute's type, by name


def opsets(model):
    return {o.domain: o.version for o in model.opset_import}


F32_0_1 = float(np.float32(0.1))  # 0.1 as a FLOAT attribute holds it
THRESHOLD = {"threshold": ("FLOAT", F32_0_1), "value": ("FLOAT", 20.0)}
DEFORM = {"strides": ("INTS", [2, 2]), "pads": ("INTS", [1, 1, 1, 1]), "dilations": ("INTS", [1, 1])}
DEFORM |= {"group": ("INT", 1), "offset_group": ("INT", 1)}
CDIST = {"metric": ("STRING", b"euclidean")}
CUSTOM, TWELVE, DYNAMO = ["rknn_cst.cstThreshold"], {"": 12, "rknn_cst": 1}, {"": 20, "rknn_cst": 1}
MODELS = {  # each model: its nodes (domain.op_type), its opset imports, the attributes of its one node not a Constant
    "threshold_custom.onnx": (CUSTOM, TWELVE, THRESHOLD),
    "threshold_untyped.onnx": (CUSTOM, TWELVE, THRESHOLD),
    "failures/threshold_no_attributes.onnx": (CUSTOM, TWELVE, {}),
    "failures/threshold_float_list.onnx": (CUSTOM, TWELVE, {"param": ("FLOATS", [F32_0_1, 20.0])}),
    "threshold_standard.onnx": (["Constant", "LessOrEqual", "Constant", "Where"], {"": 12}, None),
    "elu_builtin.onnx": (["Elu"], {"": 12}, None),
    "asinh_opset9.onnx": (["Asinh"], {"": 9}, None),  # registered at opset 9, the symbolic serves 17 too
    "asinh_opset17.onnx": (["Asinh"], {"": 17}, None),
    "deform_conv2d.onnx": (["DeformConv"], {"": 19}, DEFORM),
    "failures/deform_conv2d_placeholder.onnx": (["custom.deform_conv2d"], {"": 19, "custom": 1}, {}),
    "failures/deform_conv2d_fallthrough.onnx": (["Constant"] * 3 + ["torchvision.deform_conv2d"], None, None),
    "failures/deform_conv2d_aten.onnx": (["Constant"] * 3 + ["org.pytorch.aten.ATen"], None, None),
    # the source's call ignores the symbolic; asked for opset 12, the version converter could not get there
    "threshold_source_as_written.onnx": (["LessOrEqual", "Where"], {"": 18}, None),
    "threshold_dynamo.onnx": (["LessOrEqual", "Where"], {"": 20}, None),  # dynamo=True ignores registrations
    "asinh_dynamo.onnx": (["Asinh"], {"": 20}, None),
    "deform_conv2d_dynamo.onnx": (["DeformConv"], {"": 20}, DEFORM),
    "threshold_custom_dynamo.onnx": (CUSTOM, DYNAMO, THRESHOLD),  # step 2's local schema
    "threshold_custom_dynamo_script.onnx": (CUSTOM, DYNAMO, THRESHOLD),  # and as @onnxscript.script
    "cdist_contrib.onnx": (["com.microsoft.CDist"], {"": 17, "com.microsoft": 1}, CDIST),
    "cdist_contrib_dynamo.onnx": (["com.microsoft.CDist"], {"": 20, "com.microsoft": 1}, CDIST),
    # steps 13 and 14: the node float32 between Casts (dynamo=True's optimizer makes CastLike a Cast)
    "threshold_float16_dynamo.onnx": (["Cast", *CUSTOM, "Cast"], DYNAMO, None),
    "threshold_bfloat16_dynamo.onnx": (["Cast", *CUSTOM, "Cast"], DYNAMO, None),
    "threshold_float16.onnx": (["Cast", *CUSTOM, "CastLike"], {"": 17, "rknn_cst": 1}, None),
    "threshold_bfloat16.onnx": (["Cast", *CUSTOM, "CastLike"], {"": 17, "rknn_cst": 1}, None),
    "failures/threshold_bf16_dynamo.onnx": (CUSTOM, DYNAMO, THRESHOLD),  # bfloat16, unchecked
}


@pytest.mark.parametrize("filename", MODELS)
def test_model_nodes_opsets_and_attributes(run, filename):
    model, (expected_nodes, expected_opsets, attributes) = run.model(filename), MODELS[filename]
    assert [f"{n.domain}.{n.op_type}".lstrip(".") for n in model.graph.node] == expected_nodes
    assert expected_opsets is None or opsets(model) == expected_opsets
    if attributes is not None:
        (node,) = [n for n in model.graph.node if n.op_type != "Constant"]
        assert {a.name: (KIND(a.type), helper.get_attribute_value(a)) for a in node.attribute} == attributes
    if filename in ("deform_conv2d.onnx", "deform_conv2d_dynamo.onnx"):
        assert [i.name for i in model.graph.input] == ["x", "offset", "weight", "bias", "mask"]
        assert list(model.graph.node[0].input) == ["x", "weight", "offset", "bias", "mask"]  # ONNX's: X, W, offset, B
    if filename == "failures/deform_conv2d_placeholder.onnx":
        assert [i.name for i in model.graph.input] == ["x", "offset", "weight"]  # bias and mask dropped


def test_other_models(run):
    ops = {n.op_type for n in run.model("elu_override.onnx").graph.node}
    assert "Elu" not in ops and {"Exp", "Where", "Greater"} <= ops  # the override replaces the built-in rule
    model = run.model("cholesky_dynamo.onnx")  # keyed on aten.linalg_cholesky, the op stays whole
    assert all(n.domain == "" for n in model.graph.node) and opsets(model) == {"": 20}
    assert [n.op_type for n in model.graph.node].count("Sqrt") == 4  # a 4x4 matrix: one pivot per column
    assert [i.name for i in model.graph.input] == ["a"] and len(model.graph.output) == 1
    model = run.model("cdist_builtin.onnx")
    assert len(model.graph.node) == 11 and all(n.domain == "" for n in model.graph.node)
    for path in run.out.glob("*.onnx"):
        onnx.checker.check_model(onnx.load(str(path)), full_check=True)


def test_run_output(run):
    """Shape inference through the global schema only; the libraries' noise held back, not shown."""
    assert "ONNX shape inference, schema local: output shape []" in run.output
    assert "ONNX shape inference, schema registered: output shape [1, 3, 10, 10]" in run.output
    for noise in ["Torch IR graph at exception", "[W", "Traceback", "[torch.onnx]", "DeprecationWarning"]:
        assert noise not in run.output, f"a passing run prints {noise!r}"


def test_every_step_runs_as_shown_on_the_pinned_torch(run):
    """steps.json: all fourteen steps run, none differs; the version-specific lines and models only on older torch."""
    summary = json.loads((run.out / "steps.json").read_text(encoding="utf-8"))
    assert summary["torch"] == torch.__version__.split("+")[0]
    assert {n: s["status"] for n, s in summary["steps"].items()} == {str(n): "runs" for n in range(1, 15)}
    assert "\n  on torch " not in run.output and "SKIP" not in run.output
    assert not (run.out / "failures" / "deform_conv2d_dynamo_opset18.onnx").exists()  # torch 2.6 to 2.8 only
    assert not (run.out / "failures" / "cholesky_ex_dynamo.onnx").exists()  # torch 2.8 only (step 3)
    assert not list(run.out.glob("*.sarif"))  # a failed dynamo_export (torch 2.4) writes one; nothing here calls it


# ---- the tolerances, on many inputs (the example itself runs one) --------------------------------


def export_and_session(tmp_path, name, model, inputs, **export_args):
    path = tmp_path / name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript-based exporter's DeprecationWarning
        torch.onnx.export(model, inputs, str(path), dynamo=False, **export_args)
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def deform_inputs(c_in: int):
    """deform_conv_inputs() of test.py, with c_in input channels (test.py's own shape has 4)."""
    n, c_out, size, k = 2, 6, 9, 3
    out = (size + 2 * 1 - k) // 2 + 1
    x, offset = torch.randn(n, c_in, size, size), torch.randn(n, 2 * k * k, out, out)
    return x, offset, torch.randn(c_out, c_in, k, k), torch.randn(c_out), torch.rand(n, k * k, out, out)


@pytest.mark.parametrize("c_in, seeds", [(4, SEEDS), (64, range(10)), (256, range(10))])
def test_deform_conv_tolerance_holds_on_many_inputs(example, tmp_path, c_in, seeds):
    """Step 11 (and step 1): ORT's DeformConv within 1e-5 of the largest output of torchvision's, whatever the
    order of the float32 sums over C_in*k*k taps (with test.py's 4 channels, 64 or 256)."""
    torch.manual_seed(1000 + c_in)
    model = example.DeformConvModel().eval()
    names = ["x", "offset", "weight", "bias", "mask"]
    example.register_custom_op_symbolic("torchvision::deform_conv2d", example.deform_conv2d_symbolic, 19)
    session = export_and_session(
        tmp_path, "deform.onnx", model, deform_inputs(c_in), opset_version=19, input_names=names
    )
    worst = 0.0
    for seed in seeds:
        torch.manual_seed(seed)
        inputs = example.deform_conv_inputs() if c_in == 4 else deform_inputs(c_in)
        (actual,) = session.run(None, {name: t.numpy() for name, t in zip(names, inputs, strict=True)})
        expected = model(*inputs).detach().numpy()
        atol = round(1e-5 * float(np.abs(expected).max()), 6)  # the README's rule, as test.py computes it
        np.testing.assert_allclose(actual, expected, rtol=0, atol=atol, err_msg=f"c_in={c_in} seed={seed}")
        worst = max(worst, float(np.max(np.abs(actual.astype(np.float64) - expected)) / atol))
    print(f"c_in={c_in}: largest difference {worst:.2f} of the tolerance over {len(seeds)} inputs")


def test_elu_override_and_asinh_tolerances_hold_on_many_inputs(example, tmp_path):
    """Steps 8 and 9: rtol=1e-5, atol=1e-6 for the ELU override and for Asinh, on 20 inputs each."""
    elu = torch.nn.ELU(alpha=0.5).eval()
    example.register_custom_op_symbolic("aten::elu", example.elu_from_primitives, 12)
    try:
        elu_session = export_and_session(tmp_path, "elu.onnx", elu, (torch.randn(64, 3, 8),), opset_version=12)
    finally:
        example.unregister_custom_op_symbolic("aten::elu", 12)  # elu has a built-in rule: safe to unregister
    example.register_custom_op_symbolic("aten::asinh", example.asinh_symbolic, 9)
    asinh = example.AsinhModel().eval()
    asinh_session = export_and_session(tmp_path, "asinh.onnx", asinh, (torch.randn(64, 3, 8),), opset_version=9)
    for seed in SEEDS:
        torch.manual_seed(seed)
        x = torch.randn(64, 3, 8) * 4  # both branches of ELU, and asinh over [-20, 20] or so
        for label, session, model in [("elu", elu_session, elu), ("asinh", asinh_session, asinh)]:
            (actual,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
            np.testing.assert_allclose(actual, model(x).numpy(), rtol=1e-5, atol=1e-6, err_msg=f"{label} seed={seed}")


@pytest.mark.parametrize("n", [4, 8])
def test_cholesky_tolerance_holds_on_many_inputs(example, tmp_path, n):
    """Step 3: rtol=1e-5, atol=1e-5 against LAPACK on 20 batches of x @ x.T + n*I; not positive definite: NaN."""
    model = example.CholeskyModel().eval()
    path = tmp_path / f"cholesky{n}.onnx"
    table = {torch.ops.aten.linalg_cholesky.default: example.cholesky_translation}
    torch.onnx.export(
        model, (torch.eye(n).expand(3, n, n).contiguous(),), str(path), dynamo=True, verbose=False,
        external_data=False, custom_translation_table=table,
    )
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    worst = 0.0
    for seed in SEEDS:
        torch.manual_seed(seed)
        x = torch.randn(3, n, n)
        a = x @ x.mT + n * torch.eye(n)
        (actual,) = session.run(None, {"a": a.numpy()})
        expected = model(a).numpy()
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5, err_msg=f"n={n} seed={seed}")
        worst = max(worst, float(np.max(np.abs(actual - expected))))
    print(f"n={n}: largest difference {worst:.1e} over {len(SEEDS)} batches")
    not_positive_definite = -torch.eye(n).expand(3, n, n).contiguous()
    (actual,) = session.run(None, {"a": not_positive_definite.numpy()})
    assert np.isnan(actual).any()
    with pytest.raises(torch.linalg.LinAlgError):
        model(not_positive_definite)


@pytest.mark.parametrize(
    "rows1, rows2, k, scale", [(5, 7, 3, 1.0), (5, 7, 3, 100.0), (20, 20, 64, 1.0), (30, 40, 256, 10.0)]
)
def test_cdist_tolerance_holds_on_many_inputs(example, tmp_path, rows1, rows2, k, scale):
    """Steps 4 and 12: ORT's CDist against torch.cdist within cdist_tolerance(), on 20 inputs each, with a row of x2
    equal to a row of x1 (distance 0) and another 1e-3 * scale away."""
    example.register_custom_op_symbolic("aten::cdist", example.cdist_contrib, 9)
    model = example.CDistModel().eval()
    session = export_and_session(
        tmp_path, "cdist.onnx", model, (torch.randn(rows1, k), torch.randn(rows2, k)), opset_version=17,
        input_names=["x1", "x2"], custom_opsets={"com.microsoft": 1},
    )
    worst = 0.0
    for seed in SEEDS:
        torch.manual_seed(seed)
        x1, x2 = torch.randn(rows1, k) * scale, torch.randn(rows2, k) * scale
        x2[0] = x1[0]
        x2[1] = x1[1] + 1e-3 * scale
        (actual,) = session.run(None, {"x1": x1.numpy(), "x2": x2.numpy()})
        expected = model(x1, x2).numpy()
        atol = round(example.cdist_tolerance(x1, x2), 6)  # the README's rule, as test.py computes it
        np.testing.assert_allclose(actual, expected, rtol=0, atol=atol, err_msg=f"seed={seed}")
        worst = max(worst, float(np.max(np.abs(actual.astype(np.float64) - expected)) / atol))
    print(f"{rows1}x{k} vs {rows2}x{k}, scale {scale}: largest difference {worst:.2f} of tolerance")


# ---- the README's claims about torch and onnx, on the installed versions -------------------------


def test_g_op_suffix_table(example, tmp_path):
    """Step 5's table: torch's attribute-name pattern, and the ONNX type each suffix writes."""
    from torch.onnx._internal.torchscript_exporter import jit_utils

    assert jit_utils._ATTR_PATTERN.pattern == "^(.+)_(([ifstgz])|(ty))$"
    a_type = torch._C.TensorType.create_from_tensor(torch.randn(2, 3))
    table = {  # suffix -> one value, a list, and the attribute types they write
        "i": (2, [1, 2], "INT", "INTS"),
        "f": (0.5, [0.5, 2.0], "FLOAT", "FLOATS"),
        "s": ("a", ["a", "b"], "STRING", "STRINGS"),
        "t": (torch.tensor([1.0, 2.0]), [torch.tensor(1.5), torch.tensor(2.0)], "TENSOR", "TENSORS"),
        "z": (torch.tensor(1.5), [torch.tensor(1.5), torch.tensor(2.0)], "TENSOR", "TENSORS"),  # 0-d tensors
        "g": (torch._C.Graph(), [torch._C.Graph()], "GRAPH", "GRAPHS"),
        "ty": (a_type, [a_type, a_type], "TYPE_PROTO", "TYPE_PROTOS"),
    }
    # g.op(..., onei_i=2) writes an attribute "onei": the suffix is not part of the name
    attributes = {f"one{k}_{k}": one for k, (one, *_) in table.items()}
    attributes.update({f"many{k}_{k}": many for k, (_, many, *_) in table.items()})

    @example.parse_args("v", "f")
    def celu_with_every_suffix(g, x, alpha):
        y = g.op("suffix::Table", x, **attributes)
        y.setType(x.type())
        return y

    path = tmp_path / "suffixes.onnx"
    example.register_custom_op_symbolic("aten::celu", celu_with_every_suffix, 12)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(torch.nn.CELU(), (torch.randn(2),), str(path), dynamo=False, opset_version=12)
    finally:
        example.unregister_custom_op_symbolic("aten::celu", 12)  # celu has a built-in rule
    (node,) = onnx.load(str(path)).graph.node
    written = {a.name: KIND(a.type) for a in node.attribute}
    for suffix, (_, _, single, listed) in table.items():
        assert (written[f"one{suffix}"], written[f"many{suffix}"]) == (single, listed), suffix


def test_parse_args_lists():
    """Step 5's table: "is" unpacks a list node of constants, "fs" only a constant."""
    from torch.onnx._internal.torchscript_exporter import symbolic_helper

    graph = torch._C.Graph()
    constants = []
    for value in (2, 3):
        node = graph.create("onnx::Constant")
        node.t_("value", torch.tensor(value))
        graph.insertNode(node)
        constants.append(node.output())
    listed = graph.insertNode(graph.create("prim::ListConstruct", constants))
    assert symbolic_helper._parse_arg(listed.output(), "is") == [2, 3]
    with pytest.raises(torch.onnx.errors.SymbolicValueError, match="not a list of integers"):
        symbolic_helper._parse_arg(listed.output(), "fs")
    constant = graph.create("onnx::Constant")
    constant.t_("value", torch.tensor([0.5, 2.0]))
    graph.insertNode(constant)
    assert symbolic_helper._parse_arg(constant.output(), "fs") == [0.5, 2.0]


DECOMPOSED = {  # step 3's list: what a call reaches the dynamo=True exporter as
    "linalg.solve": (lambda torch, a: torch.linalg.solve(a, a[..., :1]), "aten._linalg_solve_ex"),
    "linalg.slogdet": (lambda torch, a: torch.linalg.slogdet(a)[1], "aten._linalg_slogdet"),
    "special.i0": (lambda torch, a: torch.special.i0(a), "prims.bessel_i0"),
    "linalg.eigh": (lambda torch, a: torch.linalg.eigh(a)[0], "aten._linalg_eigh"),
}


@pytest.mark.parametrize("call", DECOMPOSED)
def test_dynamo_names_the_decomposed_op(call):
    function, decomposed = DECOMPOSED[call]

    class Model(torch.nn.Module):
        def forward(self, a):
            return function(torch, a)

    x = torch.randn(2, 4, 4)
    a = x @ x.mT + 4 * torch.eye(4)
    with pytest.raises(Exception) as caught:  # noqa: B017 - the message is what is checked
        torch.onnx.export(Model().eval(), (a,), dynamo=True, verbose=False)
    messages, error = [], caught.value
    while error is not None:
        messages.append(str(error))
        error = error.__cause__
    assert f"No ONNX function found for <OpOverload(op='{decomposed}'" in "\n".join(messages)


def test_cdist_with_more_than_25_rows_exports(example):
    """Step 4: past 25 rows torch.cdist takes the matrix-product path, which dynamo=True exports with standard ops."""
    inputs = (torch.randn(30, 3), torch.randn(7, 3))
    program = torch.onnx.export(example.CDistModel().eval(), inputs, dynamo=True, verbose=False)
    ops = [n.op_type for n in program.model_proto.graph.node]
    assert "MatMul" in ops and all(n.domain == "" for n in program.model_proto.graph.node), ops


def test_dynamo_opset_range(example):
    """dynamo=True converts down to 17 (asinh), exports past ONNX_MAX_OPSET = 23 unchecked; TorchScript stops at 20."""
    from torch.onnx import _constants

    assert (_constants.ONNX_MAX_OPSET, _constants.ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET) == (23, 20)
    for opset in (17, 24):
        program = torch.onnx.export(
            example.AsinhModel().eval(), (torch.randn(2, 3),), dynamo=True, verbose=False, opset_version=opset
        )
        assert opsets(program.model_proto)[""] == opset
        assert [n.op_type for n in program.model_proto.graph.node] == ["Asinh"]


# ---- in separate processes: what would disturb this one ------------------------------------------


def run_python(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT / NAME, env={**CHILD_ENV, **env}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, timeout=1800,
    )


def test_unregistering_the_only_symbolic_breaks_the_next_export(tmp_path):
    """Step 11: why the page replaces the placeholder instead of unregistering it."""
    output = run_python("-c", textwrap.dedent(f"""
        import importlib.util, sys, warnings
        warnings.simplefilter("ignore")
        spec = importlib.util.spec_from_file_location("example", "test.py")
        example = importlib.util.module_from_spec(spec)
        sys.modules["example"] = example
        spec.loader.exec_module(example)
        import torch
        example.register_custom_op_symbolic("torchvision::deform_conv2d", example.deform_conv2d_symbolic, 19)
        example.unregister_custom_op_symbolic("torchvision::deform_conv2d", 19)
        try:
            torch.onnx.export(example.DeformConvModel(), example.deform_conv_inputs(), {str(tmp_path / "d.onnx")!r},
                              dynamo=False, opset_version=19)
        except ValueError as error:
            print("ValueError:", error)
        """)).stdout
    assert "ValueError: min() arg is an empty sequence" in output, output[-3000:]


def test_a_broken_onnxruntime_extensions_skips_only_steps_2_5_13_and_14(tmp_path):
    """The optional package's import fails: every step runs, only 2, 5, 13 and 14 report a skip."""
    fake = tmp_path / "site" / "onnxruntime_extensions"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise ImportError("broken on purpose")\n')
    out = tmp_path / "out"
    result = run_python("test.py", "--out", str(out), PYTHONPATH=str(fake.parent))
    output = result.stdout
    assert result.returncode == 77, output[-4000:]
    reason = "onnxruntime-extensions cannot be imported (ImportError: broken on purpose)"
    reason += ": pip install onnxruntime-extensions"
    for number in (2, 5, 13, 14):
        assert f"SKIP step {number}: {reason}" in output, output[-4000:]
    assert "SKIP step 1:" not in output and "\nFAIL:" not in output, output[-4000:]
    assert all(f"== {number}. " in output for number in range(1, 15))
    # What runs without the package still ran: the models are there, the plain ORT ones compared.
    for name in ["threshold_custom", "threshold_standard", "deform_conv2d", "threshold_custom_dynamo"]:
        assert (out / f"{name}.onnx").is_file(), name
    assert "deform_conv2d.onnx: matches PyTorch" in output
    assert "threshold_custom.onnx: matches PyTorch" not in output
    summary = json.loads((out / "steps.json").read_text(encoding="utf-8"))
    statuses = {n: s["status"] for n, s in summary["steps"].items()}
    skipped = {str(n): "skipped" for n in (2, 5, 13, 14)}
    assert statuses == {**{str(n): "runs" for n in range(1, 15)}, **skipped}, statuses


# ---- Threshold: one meaning everywhere, PyTorch's (x <= threshold gives value, else x; NaN stays NaN) ----
# The CPU kernel compares a float16 or bfloat16 x in float32. Each implementation is fed what randn never draws
# and run in its runtime; the result must equal eager PyTorch's bit for bit (assert_array_equal: NaN equals NaN).


def bfloat16():
    return pytest.importorskip("ml_dtypes").bfloat16


def nearest(dtype, threshold: float) -> list:
    """The values of DTYPE around THRESHOLD (as float32): the nearest on each side, and one more either way."""
    rounded = np.array([threshold], np.float32).astype(dtype)
    bits = int(rounded.view(np.uint16)[0])
    return list(np.array([bits - 2, bits - 1, bits, bits + 1, bits + 2], np.uint16).view(dtype).astype(np.float32))


def threshold_edges(dtype, shape, threshold: float = 0.1, seed: int = 0) -> np.ndarray:
    """A DTYPE array of SHAPE: NaN, +-inf, +-0, ordinary values, the threshold's neighbours in DTYPE (float32:
    the threshold itself, its float32 neighbours, and float16's and bfloat16's nearest values as float32), then
    randn."""
    t = np.float32(threshold)
    if dtype == np.float32:
        near = [t, np.nextafter(t, np.float32(np.inf)), np.nextafter(t, np.float32(-np.inf))]
        near += nearest(np.float16, threshold) + nearest(bfloat16(), threshold)
    else:
        near = nearest(dtype, threshold)
    values = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, -1.5, 3.25, 20.0, -20.0, *near], np.float32)
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    x.flat[: len(values)] = values
    return x.astype(dtype)


def eager_threshold(x: np.ndarray, threshold: float = 0.1, value: float = 20.0) -> np.ndarray:
    """torch.nn.Threshold on X's dtype (a bfloat16 array goes through float32, exactly), as a float32 array."""
    dtype = {np.dtype(np.float32): torch.float32, np.dtype(np.float16): torch.float16}.get(x.dtype, torch.bfloat16)
    tensor = torch.from_numpy(x.astype(np.float32)).to(dtype)
    return torch.nn.Threshold(threshold, value)(tensor).float().numpy()


def assert_threshold_equal(actual, x, what: str, threshold: float = 0.1):
    expected = eager_threshold(x, threshold)
    actual = np.asarray(actual).astype(np.float32)  # exact from float16 and bfloat16
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, what
    np.testing.assert_array_equal(actual, expected, err_msg=f"{what}: not torch.nn.Threshold({threshold}, 20)")


def test_threshold_edges_hold_what_they_should():
    x = threshold_edges(np.float32, (1, 3, 10, 10))
    below, above = np.float32(0.0999755859375), np.float32(0.10009765625)  # float16's nearest 0.1
    assert np.isnan(x).any() and {np.float32(0.1), below, above, np.float32(0.099609375)} <= set(x.flat)
    assert eager_threshold(np.array([np.nan, 0.1, above], np.float32)).tolist()[1:] == [20.0, above]
    assert np.isnan(eager_threshold(np.array([np.nan], np.float32)))[0]  # NaN kept: x <= t is false
    # bfloat16's nearest 0.1 is above it: compared in float32 it is kept, in bfloat16 it would be 20
    kept = eager_threshold(threshold_edges(bfloat16(), (1, 3, 10, 10)))
    assert np.float32(0.10009765625) in set(kept.flat)


def ortx():
    """SessionOptions with onnxruntime-extensions' library: page_helpers' @onnx_op kernels (registered when the
    example module imported page_helpers)."""
    extensions = pytest.importorskip("onnxruntime_extensions")
    options = ort.SessionOptions()
    options.register_custom_ops_library(extensions.get_library_path())
    return options


@pytest.mark.parametrize(
    "filename",
    ["threshold_custom.onnx", "threshold_untyped.onnx", "threshold_custom_dynamo.onnx",
     "threshold_custom_dynamo_script.onnx"],
)
def test_stand_in_kernel_follows_torch_in_onnxruntime(run, example, filename):
    """page_helpers' rknn_cst_kernels cstThreshold (float32 in and out), through ONNX Runtime."""
    options = ortx()  # skips without onnxruntime-extensions
    assert example.onnx_op is not None, "page_helpers did not register its kernels"
    session = ort.InferenceSession(str(run.out / filename), options, providers=["CPUExecutionProvider"])
    assert session.get_inputs()[0].type == "tensor(float)"  # the kernel takes float32 only
    for seed in range(3):
        x = threshold_edges(np.float32, (1, 3, 10, 10), seed=seed)
        (actual,) = session.run(None, {session.get_inputs()[0].name: x})
        assert_threshold_equal(actual, x, filename)


def retyped(model: onnx.ModelProto, elem_type: int) -> onnx.ModelProto:
    """MODEL with its graph's inputs and outputs typed ELEM_TYPE (a body that follows its input's type)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for value in [*model.graph.input, *model.graph.output]:
        value.type.tensor_type.elem_type = elem_type
    return model


LOW = {"float32": onnx.TensorProto.FLOAT, "float16": onnx.TensorProto.FLOAT16, "bfloat16": onnx.TensorProto.BFLOAT16}


def numpy_dtype(name: str):
    return bfloat16() if name == "bfloat16" else np.dtype(name)


@pytest.mark.parametrize("dtype", LOW)
def test_reference_evaluator_op_follows_torch(run, example, dtype):
    """Step 5's cstThreshold (an OpRun for onnx.reference, style C's list) on float32, float16 and bfloat16."""
    from onnx.reference import ReferenceEvaluator

    model = retyped(run.model("failures/threshold_float_list.onnx"), LOW[dtype])
    evaluator = ReferenceEvaluator(model, new_ops=[example.cstThreshold])
    x = threshold_edges(numpy_dtype(dtype), (1, 3, 10, 10))
    (actual,) = evaluator.run(None, {"input": x})
    assert actual.dtype == x.dtype, actual.dtype
    assert_threshold_equal(actual, x, f"cstThreshold in onnx.reference, {dtype}")


def export_standard_ops(example, tmp_path, dtype: str, threshold: float, opset: int) -> str:
    """torch.nn.Threshold(THRESHOLD, 20) exported with step 7's symbolic from a DTYPE input."""
    path = str(tmp_path / f"threshold_standard_{dtype}_{threshold}.onnx")
    example.register_custom_op_symbolic("aten::threshold", example.threshold_standard_ops, 12)
    x = torch.randn(1, 3, 10, 10).to(getattr(torch, dtype))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript-based exporter's DeprecationWarning
        torch.onnx.export(torch.nn.Threshold(threshold, 20).eval(), (x,), path, dynamo=False, opset_version=opset)
    onnx.checker.check_model(onnx.load(path), full_check=True)
    return path


def test_standard_ops_model_of_the_run_follows_torch(run):
    """Step 7's threshold_standard.onnx (float32, opset 12) in ONNX Runtime."""
    session = ort.InferenceSession(str(run.out / "threshold_standard.onnx"), providers=["CPUExecutionProvider"])
    for seed in range(3):
        x = threshold_edges(np.float32, (1, 3, 10, 10), seed=seed)
        (actual,) = session.run(None, {"input": x})
        assert_threshold_equal(actual, x, "threshold_standard.onnx")


@pytest.mark.parametrize("threshold", [0.1, 0.3])  # float16 rounds 0.1 down, 0.3 up (to 0.30004883)
@pytest.mark.parametrize("dtype", LOW)
def test_standard_ops_symbolic_follows_torch(example, tmp_path, dtype, threshold):
    """Step 7's symbolic from a float32, float16 or bfloat16 input: value in the input's dtype, float16 and bfloat16
    compared in float32 (a Cast, the threshold a float32 constant). ONNX Runtime runs float32 and float16; it has no
    CPU Where for bfloat16, so onnx.reference runs that one."""
    from onnx.reference import ReferenceEvaluator

    path = export_standard_ops(example, tmp_path, dtype, threshold, 17 if dtype == "bfloat16" else 12)
    model = onnx.load(path)
    assert model.graph.input[0].type.tensor_type.elem_type == LOW[dtype]
    x = threshold_edges(numpy_dtype(dtype), (1, 3, 10, 10), threshold)
    if dtype == "bfloat16":
        with pytest.raises(Exception, match="Could not find an implementation for Where"):
            ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        (actual,) = ReferenceEvaluator(path).run(None, {"input": x})
    else:
        (actual,) = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"input": x})
    assert actual.dtype == x.dtype, actual.dtype
    assert_threshold_equal(actual, x, f"step 7's symbolic, {dtype}", threshold)
    ops = [n.op_type for n in model.graph.node]
    constants = [onnx.numpy_helper.to_array(n.attribute[0].t) for n in model.graph.node if n.op_type == "Constant"]
    if dtype == "float32":
        assert ops == ["Constant", "LessOrEqual", "Constant", "Where"], ops
        assert [c.dtype for c in constants] == [np.float32, np.float32]
    else:
        assert ops == ["Cast", "Constant", "LessOrEqual", "Constant", "Where"], ops
        assert [n.attribute[0].i for n in model.graph.node if n.op_type == "Cast"] == [onnx.TensorProto.FLOAT]
        assert constants[0].dtype == np.float32 and constants[1].dtype == numpy_dtype(dtype)  # threshold, value


HALF = {"float16": onnx.TensorProto.FLOAT16, "bfloat16": onnx.TensorProto.BFLOAT16}


def run_half(path, x: np.ndarray, dtype: str) -> np.ndarray:
    """PATH in ONNX Runtime with page_helpers' float32 kernel, X (float16, or bfloat16 as ml_dtypes) in and out as
    raw 16-bit values: ONNX Runtime's own OrtValue API, not test.py's DLPack helper."""
    session = ort.InferenceSession(str(path), ortx(), providers=["CPUExecutionProvider"])
    assert [session.get_inputs()[0].type, session.get_outputs()[0].type] == [f"tensor({dtype})"] * 2
    elem_type = HALF[dtype]
    out = np.zeros(x.shape, np.uint16)
    binding = session.io_binding()
    as_value = ort.OrtValue.ortvalue_from_numpy_with_onnx_type
    binding.bind_ortvalue_input(session.get_inputs()[0].name, as_value(x.view(np.uint16), elem_type))
    binding.bind_ortvalue_output(session.get_outputs()[0].name, as_value(out, elem_type))
    session.run_with_iobinding(binding)
    return out.view(x.dtype)


@pytest.mark.parametrize("exporter", ["_dynamo", ""])
@pytest.mark.parametrize("dtype", HALF)
def test_half_precision_models_follow_torch_in_onnxruntime(run, example, dtype, exporter):
    """Steps 13 and 14's float16 and bfloat16 files: the custom node float32 between Casts, run in ONNX Runtime on
    the threshold's neighbours in that dtype, NaN and infinities, against torch.nn.Threshold in that dtype."""
    path = run.out / f"threshold_{dtype}{exporter}.onnx"
    model = onnx.load(str(path))
    assert model.graph.input[0].type.tensor_type.elem_type == HALF[dtype]
    (node,) = [n for n in model.graph.node if n.domain == "rknn_cst"]
    assert {a.name: (KIND(a.type), helper.get_attribute_value(a)) for a in node.attribute} == THRESHOLD
    for seed in range(3):
        x = threshold_edges(numpy_dtype(dtype), (1, 3, 10, 10), seed=seed)
        actual = run_half(path, x, dtype)
        assert actual.dtype == x.dtype
        assert_threshold_equal(actual, x, f"{path.name}, seed {seed}")


def test_half_precision_failure_is_bfloat16_and_refused(run, example):
    """Step 13's failing file: the exporter wrote bfloat16 through a float-only local schema; ORT refuses it."""
    path = run.out / "failures/threshold_bf16_dynamo.onnx"
    assert onnx.load(str(path)).graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16
    with pytest.raises(Exception, match="Type 'tensor[(]bfloat16[)]' of input parameter"):
        ort.InferenceSession(str(path), ortx(), providers=["CPUExecutionProvider"])


RKNN_CST = onnxscript.values.Opset("rknn_cst", 1)  # step 2's, at module level for onnxscript's converter


def chained_messages(error):
    messages = []
    while error is not None:
        messages.append(str(error))
        error = error.__cause__
    return "\n".join(messages)


def test_step2_what_the_script_needs_and_the_schema_adds(example, tmp_path):
    """Step 2: the annotated script needs no schema and gates no dtype (a bfloat16 model gets a bfloat16 node); without
    its annotations it does not export; a plain function reaches the op only through the local schema."""
    model = example.ThresholdModel().eval()
    x = torch.randn(1, 3, 10, 10)
    path = tmp_path / "bf16_script.onnx"
    example.export_threshold(model, x.to(torch.bfloat16), example.threshold_script, str(path))
    written = onnx.load(path)
    assert [n.op_type for n in written.graph.node] == ["cstThreshold"]
    assert written.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16
    onnx.checker.check_model(written, full_check=True)  # no schema: the checker skips the node

    @onnxscript.script(RKNN_CST)
    def unannotated(x, threshold: float, value: float):
        return RKNN_CST.cstThreshold(x, threshold=threshold, value=value)

    table = {torch.ops.aten.threshold.default: unannotated}
    with pytest.raises(Exception) as caught:  # noqa: B017 - the message is what is checked
        torch.onnx.export(model, (x,), dynamo=True, verbose=False, custom_translation_table=table)
    assert "The number of values and replacements must match" in chained_messages(caught.value)
    with pytest.raises(Exception) as caught:  # noqa: B017 - the message is what is checked
        example.export_threshold(model, x, example.threshold_translation, str(tmp_path / "plain.onnx"))
    assert "No schema registered for 'cstThreshold'" in chained_messages(caught.value)
