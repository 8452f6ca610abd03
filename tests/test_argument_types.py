"""What argument_types/test.py writes, attribute by attribute and exporter by exporter, its
tolerances on other inputs, and the page's surprising facts, each reproduced here (in a child
process where it crashes one)."""

from __future__ import annotations

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

import harness

NAME = "argument_types"
# The dynamo=False exports below warn that the TorchScript-based exporter is deprecated (said).
TORCHSCRIPT_DEPRECATION = pytest.mark.filterwarnings("ignore::DeprecationWarning")

# The models' non-tensor arguments (test.py's WITH_BIAS and NO_BIAS), written out again on purpose:
# these tests read the files, not the example's constants.
WITH_BIAS = {
    "alpha": ("FLOAT", 0.5),
    "k": ("INT", 2),
    "flag": ("INT", 1),
    "mode": ("STRING", "sum"),
    "dims": ("INTS", [2, 3]),
    "scales": ("FLOATS", [1.0, 2.0, 3.0]),
}
NO_BIAS = {
    "alpha": ("FLOAT", -1.5),
    "k": ("INT", -3),
    "flag": ("INT", 0),
    "mode": ("STRING", "max"),
    "dims": ("INTS", [1, 3]),
    "scales": ("FLOATS", [0.5, 1.0, 2.0]),
}
# one custom node per file: (file, exporter, inputs, attributes)
CUSTOM_NODE_MODELS = [
    ("all_kinds.onnx", "parse_args symbolic", ["x", "bias"], WITH_BIAS),
    ("all_kinds_no_bias.onnx", "parse_args symbolic", ["x"], NO_BIAS),
    ("all_kinds_legacy.onnx", '"v" symbolic, RegisterOperators op', ["x", "bias"], WITH_BIAS),
    ("all_kinds_function.onnx", "autograd.Function.symbolic", ["x", "bias"], WITH_BIAS),
    ("all_kinds_function_no_bias.onnx", "autograd.Function.symbolic", ["x"], NO_BIAS),
    ("all_kinds_dynamo.onnx", "custom_translation_table", ["x", "bias"], WITH_BIAS),
    ("all_kinds_dynamo_no_bias.onnx", "custom_translation_table", ["x"], NO_BIAS),
]
STANDARD_MODELS = [
    ("all_kinds_standard.onnx", WITH_BIAS),
    ("all_kinds_standard_no_bias.onnx", NO_BIAS),
]
RTOL, ATOL = (
    1e-5,
    1e-5,
)  # the README's: sums of 20 float32 products, in another order than PyTorch's
SEEDS = range(20)


example = load_example(NAME)


@pytest.fixture(scope="module")
def run(example_run):
    return passed(example_run(NAME))


def torch_all_kinds(x, bias, alpha, k, flag, mode, dims, scales):
    """The op's meaning in PyTorch, independent of the example's C++, Python and numpy versions."""
    y = x * alpha
    if bias is not None:
        y = y + bias
    y = y * torch.tensor(scales, dtype=x.dtype).view(1, -1, 1, 1)
    if flag:
        y = y.relu()
    y = y.sum(dims, keepdim=True) if mode == "sum" else y.amax(dims, keepdim=True)
    return y + k


def python_values(attrs: dict) -> list:
    """The model's arguments back from the attribute table: alpha, k, flag (a bool again), mode,
    dims, scales."""
    alpha, k, flag, mode, dims, scales = (
        attrs[name][1] for name in ("alpha", "k", "flag", "mode", "dims", "scales")
    )
    return [alpha, k, bool(flag), mode, dims, scales]


# ---- the written models, attribute by attribute ---------------------------------------------


@pytest.mark.parametrize("filename, exporter, inputs, expected", CUSTOM_NODE_MODELS)
def test_one_custom_node_with_each_attribute_of_its_type(run, filename, exporter, inputs, expected):
    model = run.model(filename)
    onnx.checker.check_model(model, full_check=True)
    (node,) = model.graph.node
    assert (node.domain, node.op_type) == ("argdemo", "AllKinds"), exporter
    assert list(node.input) == inputs, f"{exporter}: an omitted bias is left out, not written as ''"
    assert harness.attributes(node) == expected, exporter
    assert {o.domain: o.version for o in model.opset_import} == {"": 18, "argdemo": 1}


def test_every_exporter_writes_the_same_node(run):
    """Attribute order aside, the three mechanisms agree on every input, type and value."""
    for with_bias in (True, False):
        suffix = "" if with_bias else "_no_bias"
        nodes = [
            run.model(f"{stem}{suffix}.onnx").graph.node[0]
            for stem in ("all_kinds", "all_kinds_function")
        ]
        nodes.append(run.model(f"all_kinds_dynamo{suffix}.onnx").graph.node[0])
        if with_bias:  # step 6's RegisterOperators op, with the "v" workaround
            nodes.append(run.model("all_kinds_legacy.onnx").graph.node[0])
        assert len({tuple(n.input) for n in nodes}) == 1
        assert all(harness.attributes(n) == harness.attributes(nodes[0]) for n in nodes)


@pytest.mark.parametrize("filename, expected", STANDARD_MODELS)
def test_standard_onnx_turns_arguments_into_constants(run, filename, expected):
    model = run.model(filename)
    onnx.checker.check_model(model, full_check=True)
    constants = {
        (str(c.dtype), tuple(c.reshape(-1).tolist()))
        for c in (onnx.numpy_helper.to_array(t) for t in model.graph.initializer)
    }
    assert ("int64", tuple(expected["dims"][1])) in constants  # op.Constant(value_ints=dims)
    assert (
        "float32",
        tuple(expected["scales"][1]),
    ) in constants  # op.Constant(value_floats=scales), cast
    assert ("float32", (expected["alpha"][1],)) in constants
    assert ("float32", (float(expected["k"][1]),)) in constants
    ops = [n.op_type for n in model.graph.node]
    assert ("Add" in ops[:2]) == (expected is WITH_BIAS)  # bias: an Add only when given
    assert ("Relu" in ops) == bool(expected["flag"][1])
    assert ("ReduceSum" if expected["mode"][1] == "sum" else "ReduceMax") in ops


def test_what_each_mechanism_receives(run):
    """The lines the example prints from inside each symbolic, translation and kernel: the evidence
    of the page's per-kind tables."""
    out = run.output
    scalars = "float, int, bool, str, list[int], list[float]"
    assert (
        out.count(f"all_kinds_symbolic received: Value, Value, {scalars}") == 3
    )  # even an omitted bias; the third through all_kinds_legacy_symbolic
    assert f"AllKindsFunction.symbolic received: Value, Value, {scalars}" in out
    assert f"AllKindsFunction.symbolic received: Value, NoneType, {scalars}" in out
    assert f"all_kinds_translation received: SymbolicTensor, SymbolicTensor, {scalars}" in out
    assert f"all_kinds_translation received: SymbolicTensor, NoneType, {scalars}" in out
    assert "all_kinds_kernel received: float, int, int, str (0.5, 2, 1, 'sum')" in out


def test_schemas(run):
    out = run.output
    assert (
        "C++ schema: argdemo::all_kinds(Tensor x, Tensor? bias, float alpha, int k, bool flag, "
        "str mode, int[] dims, float[] scales) -> Tensor" in out
    )
    assert (
        "custom_op schema: argdemo::all_kinds_py(Tensor x, Tensor? bias, float alpha, SymInt k, "
        "bool flag, str mode, SymInt[] dims, float[] scales) -> Tensor" in out
    )


def test_build_and_comparison_lines(run):
    """Step 1 says it builds, then whether it built or reused the cache; each comparison names its
    model."""
    out = run.output
    assert "  building the C++ extension: about a minute the first time, cached after" in out
    assert "  built " in out or "  reused the cached build " in out
    for name in [
        f"all_kinds{kind}{bias}.onnx"
        for kind in ("", "_function", "_dynamo")
        for bias in ("", "_no_bias")
    ]:
        assert f"  {name} (onnx.reference): matches PyTorch (max abs diff " in out, name
    assert "  all_kinds_legacy.onnx (onnx.reference): matches PyTorch (max abs diff " in out
    assert "  all_kinds_legacy.onnx: the very node of all_kinds.onnx" in out
    # dynamo=True: assert_onnx_program in ONNX Runtime (with the Python kernel for the custom node)
    assert "  all_kinds_dynamo.onnx: ONNX Runtime with the Python kernel matches PyTorch" in out
    assert "  all_kinds_standard.onnx: matches PyTorch; Mul Add Mul Relu ReduceSum Add" in out
    assert "  all_kinds_standard_no_bias.onnx: matches PyTorch; Mul Mul ReduceMax Add" in out
    # dynamo=False: run_ort with the Python kernel, and compare
    assert "  all_kinds.onnx: matches PyTorch (max abs diff " in out
    assert "  opcheck: the fake kernel agrees with the C++ kernel, with and without bias" in out


def test_tolerances_hold_over_seeds(run):
    """The README's rtol/atol on 20 other inputs: onnx.reference for the custom node, ORT for
    standard ONNX."""
    worst = 0.0
    for seed in SEEDS:
        generator = torch.Generator().manual_seed(seed)
        x, bias = (
            torch.randn(2, 3, 4, 5, generator=generator),
            torch.randn(2, 3, 4, 5, generator=generator),
        )
        cases = [(f, inputs == ["x", "bias"], attrs) for f, _, inputs, attrs in CUSTOM_NODE_MODELS]
        cases += [(f, attrs is WITH_BIAS, attrs) for f, attrs in STANDARD_MODELS]
        for filename, with_bias, attrs in cases:
            feeds = {"x": x.numpy(), **({"bias": bias.numpy()} if with_bias else {})}
            expected = torch_all_kinds(
                x, bias if with_bias else None, *python_values(attrs)
            ).numpy()
            path = str(run.out / filename)
            if filename.startswith("all_kinds_standard"):
                (actual,) = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
                    None, feeds
                )
            else:
                (actual,) = ReferenceEvaluator(path, new_ops=[example.AllKinds]).run(None, feeds)
            np.testing.assert_allclose(
                actual, expected, rtol=RTOL, atol=ATOL, err_msg=f"{filename}, seed {seed}"
            )
            worst = max(worst, float(np.max(np.abs(actual - expected))))
    print(f"largest difference over {len(SEEDS)} seeds: {worst:.1e}")
    assert worst < ATOL / 2, "the stated tolerance has less than 2x headroom"


# ---- the page's surprising facts, reproduced without the C++ build --------------------------

PY_OP_SCHEMA = (
    "(Tensor x, Tensor? bias, float alpha, int k, bool flag, str mode, int[] dims, float[] scales)"
    " -> Tensor"
)


def py_op(namespace: str, alias_analysis: str = "FROM_SCHEMA"):
    """The op again, defined from Python with a schema string (as TORCH_LIBRARY does), CPU kernel
    and fake."""
    library = torch.library.Library(namespace, "DEF")
    library.define(f"all_kinds{PY_OP_SCHEMA}", alias_analysis=alias_analysis)
    library.impl("all_kinds", torch_all_kinds, "CPU")
    torch.library.register_fake(f"{namespace}::all_kinds", lib=library)(
        lambda x, bias, alpha, k, flag, mode, dims, scales: x.new_empty(
            [1 if axis in dims else size for axis, size in enumerate(x.shape)]
        )
    )
    op = getattr(torch.ops, namespace).all_kinds
    x = torch.randn(2, 3, 4, 5)
    torch.library.opcheck(op.default, (x, x, *python_values(WITH_BIAS)))  # the fake kernel
    return library, op


def export_dynamo(op, translation, tmp_path) -> onnx.NodeProto:
    model = example.AllKindsModel(op, *python_values(WITH_BIAS)).eval()
    x, bias = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5)
    program = torch.onnx.export(
        model,
        (x, bias),
        dynamo=True,
        opset_version=18,
        verbose=False,
        custom_translation_table={op.default: translation},
    )
    program.save(tmp_path / "model.onnx")
    return onnx.load(str(tmp_path / "model.onnx")).graph.node[0]


def test_translation_annotations_do_not_set_the_attribute_types(tmp_path, capsys):
    """A plain-function translation's annotations are not used: none, or wrong ones, give the
    identical node. The values arrive as Python objects and onnxscript converts each to the type
    step 3's local schema declares."""
    _library, op = py_op("argdemo_annotations")
    all_kinds_op = example.AllKindsOp  # step 3's local schema, never registered

    def unannotated(x, bias, alpha, k, flag, mode, dims, scales):
        return all_kinds_op(
            x, bias, alpha=alpha, k=k, flag=flag, mode=mode, dims=dims, scales=scales
        )

    def wrongly_annotated(
        x,
        bias,
        alpha: int,
        k: float,
        flag: str,
        mode: int,
        dims: Sequence[float],
        scales: Sequence[int],
    ):
        return all_kinds_op(
            x, bias, alpha=alpha, k=k, flag=flag, mode=mode, dims=dims, scales=scales
        )

    for translation in (unannotated, wrongly_annotated):
        node = export_dynamo(op, translation, tmp_path)
        assert list(node.input) == ["x", "bias"]
        assert harness.attributes(node) == WITH_BIAS, translation.__name__
    assert not onnx.defs.has("AllKinds", "argdemo")


@TORCHSCRIPT_DEPRECATION
def test_a_custom_op_exports_like_the_cpp_op(tmp_path, capsys):
    """Step 2's claim: a torch.library.custom_op (whose schema says SymInt) takes the very
    translation and symbolic of steps 4 and 6, which receive plain ints, and gives the very node."""
    from torch.onnx import register_custom_op_symbolic

    @torch.library.custom_op("argdemo_custom::all_kinds", mutates_args=())
    def all_kinds(
        x: torch.Tensor,
        bias: torch.Tensor | None,
        alpha: float,
        k: int,
        flag: bool,
        mode: str,
        dims: list[int],
        scales: list[float],
    ) -> torch.Tensor:
        return torch_all_kinds(x, bias, alpha, k, flag, mode, dims, scales)

    all_kinds.register_fake(
        lambda x, bias, alpha, k, flag, mode, dims, scales: x.new_empty(
            [1 if axis in dims else size for axis, size in enumerate(x.shape)]
        )
    )
    op = torch.ops.argdemo_custom.all_kinds
    assert "SymInt k" in str(op.default._schema)
    x, bias = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5)
    torch.library.opcheck(op.default, (x, bias, *python_values(WITH_BIAS)))  # the fake kernel
    register_custom_op_symbolic("argdemo_custom::all_kinds", example.all_kinds_symbolic, 18)
    model = example.AllKindsModel(op, *python_values(WITH_BIAS)).eval()
    path = tmp_path / "custom_op.onnx"
    torch.onnx.export(
        model, (x, bias), path, dynamo=False, opset_version=18, input_names=["x", "bias"]
    )
    nodes = [
        onnx.load(str(path)).graph.node[0],
        export_dynamo(op, example.all_kinds_translation, tmp_path),
    ]
    for node in nodes:
        assert list(node.input) == ["x", "bias"] and harness.attributes(node) == WITH_BIAS
    out = capsys.readouterr().out
    assert (
        "all_kinds_symbolic received: Value, Value, float, int, bool, str, list[int], list[float]"
        in out
    )
    assert (
        "all_kinds_translation received: SymbolicTensor, SymbolicTensor, float, int, bool, str, "
        "list[int]" in out
    )


@TORCHSCRIPT_DEPRECATION
def test_parse_args_passing_the_none_value_on_writes_an_empty_input(tmp_path):
    """Step 6: g.op with the omitted bias's Value writes (x, ""), which ONNX allows."""
    from torch.onnx import register_custom_op_symbolic
    from torch.onnx.symbolic_helper import parse_args

    _library, op = py_op("argdemo_empty_input")

    @parse_args("v", "v", "f", "i", "b", "s", "is", "fs")
    def symbolic(g, x, bias, alpha, k, flag, mode, dims, scales):
        attributes = {
            "alpha_f": alpha,
            "k_i": k,
            "flag_i": flag,
            "mode_s": mode,
            "dims_i": dims,
            "scales_f": scales,
        }
        y = g.op("argdemo::AllKinds", x, bias, **attributes)
        return y.setType(x.type().with_sizes([2, 3, 1, 1]))

    register_custom_op_symbolic("argdemo_empty_input::all_kinds", symbolic, 18)
    model = example.AllKindsModel(op, *python_values(WITH_BIAS)).eval()
    path = tmp_path / "empty_input.onnx"
    torch.onnx.export(
        model, (torch.randn(2, 3, 4, 5),), path, dynamo=False, opset_version=18, input_names=["x"]
    )
    (node,) = onnx.load(str(path)).graph.node
    assert list(node.input) == ["x", ""]


PY_OPS: dict[str, object] = {}  # alias analysis -> (library, op), defined once per test session


@TORCHSCRIPT_DEPRECATION
@pytest.mark.parametrize(
    "alias_analysis, descriptor, expected",
    [
        ("FROM_SCHEMA", "fs", [1.0, 2.0, 3.0]),
        ("FROM_SCHEMA", "v", []),  # the "v" workaround: silently an EMPTY list here
        ("CONSERVATIVE", "fs", "does not know how to unpack the ListConstruct node"),
        ("CONSERVATIVE", "v", [1.0, 2.0, 3.0]),
    ],
)
def test_float_list_descriptor_depends_on_how_the_op_was_registered(
    tmp_path, alias_analysis, descriptor, expected
):
    """Step 6: "fs" reads a float list from a schema-string op (TORCH_LIBRARY, custom_op), where
    the traced list is folded into one onnx::Constant. torch::RegisterOperators gives an op
    CONSERVATIVE alias analysis (it may write to its lists), so the list stays a
    prim::ListConstruct: "fs" fails, and "v" plus reading each element's constant works (step 6
    shows both with a C++ RegisterOperators op). That workaround, on a schema-string op, finds a
    Constant with no inputs and writes an empty list without a word (the page only says so)."""
    from torch.onnx import register_custom_op_symbolic
    from torch.onnx.symbolic_helper import parse_args

    namespace = f"argdemo_list_{alias_analysis.lower()}"
    if alias_analysis not in PY_OPS:
        PY_OPS[alias_analysis] = py_op(namespace, alias_analysis)
    _library, op = PY_OPS[alias_analysis]

    @parse_args("v", "v", "f", "i", "b", "s", "is", descriptor)
    def symbolic(g, x, bias, alpha, k, flag, mode, dims, scales):
        if descriptor == "v":
            scales = [element.node().t("value").item() for element in scales.node().inputs()]
        return g.op("argdemo::AllKinds", x, scales_f=scales).setType(
            x.type().with_sizes([2, 3, 1, 1])
        )

    register_custom_op_symbolic(f"{namespace}::all_kinds", symbolic, 18)
    model = example.AllKindsModel(op, *python_values(WITH_BIAS)).eval()
    path = tmp_path / "scales.onnx"
    if isinstance(expected, str):
        with pytest.raises(Exception, match=expected):
            torch.onnx.export(
                model, (torch.randn(2, 3, 4, 5),), path, dynamo=False, opset_version=18
            )
        return
    torch.onnx.export(model, (torch.randn(2, 3, 4, 5),), path, dynamo=False, opset_version=18)
    (node,) = onnx.load(str(path)).graph.node
    assert harness.attributes(node) == {"scales": ("FLOATS", expected)}


def one_node_model(**attributes) -> onnx.ModelProto:
    """A one-node argdemo.AllKinds model with the attributes of all_kinds.onnx, some replaced."""
    values = {name: value for name, (_, value) in WITH_BIAS.items()} | attributes
    node = onnx.helper.make_node("AllKinds", ["x"], ["y"], domain="argdemo", **values)
    graph = onnx.helper.make_graph(
        [node],
        "one_node",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3, 4, 5])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3, 1, 1])],
    )
    opsets = [onnx.helper.make_opsetid("", 18), onnx.helper.make_opsetid("argdemo", 1)]
    return onnx.helper.make_model(graph, opset_imports=opsets)


def test_the_checker_reads_attribute_types_only_against_a_registered_schema():
    """Notes: with step 3's schema local, the full checker passes a node whose alpha is an INT.
    Registered, the same schema makes it refuse that node, and a second registration fails;
    deregistered after."""
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
    library = torch.library.Library("argdemo_bad_fake", "DEF")
    library.define(f"all_kinds{PY_OP_SCHEMA}")
    library.impl("all_kinds", torch_all_kinds, "CPU")
    torch.library.register_fake("argdemo_bad_fake::all_kinds", lib=library)(
        lambda x, bias, alpha, k, flag, mode, dims, scales: x.new_empty(x.shape)
    )
    x = torch.randn(2, 3, 4, 5)
    with pytest.raises(Exception, match="test_faketensor failed"):
        torch.library.opcheck(
            torch.ops.argdemo_bad_fake.all_kinds.default, (x, x, *python_values(WITH_BIAS))
        )


def jit_utils():
    """torch's g.op helpers: moved under torchscript_exporter/ in torch 2.9."""
    try:
        from torch.onnx._internal.torchscript_exporter import jit_utils
    except ImportError:
        from torch.onnx._internal import jit_utils
    return jit_utils


SUFFIX_OP: list = []  # (library, op), defined once per test session


def export_with_keyword(tmp_path, keyword: str, value) -> onnx.NodeProto:
    """A dynamo=False export whose symbolic writes one node: g.op(..., **{keyword: value})."""
    from torch.onnx import register_custom_op_symbolic

    if not SUFFIX_OP:
        library = torch.library.Library("argdemo_suffix", "DEF")
        library.define("f(Tensor x) -> Tensor")
        library.impl("f", lambda x: x.clone(), "CPU")
        SUFFIX_OP.append((library, torch.ops.argdemo_suffix.f))

    def symbolic(g, x):
        given = (
            {"graph": torch._C.Graph(), "type": x.type()}.get(value, value)
            if isinstance(value, str)
            else value
        )
        return g.op("demo::X", x, **{keyword: given}).setType(x.type())

    register_custom_op_symbolic("argdemo_suffix::f", symbolic, 18)

    class Model(torch.nn.Module):
        def forward(self, x):
            return SUFFIX_OP[0][1](x)

    path = tmp_path / "suffix.onnx"
    torch.onnx.export(Model(), (torch.randn(2),), path, dynamo=False, opset_version=18)
    return onnx.load(str(path)).graph.node[0]


@TORCHSCRIPT_DEPRECATION
@pytest.mark.parametrize(
    "keyword, value, expected_type, dims",
    [
        ("a_t", torch.tensor([1.0, 2.0]), "TENSOR", [2]),
        ("a_z", torch.tensor([3.0]), "TENSOR", []),  # a one-element tensor, stored 0-d
        ("a_g", "graph", "GRAPH", None),
        ("a_ty", "type", "TYPE_PROTO", None),
        ("a_s", ["p", "q"], "STRINGS", None),  # a list makes any suffix plural
        ("a_t", [torch.tensor([1.0])], "TENSORS", None),
        ("a_i", True, "INT", None),  # a bool goes as _i
    ],
)
def test_g_op_attribute_suffixes(tmp_path, keyword, value, expected_type, dims):
    """Step 6: the suffixes torch's _ATTR_PATTERN takes beyond _f, _i and _s; what they write."""
    assert jit_utils()._ATTR_PATTERN.pattern == "^(.+)_(([ifstgz])|(ty))$"
    (attribute,) = export_with_keyword(tmp_path, keyword, value).attribute
    assert onnx.AttributeProto.AttributeType.Name(attribute.type) == expected_type
    if dims is not None:
        assert list(attribute.t.dims) == dims


@TORCHSCRIPT_DEPRECATION
@pytest.mark.parametrize("keyword, value", [("flag_b", True), ("a_is", [1, 2]), ("a_fs", [1.0])])
def test_g_op_has_no_other_suffix(tmp_path, keyword, value):
    """Step 6: no _b, and no plural suffix: the list itself makes the attribute plural."""
    with pytest.raises(ValueError, match=f"Invalid attribute specifier '{keyword}'"):
        export_with_keyword(tmp_path, keyword, value)


SEGFAULT_CHILD = """
import torch


class F(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, bias):
        return x.clone()

    @staticmethod
    def symbolic(g, x, bias):
        return g.op("argdemo::AllKinds", x, bias)  # bias is None: the model omits it


class M(torch.nn.Module):
    def forward(self, x):
        return F.apply(x, None)


torch.onnx.export(M(), (torch.randn(2, 3),), "/dev/null", dynamo=False)
print("exported")
"""


def test_none_handed_to_g_op_crashes_the_interpreter():
    """Step 7: in an autograd.Function's symbolic an omitted Tensor? is None; g.op(..., x, None) is
    a segfault (torch 2.14.1), not an error. If a release makes it an error, this test says so."""
    child = run_child(SEGFAULT_CHILD)
    assert child.returncode == -signal.SIGSEGV, (
        child.returncode,
        child.stdout[-2000:],
        child.stderr[-2000:],
    )


KERNEL_CHILD = """
import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper
from onnxruntime_extensions import PyCustomOpDef, get_library_path, onnx_op

ort.set_default_logger_severity(4)
x = np.zeros((2, 3, 4, 5), np.float32)


def model(op_type, inputs=("x", "bias")):
    # One argdemo node with the attributes of all_kinds.onnx; each scenario its own op_type, so that
    # the scenarios' kernels do not conflict in this one process.
    node = helper.make_node(
        op_type, list(inputs), ["y"], domain="argdemo",
        alpha=0.5, k=2, flag=1, mode="sum", dims=[2, 3], scales=[1.0, 2.0, 3.0],
    )
    graph = helper.make_graph(
        [node], "g",
        [
            helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, [2, 3, 4, 5])
            for name in ("x", "bias")
        ],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
    )
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("argdemo", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10).SerializeToString()


def declare(op_type, attrs):
    @onnx_op(
        op_type="argdemo::" + op_type,
        inputs=[PyCustomOpDef.dt_float, PyCustomOpDef.dt_float],
        outputs=[PyCustomOpDef.dt_float],
        attrs=attrs,
    )
    def kernel(x, bias, **attributes):
        return x[:, :, :1, :1].copy()


def options():
    options = ort.SessionOptions()
    options.register_custom_ops_library(get_library_path())
    return options


def scenario(name, op_type, attrs, inputs=("x", "bias"), declare_first=True):
    early = None if declare_first else options()
    declare(op_type, attrs)
    try:
        session = ort.InferenceSession(
            model(op_type, inputs), early or options(), providers=["CPUExecutionProvider"]
        )
        session.run(None, {"x": x, "bias": x})
        print(f"{name}: ran", flush=True)
    except Exception as error:
        print(f"{name}: {str(error).splitlines()[0]}", flush=True)


{body}
"""

SCENARIOS = """
scalars = {
    "alpha": PyCustomOpDef.dt_float, "k": PyCustomOpDef.dt_int64, "mode": PyCustomOpDef.dt_string
}
scenario("scalars", "Scalars", scalars)
scenario("dims as dt_int64", "DimsInt", {"dims": PyCustomOpDef.dt_int64})
scenario("dims as dt_string", "DimsString", {"dims": PyCustomOpDef.dt_string})
scenario("scales as dt_float", "ScalesFloat", {"scales": PyCustomOpDef.dt_float})
scenario("empty input", "EmptyInput", {"alpha": PyCustomOpDef.dt_float}, inputs=("x", ""))
scenario("declared late", "Late", {"alpha": PyCustomOpDef.dt_float}, declare_first=False)
# last: a second kernel for one op_type breaks the library's registration in every later session
scenario("declared twice", "Scalars", {"alpha": PyCustomOpDef.dt_float})
"""


def run_child(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT
    )


@pytest.fixture(scope="module")
def kernel_scenarios() -> dict[str, str]:
    """Each scenario's outcome, from one child process (importing onnxruntime_extensions imports
    torch: slow)."""
    pytest.importorskip("onnxruntime_extensions")
    child = run_child(KERNEL_CHILD.replace("{body}", SCENARIOS))
    assert child.returncode == 0, child.stderr[-3000:]
    return dict(line.split(": ", 1) for line in child.stdout.splitlines() if ": " in line)


def test_python_kernel_runs_the_node_when_it_declares_scalars_only(kernel_scenarios):
    """The control: the node carries list attributes too, and a kernel declaring scalars runs it."""
    assert kernel_scenarios["scalars"] == "ran"


@pytest.mark.parametrize(
    "scenario", ["dims as dt_int64", "dims as dt_string", "scales as dt_float"]
)
def test_python_kernel_cannot_read_a_list_attribute(kernel_scenarios, scenario):
    """Step 3: whatever scalar type a kernel declares for an INTS or FLOATS attribute, ORT refuses
    the session."""
    name = scenario.split()[0]
    expected = f"Unable to find attribute '{name}' due to 'Attribute name and type don't match'"
    assert expected in kernel_scenarios[scenario]


def test_python_kernel_refuses_an_empty_optional_input(kernel_scenarios):
    """Step 3: a node written as (x, "") is refused too: the kernel's inputs are not optional."""
    assert (
        "input 1 is marked single but has an empty string in the graph"
        in kernel_scenarios["empty input"]
    )


def test_python_kernel_must_be_declared_before_the_library_is_registered(kernel_scenarios):
    """Step 3: session options that registered the library before the @onnx_op lack the kernel."""
    assert "argdemo:Late(-1) is not a registered function/op" in kernel_scenarios["declared late"]


def test_python_kernel_declared_twice_conflicts(kernel_scenarios):
    """Step 3: a second @onnx_op for an op_type makes every later session fail."""
    assert (
        "Conflicting with a registered kernel with op versions"
        in kernel_scenarios["declared twice"]
    )


def test_python_kernel_has_no_bool_attribute_type():
    """Step 3: dt_bool is accepted as an attribute type, and aborts the process when the node
    runs."""
    pytest.importorskip("onnxruntime_extensions")
    child = run_child(
        KERNEL_CHILD.replace("{body}", 'scenario("bool", "Bool", {"flag": PyCustomOpDef.dt_bool})')
    )
    assert child.returncode == -signal.SIGABRT, (
        child.returncode,
        child.stdout,
        child.stderr[-2000:],
    )
    assert "Unsupported attribute type 9" in child.stderr


def test_without_a_compiler_the_cpp_steps_skip(tmp_path):
    """No C++ compiler: step 1 and the steps that use its op say SKIP, steps 2 and 3 still run,
    exit 77."""
    env = {**os.environ, "CXX": "no-such-compiler"}
    child = subprocess.run(
        [sys.executable, str(ROOT / NAME / "test.py"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert child.returncode == 77, child.stdout[-3000:]
    assert "SKIP step 1: no C++ compiler: 'no-such-compiler' is not on PATH" in child.stdout
    assert "custom_op schema: argdemo::all_kinds_py(" in child.stdout  # step 2 ran
    assert "registered with onnx.defs: False" in child.stdout  # step 3 ran
    for step in range(4, 8):
        assert f"SKIP step {step}: needs step 1's C++ op" in child.stdout
    assert not list(tmp_path.glob("*.onnx"))
    # steps.json, which the top README's version table is made from, says the same (not a model)
    summary = json.loads((tmp_path / "steps.json").read_text(encoding="utf-8"))
    statuses = {number: step["status"] for number, step in summary["steps"].items()}
    assert statuses == {
        "1": "skipped",
        "2": "runs",
        "3": "runs",
        **{str(n): "skipped" for n in range(4, 8)},
    }
    assert summary["steps"]["1"]["why"].startswith("no C++ compiler"), summary


def test_steps_json_says_every_step_runs_on_the_pinned_torch(run):
    """On the pinned torch no step is gated: steps.json (for the top README's version table) says
    `runs` for all 7."""
    summary = json.loads((run.out / "steps.json").read_text(encoding="utf-8"))
    assert summary["torch"] == torch.__version__.split("+")[0]
    assert {number: step["status"] for number, step in summary["steps"].items()} == {
        str(n): "runs" for n in range(1, 8)
    }
    assert (
        f"on torch {torch.__version__}:" not in run.output and "SKIP" not in run.output
    )  # no differs(), no gate
