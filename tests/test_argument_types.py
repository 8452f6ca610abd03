"""What argument_types/test.py writes, its tolerances on other inputs, and the page's surprising facts, reproduced."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Sequence

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from conftest import ROOT, load_example, passed
from onnx.reference import ReferenceEvaluator
from torch.onnx import register_custom_op_symbolic
from torch.onnx.symbolic_helper import parse_args

import harness

NAME = "argument_types"
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # dynamo=False: TorchScript exporter deprecated

# The models' non-tensor arguments, written out again on purpose: these tests read the files, not test.py's constants.
WITH_BIAS = {"alpha": ("FLOAT", 0.5), "k": ("INT", 2), "flag": ("INT", 1), "mode": ("STRING", "sum"),
             "dims": ("INTS", [2, 3]), "scales": ("FLOATS", [1.0, 2.0, 3.0])}
NO_BIAS = {"alpha": ("FLOAT", -1.5), "k": ("INT", -3), "flag": ("INT", 0), "mode": ("STRING", "max"),
           "dims": ("INTS", [1, 3]), "scales": ("FLOATS", [0.5, 1.0, 2.0])}
# one custom node per file: parse_args symbolic, autograd.Function.symbolic, custom_translation_table, "v" symbolic
CUSTOM_NODE_MODELS = [f"all_kinds{k}{b}.onnx" for k in ("", "_function", "_dynamo") for b in ("", "_no_bias")]
CUSTOM_NODE_MODELS.append("all_kinds_legacy.onnx")  # step 6's RegisterOperators op
STANDARD_MODELS = ["all_kinds_standard.onnx", "all_kinds_standard_no_bias.onnx"]
RTOL, ATOL = 1e-5, 1e-5  # the README's: sums of 20 float32 products, in another order than PyTorch's
SEEDS = range(20)
# file -> (with bias, expected attributes)
CASE = {f: ("no_bias" not in f, NO_BIAS if "no_bias" in f else WITH_BIAS) for f in CUSTOM_NODE_MODELS + STANDARD_MODELS}

example = load_example(NAME)


@pytest.fixture(scope="module")
def run(example_run):
    return passed(example_run(NAME))


def torch_all_kinds(x, bias, alpha, k, flag, mode, dims, scales):
    """The op's meaning in PyTorch, independent of the example's C++, Python and numpy versions."""
    y = (x * alpha if bias is None else x * alpha + bias) * torch.tensor(scales, dtype=x.dtype).view(1, -1, 1, 1)
    y = y.relu() if flag else y
    return (y.sum(dims, keepdim=True) if mode == "sum" else y.amax(dims, keepdim=True)) + k


def python_values(attrs: dict) -> list:
    """alpha, k, flag (a bool again), mode, dims, scales back from an attribute table."""
    alpha, k, flag, mode, dims, scales = (attrs[name][1] for name in ("alpha", "k", "flag", "mode", "dims", "scales"))
    return [alpha, k, bool(flag), mode, dims, scales]


@pytest.mark.parametrize("filename", CUSTOM_NODE_MODELS)
def test_one_custom_node_with_each_attribute_of_its_type(run, filename):
    """Every exporter writes the same node; an omitted bias is left out, not written as ''."""
    model = run.model(filename)
    onnx.checker.check_model(model, full_check=True)
    (node,) = model.graph.node
    with_bias, expected = CASE[filename]
    assert (node.domain, node.op_type, list(node.input)) == ("argdemo", "AllKinds", ["x", "bias"][: 1 + with_bias])
    assert harness.attributes(node) == expected
    assert {o.domain: o.version for o in model.opset_import} == {"": 18, "argdemo": 1}


@pytest.mark.parametrize("filename", STANDARD_MODELS)
def test_standard_onnx_turns_arguments_into_constants(run, filename):
    model = run.model(filename)
    onnx.checker.check_model(model, full_check=True)
    with_bias, expected = CASE[filename]
    alpha, k, flag, mode, dims, scales = python_values(expected)
    arrays = (onnx.numpy_helper.to_array(t) for t in model.graph.initializer)
    constants = {(str(c.dtype), tuple(c.reshape(-1).tolist())) for c in arrays}
    # op.Constant(value_ints=dims), op.Constant(value_floats=scales) cast, alpha and k cast
    assert {("int64", tuple(dims)), ("float32", tuple(scales)), ("float32", (alpha,))} <= constants
    assert ("float32", (float(k),)) in constants
    ops = [n.op_type for n in model.graph.node]
    assert ("Add" in ops[:2]) == with_bias and ("Relu" in ops) == flag  # an Add only for a given bias
    assert ("ReduceSum" if mode == "sum" else "ReduceMax") in ops


def test_what_the_run_prints(run):
    """What each symbolic, translation and kernel receives (the page's per-kind tables); each model compared."""
    out, scalars = run.output, "float, int, bool, str, list[int], list[float]"
    # even an omitted bias; the third through all_kinds_legacy_symbolic
    assert out.count(f"all_kinds_symbolic received: Value, Value, {scalars}") == 3
    for who, tensor in [("AllKindsFunction.symbolic", "Value"), ("all_kinds_translation", "SymbolicTensor")]:
        for bias in (tensor, "NoneType"):
            assert f"{who} received: {tensor}, {bias}, {scalars}" in out
    assert "all_kinds_kernel received: float, int, int, str (0.5, 2, 1, 'sum')" in out
    for name in CUSTOM_NODE_MODELS:
        assert f"  {name} (onnx.reference): matches PyTorch (max abs diff " in out, name
    assert "  all_kinds.onnx: matches PyTorch (max abs diff " in out  # run_ort with the Python kernel
    assert "  all_kinds_dynamo.onnx: ONNX Runtime with the Python kernel matches PyTorch" in out
    assert "  all_kinds_standard.onnx: matches PyTorch; Mul Add Mul Relu ReduceSum Add" in out
    assert "  all_kinds_standard_no_bias.onnx: matches PyTorch; Mul Mul ReduceMax Add" in out
    assert "  opcheck: the fake kernel agrees with the C++ kernel, with and without bias" in out


def test_tolerances_hold_over_seeds(run):
    """The README's rtol/atol on 20 other inputs: onnx.reference for the custom node, ORT for standard ONNX."""
    worst = 0.0
    for seed in SEEDS:
        generator = torch.Generator().manual_seed(seed)
        x, bias = torch.randn(2, 3, 4, 5, generator=generator), torch.randn(2, 3, 4, 5, generator=generator)
        for filename in CUSTOM_NODE_MODELS + STANDARD_MODELS:
            with_bias, attrs = CASE[filename]
            feeds = {"x": x.numpy(), **({"bias": bias.numpy()} if with_bias else {})}
            expected = torch_all_kinds(x, bias if with_bias else None, *python_values(attrs)).numpy()
            path = str(run.out / filename)
            if filename in STANDARD_MODELS:
                (actual,) = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
            else:
                (actual,) = ReferenceEvaluator(path, new_ops=[example.AllKinds]).run(None, feeds)
            np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL, err_msg=f"{filename}, seed {seed}")
            worst = max(worst, float(np.max(np.abs(actual - expected))))
    assert worst < ATOL / 2, "the stated tolerance has less than 2x headroom"


# ---- the page's surprising facts, reproduced without the C++ build --------------------------

PY_OP_SCHEMA = "(Tensor x, Tensor? bias, float alpha, int k, bool flag, str mode, int[] dims, float[] scales) -> Tensor"


def reduced_like(x, bias, alpha, k, flag, mode, dims, scales):
    """The fake kernel: x's shape, dims reduced to 1."""
    return x.new_empty([1 if axis in dims else size for axis, size in enumerate(x.shape)])


@functools.cache  # one definition per namespace and test session
def py_op(namespace: str, alias_analysis: str = "FROM_SCHEMA", fake=reduced_like):
    """The op again, defined from Python with a schema string (as TORCH_LIBRARY does), CPU kernel and checked fake."""
    library = torch.library.Library(namespace, "DEF")
    library.define(f"all_kinds{PY_OP_SCHEMA}", alias_analysis=alias_analysis)
    library.impl("all_kinds", torch_all_kinds, "CPU")
    torch.library.register_fake(f"{namespace}::all_kinds", lib=library)(fake)
    op = getattr(torch.ops, namespace).all_kinds
    x = torch.randn(2, 3, 4, 5)
    torch.library.opcheck(op.default, (x, x, *python_values(WITH_BIAS)))  # the fake kernel
    return library, op


def export_dynamo(op, translation, tmp_path) -> onnx.NodeProto:
    model = example.AllKindsModel(op, *python_values(WITH_BIAS)).eval()
    program = torch.onnx.export(model, (torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5)), dynamo=True,
                                opset_version=18, verbose=False, custom_translation_table={op.default: translation})
    program.save(tmp_path / "model.onnx")
    return onnx.load(str(tmp_path / "model.onnx")).graph.node[0]


def export_torchscript(op, symbolic, tmp_path, args, **kwargs) -> onnx.NodeProto:
    """A dynamo=False export of AllKindsModel(op) with WITH_BIAS's values, `symbolic` registered for op."""
    register_custom_op_symbolic(op.default._schema.name, symbolic, 18)
    model = example.AllKindsModel(op, *python_values(WITH_BIAS)).eval()
    torch.onnx.export(model, args, tmp_path / "ts.onnx", dynamo=False, opset_version=18, **kwargs)
    return onnx.load(str(tmp_path / "ts.onnx")).graph.node[0]


def test_translation_annotations_do_not_set_the_attribute_types(tmp_path):
    """None, or wrong, annotations give the identical node: onnxscript types each value by step 3's local schema."""
    _library, op = py_op("argdemo_annotations")
    all_kinds_op = example.AllKindsOp  # step 3's local schema, never registered

    def unannotated(x, bias, alpha, k, flag, mode, dims, scales):
        return all_kinds_op(x, bias, alpha=alpha, k=k, flag=flag, mode=mode, dims=dims, scales=scales)

    def wrongly_annotated(x, bias, alpha: int, k: float, flag: str, mode: int, dims: Sequence[float],
                          scales: Sequence[int]):
        return all_kinds_op(x, bias, alpha=alpha, k=k, flag=flag, mode=mode, dims=dims, scales=scales)

    for translation in (unannotated, wrongly_annotated):
        node = export_dynamo(op, translation, tmp_path)
        assert (list(node.input), harness.attributes(node)) == (["x", "bias"], WITH_BIAS), translation.__name__
    assert not onnx.defs.has("AllKinds", "argdemo")


def test_a_custom_op_exports_like_the_cpp_op(tmp_path, capsys):
    """Step 2: a custom_op (schema: SymInt) takes steps 4 and 6's translation and symbolic: plain ints, same node."""

    @torch.library.custom_op("argdemo_custom::all_kinds", mutates_args=())
    def all_kinds(x: torch.Tensor, bias: torch.Tensor | None, alpha: float, k: int, flag: bool, mode: str,
                  dims: list[int], scales: list[float]) -> torch.Tensor:
        return torch_all_kinds(x, bias, alpha, k, flag, mode, dims, scales)

    all_kinds.register_fake(reduced_like)
    op = torch.ops.argdemo_custom.all_kinds
    assert "SymInt k" in str(op.default._schema)
    x, bias = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5)
    torch.library.opcheck(op.default, (x, bias, *python_values(WITH_BIAS)))  # the fake kernel
    nodes = [export_torchscript(op, example.all_kinds_symbolic, tmp_path, (x, bias), input_names=["x", "bias"]),
             export_dynamo(op, example.all_kinds_translation, tmp_path)]
    for node in nodes:
        assert list(node.input) == ["x", "bias"] and harness.attributes(node) == WITH_BIAS
    out, scalars = capsys.readouterr().out, "float, int, bool, str, list[int], list[float]"
    assert f"all_kinds_symbolic received: Value, Value, {scalars}" in out
    assert f"all_kinds_translation received: SymbolicTensor, SymbolicTensor, {scalars}" in out


def test_parse_args_passing_the_none_value_on_writes_an_empty_input(tmp_path):
    """Step 6: g.op with the omitted bias's Value writes (x, ""), which ONNX allows."""
    _library, op = py_op("argdemo_empty_input")

    @parse_args("v", "v", "f", "i", "b", "s", "is", "fs")
    def symbolic(g, x, bias, alpha, k, flag, mode, dims, scales):
        return g.op("argdemo::AllKinds", x, bias, alpha_f=alpha, k_i=k, flag_i=flag, mode_s=mode, dims_i=dims,
                    scales_f=scales).setType(x.type().with_sizes([2, 3, 1, 1]))

    node = export_torchscript(op, symbolic, tmp_path, (torch.randn(2, 3, 4, 5),), input_names=["x"])
    assert list(node.input) == ["x", ""]


@pytest.mark.parametrize(
    "alias_analysis, descriptor, expected",
    [
        ("FROM_SCHEMA", "fs", [1.0, 2.0, 3.0]),
        ("FROM_SCHEMA", "v", []),  # the "v" workaround: silently an EMPTY list here
        ("CONSERVATIVE", "fs", "does not know how to unpack the ListConstruct node"),
        ("CONSERVATIVE", "v", [1.0, 2.0, 3.0]),
    ],
)
def test_float_list_descriptor_depends_on_how_the_op_was_registered(tmp_path, alias_analysis, descriptor, expected):
    """Step 6: "fs" reads a schema-string op's folded list; RegisterOperators' CONSERVATIVE op keeps a ListConstruct."""
    _library, op = py_op(f"argdemo_list_{alias_analysis.lower()}", alias_analysis)

    @parse_args("v", "v", "f", "i", "b", "s", "is", descriptor)
    def symbolic(g, x, bias, alpha, k, flag, mode, dims, scales):
        if descriptor == "v":
            scales = [element.node().t("value").item() for element in scales.node().inputs()]
        return g.op("argdemo::AllKinds", x, scales_f=scales).setType(x.type().with_sizes([2, 3, 1, 1]))

    fails = isinstance(expected, str)
    with pytest.raises(Exception, match=expected) if fails else contextlib.nullcontext():
        node = export_torchscript(op, symbolic, tmp_path, (torch.randn(2, 3, 4, 5),))
    if not fails:
        assert harness.attributes(node) == {"scales": ("FLOATS", expected)}


def one_node_model(**attributes) -> onnx.ModelProto:
    """A one-node argdemo.AllKinds model with the attributes of all_kinds.onnx, some replaced."""
    values = {name: value for name, (_, value) in WITH_BIAS.items()} | attributes
    node = onnx.helper.make_node("AllKinds", ["x"], ["y"], domain="argdemo", **values)
    value = onnx.helper.make_tensor_value_info
    graph = onnx.helper.make_graph([node], "one_node", [value("x", onnx.TensorProto.FLOAT, [2, 3, 4, 5])],
                                   [value("y", onnx.TensorProto.FLOAT, [2, 3, 1, 1])])
    opsets = [onnx.helper.make_opsetid("", 18), onnx.helper.make_opsetid("argdemo", 1)]
    return onnx.helper.make_model(graph, opset_imports=opsets)


def test_the_checker_reads_attribute_types_only_against_a_registered_schema():
    """Local schema: the full checker passes an INT alpha; registered, it refuses it (a 2nd registration fails)."""
    wrong = one_node_model(alpha=1)
    assert not onnx.defs.has("AllKinds", "argdemo")
    onnx.checker.check_model(wrong, full_check=True)  # no registered schema: attributes unread
    onnx.defs.register_schema(example.ALL_KINDS_SCHEMA)
    try:
        onnx.checker.check_model(one_node_model(), full_check=True)
        expected = "Mismatched attribute type in ' : alpha'. Expected: 'FLOAT', actual: 'INT'"
        with pytest.raises(onnx.checker.ValidationError, match=re.escape(expected)):
            onnx.checker.check_model(wrong, full_check=True)
        with pytest.raises(onnx.defs.SchemaError, match="already registered"):
            onnx.defs.register_schema(example.ALL_KINDS_SCHEMA)
    finally:
        onnx.defs.deregister_schema("AllKinds", 1, "argdemo")
    assert not onnx.defs.has("AllKinds", "argdemo")


def test_opcheck_catches_a_fake_kernel_that_forgets_the_reduction():
    """Step 4's opcheck is no formality: a fake kernel with the input's shape fails it."""
    with pytest.raises(Exception, match="test_faketensor failed"):
        py_op("argdemo_bad_fake", fake=lambda x, *arguments: x.new_empty(x.shape))


@pytest.mark.parametrize(
    "keyword, value, expected_type, dims",
    [
        ("a_t", torch.tensor([1.0, 2.0]), "TENSOR", [2]),
        ("a_z", torch.tensor([3.0]), "TENSOR", []),  # a one-element tensor, stored 0-d
        ("a_g", "graph", "GRAPH", None), ("a_ty", "type", "TYPE_PROTO", None),
        ("a_s", ["p", "q"], "STRINGS", None), ("a_t", [torch.tensor([1.0])], "TENSORS", None),  # a list: plural
        ("a_i", True, "INT", None),  # a bool goes as _i
        # refused (None): no _b, and no plural suffix: the list itself makes the attribute plural
        ("flag_b", True, None, None), ("a_is", [1, 2], None, None), ("a_fs", [1.0], None, None),
    ],
)
def test_g_op_attribute_suffixes(tmp_path, keyword, value, expected_type, dims):
    """Step 6: the suffixes torch's _ATTR_PATTERN takes beyond _f, _i and _s, what they write, and what it refuses."""
    try:
        from torch.onnx._internal.torchscript_exporter import jit_utils
    except ImportError:  # torch < 2.9
        from torch.onnx._internal import jit_utils
    assert jit_utils._ATTR_PATTERN.pattern == "^(.+)_(([ifstgz])|(ty))$"

    def symbolic(g, x, *arguments):  # one node: g.op(..., **{keyword: value})
        given = {"graph": torch._C.Graph(), "type": x.type()}.get(value, value) if isinstance(value, str) else value
        return g.op("demo::X", x, **{keyword: given}).setType(x.type())

    refused = pytest.raises(ValueError, match=f"Invalid attribute specifier '{keyword}'")
    with refused if expected_type is None else contextlib.nullcontext():
        node = export_torchscript(py_op("argdemo_suffix")[1], symbolic, tmp_path, (torch.randn(2, 3, 4, 5),))
    if expected_type is None:
        return
    (attribute,) = node.attribute
    assert onnx.AttributeProto.AttributeType.Name(attribute.type) == expected_type
    if dims is not None:
        assert list(attribute.t.dims) == dims


SEGFAULT_CHILD = """
import torch

class F(torch.autograd.Function):
    forward = staticmethod(lambda ctx, x, bias: x.clone())
    symbolic = staticmethod(lambda g, x, bias: g.op("argdemo::AllKinds", x, bias))  # bias is None: the model omits it

class M(torch.nn.Module):
    forward = lambda self, x: F.apply(x, None)

torch.onnx.export(M(), (torch.randn(2, 3),), "/dev/null", dynamo=False)
print("exported")
"""


def run_child(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_none_handed_to_g_op_crashes_the_interpreter():
    """Step 7: g.op(..., x, None) is a segfault (torch 2.14.1), not an error; if a release makes it one, we see it."""
    child = run_child(SEGFAULT_CHILD)
    assert child.returncode == -signal.SIGSEGV, (child.returncode, child.stdout[-2000:], child.stderr[-2000:])


KERNEL_CHILD = """
import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper
from onnxruntime_extensions import PyCustomOpDef, get_library_path, onnx_op

ort.set_default_logger_severity(4)
x = np.zeros((2, 3, 4, 5), np.float32)
F, I, S = PyCustomOpDef.dt_float, PyCustomOpDef.dt_int64, PyCustomOpDef.dt_string


def model(op_type, inputs=("x", "bias")):
    # One argdemo node with all_kinds.onnx's attributes; one op_type per scenario, so that kernels do not conflict.
    node = helper.make_node(op_type, list(inputs), ["y"], domain="argdemo",
                            alpha=0.5, k=2, flag=1, mode="sum", dims=[2, 3], scales=[1.0, 2.0, 3.0])
    value = helper.make_tensor_value_info
    graph = helper.make_graph([node], "g", [value(n, onnx.TensorProto.FLOAT, [2, 3, 4, 5]) for n in ["x", "bias"]],
                              [value("y", onnx.TensorProto.FLOAT, None)])
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("argdemo", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10).SerializeToString()


def options():
    options = ort.SessionOptions()
    options.register_custom_ops_library(get_library_path())
    return options


def scenario(name, op_type, attrs, inputs=("x", "bias"), declare_first=True):
    early = None if declare_first else options()

    @onnx_op(op_type="argdemo::" + op_type, inputs=[PyCustomOpDef.dt_float, PyCustomOpDef.dt_float],
             outputs=[PyCustomOpDef.dt_float], attrs=attrs)
    def kernel(x, bias, **attributes):
        return x[:, :, :1, :1].copy()

    try:
        session = ort.InferenceSession(model(op_type, inputs), early or options(), providers=["CPUExecutionProvider"])
        session.run(None, {"x": x, "bias": x})
        print(f"{name}: ran", flush=True)
    except Exception as error:
        print(f"{name}: {str(error).splitlines()[0]}", flush=True)


{body}
"""

MISMATCH = "Unable to find attribute '{}' due to 'Attribute name and type don't match'"
# Step 3's scenarios, run in this order in one child: (name, scenario()'s other arguments, what it prints)
KERNEL_SCENARIOS = [
    # the control: the node carries list attributes too, and a kernel declaring scalars runs it
    ("scalars", '"Scalars", {"alpha": F, "k": I, "mode": S}', "ran"),
    # whatever scalar type a kernel declares for an INTS or FLOATS attribute, ORT refuses the session
    ("dims as dt_int64", '"DimsInt", {"dims": I}', MISMATCH.format("dims")),
    ("dims as dt_string", '"DimsString", {"dims": S}', MISMATCH.format("dims")),
    ("scales as dt_float", '"ScalesFloat", {"scales": F}', MISMATCH.format("scales")),
    # a node written as (x, "") is refused too: the kernel's inputs are not optional
    ("empty input", '"EmptyInput", {"alpha": F}, inputs=("x", "")',
     "input 1 is marked single but has an empty string in the graph"),
    # session options that registered the library before the @onnx_op lack the kernel
    ("declared late", '"Late", {"alpha": F}, declare_first=False', "argdemo:Late(-1) is not a registered function/op"),
    # last: a second @onnx_op for an op_type makes every later session fail
    ("declared twice", '"Scalars", {"alpha": F}', "Conflicting with a registered kernel with op versions"),
]


@pytest.fixture(scope="module")
def kernel_scenarios() -> dict[str, str]:
    """Each scenario's outcome, from one child process (importing onnxruntime_extensions imports torch: slow)."""
    pytest.importorskip("onnxruntime_extensions")
    body = "\n".join(f'scenario("{name}", {arguments})' for name, arguments, _ in KERNEL_SCENARIOS)
    child = run_child(KERNEL_CHILD.replace("{body}", body))
    assert child.returncode == 0, child.stderr[-3000:]
    return dict(line.split(": ", 1) for line in child.stdout.splitlines() if ": " in line)


@pytest.mark.parametrize("scenario, expected", [(name, expected) for name, _, expected in KERNEL_SCENARIOS])
def test_python_kernel_scenarios(kernel_scenarios, scenario, expected):
    """Step 3: what an onnxruntime-extensions Python kernel can and cannot read."""
    assert expected in kernel_scenarios[scenario]


def test_python_kernel_has_no_bool_attribute_type():
    """Step 3: dt_bool is accepted as an attribute type, and aborts the process when the node runs."""
    pytest.importorskip("onnxruntime_extensions")
    child = run_child(KERNEL_CHILD.replace("{body}", 'scenario("bool", "Bool", {"flag": PyCustomOpDef.dt_bool})'))
    assert child.returncode == -signal.SIGABRT, (child.returncode, child.stdout, child.stderr[-2000:])
    assert "Unsupported attribute type 9" in child.stderr


def step_statuses(out) -> tuple[dict, dict[str, str]]:
    """steps.json (the top README's version table is made from it): step number -> status."""
    summary = json.loads((out / "steps.json").read_text(encoding="utf-8"))
    return summary, {number: step["status"] for number, step in summary["steps"].items()}


def test_without_a_compiler_the_cpp_steps_skip(tmp_path):
    """No C++ compiler: step 1 and the steps that use its op say SKIP, steps 2 and 3 still run, exit 77."""
    child = subprocess.run([sys.executable, str(ROOT / NAME / "test.py"), "--out", str(tmp_path)], capture_output=True,
                           text=True, timeout=600, env={**os.environ, "CXX": "no-such-compiler"})
    assert child.returncode == 77, child.stdout[-3000:]
    assert "SKIP step 1: no C++ compiler: 'no-such-compiler' is not on PATH" in child.stdout
    assert "custom_op schema: argdemo::all_kinds_py(" in child.stdout  # step 2 ran
    assert "registered with onnx.defs: False" in child.stdout  # step 3 ran
    for step in range(4, 9):
        assert f"SKIP step {step}: needs step 1's C++ op" in child.stdout
    assert not list(tmp_path.glob("*.onnx"))
    summary, statuses = step_statuses(tmp_path)
    assert statuses == {"1": "skipped", "2": "runs", "3": "runs", **{str(n): "skipped" for n in range(4, 9)}}
    assert summary["steps"]["1"]["why"].startswith("no C++ compiler"), summary


def test_steps_json_says_every_step_runs_on_the_pinned_torch(run):
    """On the pinned torch no step is gated: steps.json says `runs` for all 8; no differs(), no SKIP."""
    summary, statuses = step_statuses(run.out)
    assert summary["torch"] == torch.__version__.split("+")[0]
    assert statuses == {str(n): "runs" for n in range(1, 9)}
    assert f"on torch {torch.__version__}:" not in run.output and "SKIP" not in run.output


# ---- step 8: the float16 and bfloat16 models, run with a kernel of these tests ----------------

HALF = {"float16": onnx.TensorProto.FLOAT16, "bfloat16": onnx.TensorProto.BFLOAT16}
HALF_MODELS = [f"all_kinds_{dtype}{exporter}.onnx" for dtype in HALF for exporter in ("_dynamo", "")]
UNIT = {"float16": 2.0**-10, "bfloat16": 2.0**-7}  # the relative spacing of each dtype's values
HALF_RTOL_UNITS = 3  # the page's: 5 roundings of half a unit, and float32's own error below one


@functools.cache
def independent_kernel() -> ort.SessionOptions:
    """argdemo::AllKinds for ONNX Runtime, float32 as the page's, computed by torch_all_kinds (not test.py's numpy
    kernel; test.py's is declared inside its step 3, which this process never runs). Declared once per process."""
    from onnxruntime_extensions import PyCustomOpDef, get_library_path, onnx_op

    _, _, _, _, dims, scales = python_values(WITH_BIAS)  # a Python kernel cannot read INTS or FLOATS

    @onnx_op(op_type="argdemo::AllKinds", inputs=[PyCustomOpDef.dt_float, PyCustomOpDef.dt_float],
             outputs=[PyCustomOpDef.dt_float],
             attrs={"alpha": PyCustomOpDef.dt_float, "k": PyCustomOpDef.dt_int64, "flag": PyCustomOpDef.dt_int64,
                    "mode": PyCustomOpDef.dt_string})
    def kernel(x, bias, alpha, k, flag, mode):
        assert x.dtype == bias.dtype == np.float32, (x.dtype, bias.dtype)
        y = torch_all_kinds(torch.from_numpy(x), torch.from_numpy(bias), alpha, k, bool(flag), mode, dims, scales)
        return y.numpy()

    def options() -> ort.SessionOptions:
        options = ort.SessionOptions()
        options.register_custom_ops_library(get_library_path())
        return options

    return options


def run_half(path, inputs: list[np.ndarray], dtype: str) -> np.ndarray:
    """PATH in ONNX Runtime, INPUTS (float16, or ml_dtypes.bfloat16) in and the output out as raw 16-bit values bound
    with ONNX Runtime's own OrtValue API: not test.py's DLPack helper."""
    session = ort.InferenceSession(str(path), independent_kernel()(), providers=["CPUExecutionProvider"])
    assert [a.type for a in session.get_inputs() + session.get_outputs()] == [f"tensor({dtype})"] * 3
    as_value = ort.OrtValue.ortvalue_from_numpy_with_onnx_type
    out = np.zeros(session.get_outputs()[0].shape, np.uint16)
    binding = session.io_binding()
    for arg, x in zip(session.get_inputs(), inputs, strict=True):
        binding.bind_ortvalue_input(arg.name, as_value(np.ascontiguousarray(x).view(np.uint16), HALF[dtype]))
    binding.bind_ortvalue_output(session.get_outputs()[0].name, as_value(out, HALF[dtype]))
    session.run_with_iobinding(binding)
    return out.view(inputs[0].dtype)


def half_edges(dtype: str, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x and bias in DTYPE, random, with NaN, infinities, the dtype's largest value, and x * 0.5 + bias at ReLU's
    threshold 0 and one step either side of it."""
    generator = torch.Generator().manual_seed(100 + seed)
    torch_dtype = getattr(torch, dtype)
    x = (torch.randn(2, 3, 4, 5, generator=generator) * 4).to(torch_dtype)
    bias = torch.randn(2, 3, 4, 5, generator=generator).to(torch_dtype)
    x[0, 0, 0, :3] = -2 * bias[0, 0, 0, :3]  # x * 0.5 + bias == 0 exactly (both exact in DTYPE)
    bits = x.view(torch.int16)
    bits[0, 1, 0, :3] = (-2 * bias[0, 1, 0, :3]).view(torch.int16) + 1  # one step further from 0 than -bias * 2
    bits[0, 2, 0, :3] = (-2 * bias[0, 2, 0, :3]).view(torch.int16) - 1  # one step nearer 0
    x[1, 0, 1, 1], x[1, 1, 2, 2], bias[1, 2, 3, 3] = float("nan"), float("inf"), float("-inf")
    x[1, 2, 0, 0] = torch.finfo(torch_dtype).max  # overflows in the channel of scale 3, on both sides
    x[0, 0, 3, 4] = torch.finfo(torch_dtype).max  # scale 1: a large finite output (no NaN in that sum)
    return x, bias


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A float16 or bfloat16 tensor as numpy (ml_dtypes.bfloat16 for bfloat16), bit for bit."""
    import ml_dtypes

    dtype = {torch.float16: np.float16, torch.bfloat16: ml_dtypes.bfloat16}[t.dtype]
    return t.contiguous().view(torch.int16).numpy().view(dtype)


@pytest.mark.parametrize("filename", HALF_MODELS)
def test_half_precision_models_follow_torch_in_onnxruntime(run, filename):
    """Step 8's files: Cast, the float32 node, Cast back; in ONNX Runtime with this file's kernel, on inputs test.py
    never used, against the op in PyTorch in that dtype at the page's tolerance (3 units of the output's dtype)."""
    pytest.importorskip("onnxruntime_extensions")
    dtype = filename.split("_")[2].removesuffix(".onnx")
    model = run.model(filename)
    assert [i.type.tensor_type.elem_type for i in model.graph.input] == [HALF[dtype]] * 2
    (node,) = [n for n in model.graph.node if n.domain == "argdemo"]
    assert harness.attributes(node) == WITH_BIAS
    casts = [n for n in model.graph.node if n.op_type == "Cast"]
    assert [onnx.helper.get_attribute_value(n.attribute[0]) for n in casts[:2]] == [onnx.TensorProto.FLOAT] * 2
    worst = 0.0
    for seed in range(5):
        x, bias = half_edges(dtype, seed)
        actual = torch.from_numpy(run_half(run.out / filename, [to_numpy(x), to_numpy(bias)], dtype).view(np.int16))
        actual = actual.view(x.dtype)
        expected = torch_all_kinds(x, bias, *python_values(WITH_BIAS))  # PyTorch in that dtype
        assert expected.dtype == x.dtype and expected[1].isnan().any() and expected[1].isinf().any()
        assert expected[0, 0] > torch.finfo(x.dtype).max / 4  # the large finite output
        torch.testing.assert_close(actual, expected, rtol=HALF_RTOL_UNITS * UNIT[dtype], atol=0, equal_nan=True,
                                   msg=lambda m, s=seed: f"{filename}, seed {s}: {m}")
        finite = expected.isfinite()
        error = ((actual.double() - expected.double()).abs() / expected.double().abs())[finite].max()
        worst = max(worst, float(error) / UNIT[dtype])
    assert worst <= 2.5, f"{filename}: {worst} units, beyond the page's derivation (5 roundings of half a unit)"


def test_half_precision_failure_is_bfloat16_and_refused(run):
    """Step 8's failing file: the exporter wrote a bfloat16 AllKinds through the float-only local schema, unchecked;
    ONNX Runtime refuses it, and the full checker with the schema registered catches it."""
    pytest.importorskip("onnxruntime_extensions")
    path = str(run.out / "failures/all_kinds_bf16_dynamo.onnx")
    model = onnx.load(path)
    assert [i.type.tensor_type.elem_type for i in model.graph.input] == [onnx.TensorProto.BFLOAT16] * 2
    assert [n.op_type for n in model.graph.node] == ["AllKinds"]
    onnx.checker.check_model(model, full_check=True)  # the schema unregistered: passes
    with pytest.raises(Exception, match=re.escape("Type 'tensor(bfloat16)' of input parameter (x)")):
        ort.InferenceSession(path, independent_kernel()(), providers=["CPUExecutionProvider"])
    onnx.defs.register_schema(example.ALL_KINDS_SCHEMA)
    try:
        with pytest.raises(onnx.shape_inference.InferenceError, match=re.escape("unsupported type: tensor(bfloat16)")):
            onnx.checker.check_model(model, full_check=True)
    finally:
        onnx.defs.deregister_schema("AllKinds", 1, "argdemo")
