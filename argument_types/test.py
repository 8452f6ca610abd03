"""Argument types across mechanisms: one op with an argument of each kind, exported both ways.

Run: python test.py [--out DIR] [-v]

argdemo::all_kinds (a Tensor, a Tensor?, a float, an int, a bool, a str, an int[], a float[]) is
built in C++ and as a torch.library.custom_op, then written as one argdemo::AllKinds node with a
local ONNX schema by a dynamo=True translation, a parse_args symbolic and an autograd.Function's
symbolic, and in standard ONNX.
Every python block of README.md is in this file; the lines around them are the checks.
"""

import pathlib
import sys
import typing

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # the repository's harness.py
import harness  # the runner: the command line, the steps, the checks (harness.py)
from page_helpers import *  # noqa: F403 - the page's first block: common imports, helpers

# The page's imports, then its helpers, word for word (a pasted page starts with them) ---------

# region imports
import logging
import time
from collections.abc import Sequence

import onnxscript
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun
from onnxscript import opset18 as op
# endregion

# 1. The op in C++: TORCH_LIBRARY schema and kernel types --------------------------------------

# region step1
ALL_KINDS_CPP = r"""
#include <ATen/ATen.h>
#include <torch/library.h>

// One argument of each kind. The schema (TORCH_LIBRARY below) names the kinds PyTorch sees;
// the kernel's parameter types are the C++ types each kind arrives as.
at::Tensor all_kinds(const at::Tensor& x,                    // Tensor
                     const std::optional<at::Tensor>& bias,  // Tensor?
                     double alpha,                           // float
                     int64_t k,                              // int
                     bool flag,                              // bool
                     c10::string_view mode,                  // str
                     at::IntArrayRef dims,                   // int[]
                     at::ArrayRef<double> scales) {          // float[]
  TORCH_CHECK(mode == "sum" || mode == "max", "all_kinds: mode must be \"sum\" or \"max\"");
  auto y = x * alpha;
  if (bias.has_value()) y = y + *bias;
  std::vector<int64_t> shape(x.dim(), 1);
  shape[1] = static_cast<int64_t>(scales.size());  // one scale per channel (dim 1)
  y = y * at::tensor(scales).to(x.options()).view(shape);  // x.options() in at::tensor: no Half
  if (flag) y = y.relu();
  y = mode == "sum" ? y.sum(dims, /*keepdim=*/true) : y.amax(dims, /*keepdim=*/true);
  return y + k;
}

TORCH_LIBRARY(argdemo, m) {
  m.def("all_kinds(Tensor x, Tensor? bias, float alpha, int k, bool flag, str mode,"
        " int[] dims, float[] scales) -> Tensor");
}

TORCH_LIBRARY_IMPL(argdemo, CPU, m) {
  m.impl("all_kinds", &all_kinds);
}

// Legacy, for step 6 only: the same kernel registered with torch::RegisterOperators, which
// infers the schema from the C++ signature. Do not copy this line into new code.
static auto legacy = torch::RegisterOperators().op("argdemo_legacy::all_kinds", &all_kinds);
"""
# endregion


def step1_cpp_op():
    """The op in C++: TORCH_LIBRARY schema and kernel types"""
    if harness.TORCH < (2, 2):
        raise harness.NeedsTorch("2.2", OPTIONAL)
    problem = harness.build_problem()
    if problem:
        raise harness.Skip(problem)
    with harness.quiet():  # torch 2.4 prints "No CUDA runtime is found": no filter catches a print
        # region step1-2
        logging.getLogger("torch.utils.cpp_extension").addFilter(
            lambda record: "No CUDA runtime" not in record.msg
        )
        from torch.utils import cpp_extension  # after the filter: importing it logs the message
        # endregion

    # region step1-2b
    EXTENSION_NAME = "onnx_tutorial_argument_types"
    print("  building the C++ extension: about a minute the first time, cached after")
    started = time.time()
    cpp_extension.load_inline(
        name=EXTENSION_NAME,
        cpp_sources=[ALL_KINDS_CPP],
        is_python_module=False,  # the op registers itself when the library loads: no Python module
        verbose=False,
    )
    (library,) = [path for path in torch.ops.loaded_libraries if EXTENSION_NAME in path]
    if os.path.getmtime(library) >= started:  # the build wrote the library after `started`
        print(f"  built {library} in {time.time() - started:.0f} s")
    else:
        print(f"  reused the cached build {library} ({time.time() - started:.1f} s)")
    print("  C++ schema:", torch.ops.argdemo.all_kinds.default._schema)
    # endregion

    assert str(torch.ops.argdemo.all_kinds.default._schema) == CPP_SCHEMA
    assert str(torch.ops.argdemo_legacy.all_kinds.default._schema) == LEGACY_SCHEMA  # step 6's

    # region step1-3
    x = torch.randn(2, 3, 4, 5)
    with expect_error('all_kinds: mode must be "sum" or "max"'):
        torch.ops.argdemo.all_kinds(x, None, 1.0, 0, False, "mean", [2, 3], [1.0, 1.0, 1.0])
    # endregion

    # The kernel's C++ types receive each kind: here None for bias, and plain values for the rest.
    y = torch.ops.argdemo.all_kinds(x, None, 1.0, 0, False, "sum", [2, 3], [1.0, 1.0, 1.0])
    torch.testing.assert_close(y, x.sum((2, 3), keepdim=True))


# 2. The same op in Python: torch.library.custom_op annotations --------------------------------


def define_all_kinds_py():
    # region all_kinds_py
    # Before torch 2.7 custom_op refuses list[int] and list[float]: annotate typing.List there.
    @torch.library.custom_op("argdemo::all_kinds_py", mutates_args=())
    def all_kinds_py(
        x: torch.Tensor,
        bias: torch.Tensor | None,
        alpha: float,
        k: int,
        flag: bool,
        mode: str,
        dims: list[int],
        scales: list[float],
    ) -> torch.Tensor:
        y = x * alpha
        if bias is not None:
            y = y + bias
        y = y * torch.tensor(scales, dtype=x.dtype).view(1, -1, *[1] * (x.dim() - 2))
        if flag:
            y = y.relu()
        y = y.sum(dims, keepdim=True) if mode == "sum" else y.amax(dims, keepdim=True)
        return y + k

    print("  custom_op schema:", torch.ops.argdemo.all_kinds_py.default._schema)
    # endregion
    return all_kinds_py


@harness.needs_torch("2.4", "torch.library.custom_op came with torch 2.4")
def step2_custom_op():
    """The same op in Python: torch.library.custom_op annotations"""
    if harness.TORCH < (2, 7):  # infer_schema takes typing.List[int], not list[int] (#146594)
        harness.differs("custom_op refuses list[int], list[float]; typing.List gives one schema")
        with expect_error("Parameter dims has unsupported type list[int]"):
            define_all_kinds_py()
        all_kinds_py = define_all_kinds_py_with_typing_list()
    else:
        all_kinds_py = define_all_kinds_py()

    schema = str(torch.ops.argdemo.all_kinds_py.default._schema)
    assert schema == PY_SCHEMA, schema  # int and int[] become SymInt and SymInt[]
    if not hasattr(torch.ops.argdemo, "all_kinds"):
        print("  (no C++ op to compare with: step 1 was skipped)")
        return
    for _ in range(5):
        x, bias = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5)
        for b, values in [(bias, WITH_BIAS), (None, NO_BIAS)]:
            expected = torch.ops.argdemo.all_kinds(x, b, *values.values())
            torch.testing.assert_close(all_kinds_py(x, b, *values.values()), expected)
    print("  the Python twin and the C++ kernel agree (10 calls, with and without bias)")


# 3. The ONNX node argdemo::AllKinds: a local schema, its meaning, a kernel --------------------

# region step3
# The node's contract: which arguments are inputs, and each attribute's ONNX type. A local
# schema: never registered with onnx.defs, so no other code in the process sees it.
Parameter, Attribute = onnx.defs.OpSchema.FormalParameter, onnx.defs.OpSchema.Attribute
AttrType = onnx.defs.OpSchema.AttrType
ALL_KINDS_SCHEMA = onnx.defs.OpSchema(
    "AllKinds",
    "argdemo",
    1,
    inputs=[
        Parameter("x", "T"),
        Parameter("bias", "T", param_option=onnx.defs.OpSchema.FormalParameterOption.Optional),
    ],
    outputs=[Parameter("y", "T")],
    type_constraints=[("T", ["tensor(float)"], "float32 tensors")],
    attributes=[
        Attribute("alpha", AttrType.FLOAT, "float"),
        Attribute("k", AttrType.INT, "int"),
        Attribute("flag", AttrType.INT, "bool, as 0 or 1"),
        Attribute("mode", AttrType.STRING, "str: sum or max"),
        Attribute("dims", AttrType.INTS, "int[]"),
        Attribute("scales", AttrType.FLOATS, "float[]"),
    ],
)
argdemo = onnxscript.values.Opset("argdemo", 1)
AllKindsOp = onnxscript.values.Op(argdemo, "AllKinds", ALL_KINDS_SCHEMA)  # for translations
# endregion


# region all_kinds_numpy
def all_kinds_numpy(x, bias, alpha, k, flag, mode, dims, scales):
    """What the node computes, in numpy."""
    y = x * np.float32(alpha)
    if bias is not None:
        y = y + bias
    y = y * np.asarray(scales, dtype=np.float32).reshape(1, -1, 1, 1)
    if flag:
        y = np.maximum(y, np.float32(0))
    reduce = np.sum if mode == "sum" else np.max
    return (reduce(y, axis=tuple(dims), keepdims=True) + np.float32(k)).astype(np.float32)


class AllKinds(OpRun):
    """The node for onnx.reference, which hands every attribute over as a Python value."""

    op_domain = "argdemo"

    def _run(self, x, bias=None, **attributes):
        return (all_kinds_numpy(x, bias, **attributes),)


def kind(value):
    if isinstance(value, list):
        return f"list[{type(value[0]).__name__}]"
    return type(value).__name__


def kinds(*args):
    """The Python type of each argument a mechanism hands you: Value, float, list[int], ..."""
    return ", ".join(kind(a) for a in args)
# endregion


def step3_the_node():
    """The ONNX node argdemo::AllKinds: a local schema, its meaning, a kernel"""
    # region step3-2
    print("  registered with onnx.defs:", onnx.defs.has("AllKinds", "argdemo"))
    # endregion

    types = {name: ALL_KINDS_SCHEMA.attributes[name].type.name for name in ATTRIBUTE_TYPES}
    assert types == ATTRIBUTE_TYPES and len(ALL_KINDS_SCHEMA.attributes) == 6, types
    print("  AllKinds attributes:", ", ".join(f"{name} {kind}" for name, kind in types.items()))
    if onnx_op is None:
        raise harness.Skip(harness.ortx_problem())

    # region all_kinds_kernel
    # A Python stand-in for the target's kernel, for ONNX Runtime (onnxruntime-extensions).
    # Declare it once per process, before session options register the library.
    @onnx_op(
        op_type="argdemo::AllKinds",
        inputs=[PyCustomOpDef.dt_float, PyCustomOpDef.dt_float],  # x, bias: a fixed count
        outputs=[PyCustomOpDef.dt_float],
        # Scalars only: there is no type for INTS or FLOATS.
        attrs={
            "alpha": PyCustomOpDef.dt_float,
            "k": PyCustomOpDef.dt_int64,
            "flag": PyCustomOpDef.dt_int64,
            "mode": PyCustomOpDef.dt_string,
        },
    )
    def all_kinds_kernel(x, bias, alpha, k, flag, mode):
        print("  all_kinds_kernel received:", kinds(alpha, k, flag, mode), (alpha, k, flag, mode))
        # dims and scales never reach a Python kernel: this stand-in knows all_kinds.onnx's.
        # A C++ kernel reads them (KernelInfoGetAttributeArray_int64, ..._float).
        return all_kinds_numpy(x, bias, alpha, k, flag, mode, [2, 3], [1.0, 2.0, 3.0])
    # endregion


# 4. dynamo=True: a fake kernel and a translation with the local schema ------------------------

# region AllKindsModel
# Two sets of values for the non-tensor arguments, so that each attribute in a file can be
# traced back to the model that wrote it.
WITH_BIAS = dict(alpha=0.5, k=2, flag=True, mode="sum", dims=[2, 3], scales=[1.0, 2.0, 3.0])
NO_BIAS = dict(alpha=-1.5, k=-3, flag=False, mode="max", dims=[1, 3], scales=[0.5, 1.0, 2.0])


class AllKindsModel(torch.nn.Module):
    """One call of `op`, its non-tensor arguments fixed when the model is built."""

    def __init__(self, op, alpha, k, flag, mode, dims, scales):
        super().__init__()
        self.op = op
        self.arguments = (alpha, k, flag, mode, dims, scales)

    def forward(self, x, bias=None):
        return self.op(x, bias, *self.arguments)


def print_node(path):
    """The model's one node: its inputs, then each attribute's name, ONNX type and value."""
    (node,) = onnx.load(path).graph.node
    print(f"  {path}: {node.domain}.{node.op_type}({', '.join(node.input)})")
    shown = []
    for a in sorted(node.attribute, key=lambda a: a.name):  # the exporters' orders differ
        kind = onnx.AttributeProto.AttributeType.Name(a.type)
        value = onnx.helper.printable_attribute(a).split(" = ", 1)[1]
        shown.append(f"{a.name}: {kind} = {value}")
    print("    " + ", ".join(shown[:3]))
    print("    " + ", ".join(shown[3:]))
# endregion


# region all_kinds_unregistered
# Fails: the Opset looks AllKinds up in onnx.defs' registry, which has no argdemo::AllKinds.
def all_kinds_unregistered(x, bias, alpha, k, flag, mode, dims, scales):
    attributes = dict(alpha=alpha, k=k, flag=flag, mode=mode, dims=dims, scales=scales)
    return argdemo.AllKinds(x, bias, **attributes)
# endregion


# region all_kinds_translation
# Parameters named as in the op's schema: torch 2.8 matches translations by name.
def all_kinds_translation(
    x,
    bias,
    alpha: float,
    k: int,
    flag: bool,
    mode: str,
    dims: Sequence[int],
    scales: Sequence[float],
):
    received = kinds(x, bias, alpha, k, flag, mode, dims, scales)
    print("  all_kinds_translation received:", received)
    # bias=None leaves the optional input out; the schema gives each attribute its ONNX type.
    return AllKindsOp(x, bias, alpha=alpha, k=k, flag=flag, mode=mode, dims=dims, scales=scales)
# endregion


# region initializer
def initializer(model_bytes):
    """An ONNX Runtime session with onnxruntime-extensions' kernels (step 3's among them)."""
    options = ort.SessionOptions()
    options.register_custom_ops_library(get_library_path())
    return ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
# endregion


@harness.needs_torch("2.6", harness.TABLE)
def step4_translation():
    """dynamo=True: a fake kernel and a translation with the local schema"""
    need_the_op_and_the_kernel()

    # region step4
    x, bias = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5)
    model = AllKindsModel(torch.ops.argdemo.all_kinds, **WITH_BIAS).eval()
    model_no_bias = AllKindsModel(torch.ops.argdemo.all_kinds, **NO_BIAS).eval()
    # endregion

    # region _
    @torch.library.register_fake("argdemo::all_kinds")
    def _(x, bias, alpha, k, flag, mode, dims, scales):
        return x.new_empty([1 if axis in dims else size for axis, size in enumerate(x.shape)])
    # endregion

    # region step4-2
    # opcheck runs the op with the fake kernel and the real one, and compares their outputs' shapes
    for b, values in [(bias, WITH_BIAS), (None, NO_BIAS)]:
        torch.library.opcheck(torch.ops.argdemo.all_kinds.default, (x, b, *values.values()))
    print("  opcheck: the fake kernel agrees with the C++ kernel, with and without bias")
    # endregion

    # region step4-3
    table = {torch.ops.argdemo.all_kinds.default: all_kinds_unregistered}
    with expect_error("No schema registered for 'AllKinds'"):
        torch.onnx.export(
            model, (x, bias), dynamo=True, verbose=False, custom_translation_table=table
        )
    # endregion

    # region step4-4
    table = {torch.ops.argdemo.all_kinds.default: all_kinds_translation}
    programs = {}
    for path, m, args in [
        ("all_kinds_dynamo.onnx", model, (x, bias)),
        ("all_kinds_dynamo_no_bias.onnx", model_no_bias, (x,)),
    ]:
        programs[path] = torch.onnx.export(
            m, args, dynamo=True, opset_version=18, verbose=False, output_names=["y"],
            custom_translation_table=table,
        )
        programs[path].save(path)
        print_node(path)
    # endregion

    check_node("all_kinds_dynamo.onnx", ["x", "bias"], WITH_BIAS)
    check_node("all_kinds_dynamo_no_bias.onnx", ["x"], NO_BIAS)
    assert not onnx.defs.has("AllKinds", "argdemo")  # the schema stayed local

    # region step4-5
    program = programs["all_kinds_dynamo.onnx"]
    program.initialize_inference_session(initializer)
    assert_onnx_program(program, rtol=1e-5, atol=1e-5)  # ONNX Runtime with the kernel vs PyTorch
    print("  all_kinds_dynamo.onnx: ONNX Runtime with the Python kernel matches PyTorch")
    # endregion

    # region step4-6
    # The kernel declared two inputs, so the one-input node is refused: onnx.reference checks it.
    with expect_error("has input size 1 not in range [min=2, max=2]"):
        programs["all_kinds_dynamo_no_bias.onnx"].initialize_inference_session(initializer)
    reference = ReferenceEvaluator("all_kinds_dynamo_no_bias.onnx", new_ops=[AllKinds])
    (y,) = reference.run(None, {"x": x.numpy()})
    compare("all_kinds_dynamo_no_bias.onnx (onnx.reference)", y, model_no_bias(x), 1e-5, 1e-5)
    # endregion

    reference_matches("all_kinds_dynamo.onnx", model, x, bias)  # dims and scales too


# 5. dynamo=True in standard ONNX: arguments as constants and as Python decisions --------------


# region all_kinds_standard
def all_kinds_standard(
    x,
    bias,
    alpha: float,
    k: int,
    flag: bool,
    mode: str,
    dims: Sequence[int],
    scales: Sequence[float],
):
    y = op.Mul(x, op.CastLike(alpha, x))  # a Python float becomes a constant of x's dtype
    if bias is not None:  # decided in Python while translating: the model has no If node
        y = op.Add(y, bias)
    per_channel = op.CastLike(op.Constant(value_floats=scales), x)
    y = op.Mul(y, op.Reshape(per_channel, op.Constant(value_ints=[1, -1, 1, 1])))
    if flag:
        y = op.Relu(y)
    axes = op.Constant(value_ints=dims)  # int[] as a tensor: ReduceSum and ReduceMax take axes
    reduce = op.ReduceSum if mode == "sum" else op.ReduceMax
    y = reduce(y, axes, keepdims=1)
    return op.Add(y, op.CastLike(k, y))
# endregion


@harness.needs_torch("2.6", harness.TABLE)
def step5_standard_onnx():
    """dynamo=True in standard ONNX: op.Constant(value_ints=...) and Python decisions"""
    need_the_op()  # step 1's C++ op and step 4's fake kernel
    x, bias = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5)  # step 4's models and inputs
    model = AllKindsModel(torch.ops.argdemo.all_kinds, **WITH_BIAS).eval()
    model_no_bias = AllKindsModel(torch.ops.argdemo.all_kinds, **NO_BIAS).eval()

    # region step5
    table = {torch.ops.argdemo.all_kinds.default: all_kinds_standard}
    for path, m, args in [
        ("all_kinds_standard.onnx", model, (x, bias)),
        ("all_kinds_standard_no_bias.onnx", model_no_bias, (x,)),
    ]:
        program = torch.onnx.export(
            m, args, dynamo=True, opset_version=18, verbose=False, output_names=["y"],
            custom_translation_table=table,
        )
        assert_onnx_program(program, rtol=1e-5, atol=1e-5)  # plain ONNX Runtime: standard ops
        program.save(path)
        ops = " ".join(node.op_type for node in onnx.load(path).graph.node)
        print(f"  {path}: matches PyTorch; {ops}")
    # endregion

    ops_with = [n.op_type for n in harness.show("all_kinds_standard.onnx").graph.node]
    ops_without = [n.op_type for n in harness.show("all_kinds_standard_no_bias.onnx").graph.node]
    if harness.TORCH < (2, 7):  # 2.6: export(optimize=False) by default, torch/onnx/__init__.py
        harness.differs("export does not optimize: each constant stays a Constant (and a CastLike)")
        c, cast = ["Constant"], ["Constant", "CastLike"]
        assert ops_with == [
            *cast, "Mul", "Add", *cast, *c, "Reshape", "Mul", "Relu", *c, "ReduceSum", *cast, "Add"
        ], ops_with
        assert ops_without == [
            *cast, "Mul", *cast, *c, "Reshape", "Mul", *c, "ReduceMax", *cast, "Add"
        ], ops_without
    else:
        assert ops_with == ["Mul", "Add", "Mul", "Relu", "ReduceSum", "Add"], ops_with
        assert ops_without == ["Mul", "Mul", "ReduceMax", "Add"], ops_without
    check_constants("all_kinds_standard.onnx", WITH_BIAS)
    check_constants("all_kinds_standard_no_bias.onnx", NO_BIAS)


# 6. dynamo=False: a symbolic with parse_args --------------------------------------------------


# region output_type
def output_type(x, dims):
    # A custom node has no shape inference: give its output type (x's dtype, reduced dims of 1).
    sizes = [1 if axis in dims else size for axis, size in enumerate(x.type().sizes())]
    return x.type().with_sizes(sizes)


# One parse_args descriptor per schema argument, in schema order.
@parse_args("v", "v", "f", "i", "b", "s", "is", "fs")
def all_kinds_symbolic(g, x, bias, alpha, k, flag, mode, dims, scales):
    print("  all_kinds_symbolic received:", kinds(x, bias, alpha, k, flag, mode, dims, scales))
    inputs = [x] if bias.node().mustBeNone() else [x, bias]  # an omitted Tensor? is a Value too
    y = g.op(
        "argdemo::AllKinds",
        *inputs,
        alpha_f=alpha,  # float -> FLOAT
        k_i=k,  # int -> INT
        flag_i=flag,  # bool -> INT
        mode_s=mode,  # str -> STRING
        dims_i=dims,  # list of ints -> INTS
        scales_f=scales,  # list of floats -> FLOATS
    )
    y.setType(output_type(x, dims))
    return y
# endregion


# region all_kinds_legacy_symbolic
# For a torch::RegisterOperators op: take the float list as "v", read each element's constant.
@parse_args("v", "v", "f", "i", "b", "s", "is", "v")
def all_kinds_legacy_symbolic(g, x, bias, alpha, k, flag, mode, dims, scales):
    scales = [element.node().t("value").item() for element in scales.node().inputs()]
    return all_kinds_symbolic(g, x, bias, alpha, k, flag, mode, dims, scales)
# endregion


def step6_parse_args():
    """dynamo=False: a symbolic with parse_args"""
    need_the_op_and_the_kernel()
    x, bias = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5)  # step 4's models and inputs
    model = AllKindsModel(torch.ops.argdemo.all_kinds, **WITH_BIAS).eval()
    model_no_bias = AllKindsModel(torch.ops.argdemo.all_kinds, **NO_BIAS).eval()

    with harness.quiet():  # the exporter's dump of the graph at the failure ('Torch IR graph ...')
        # region step6
        legacy_model = AllKindsModel(torch.ops.argdemo_legacy.all_kinds, **WITH_BIAS).eval()
        register_custom_op_symbolic("argdemo_legacy::all_kinds", all_kinds_symbolic, 18)
        with expect_error("does not know how to unpack the ListConstruct node"):
            torch.onnx.export(
                legacy_model, (x, bias), "failures/all_kinds_legacy.onnx", dynamo=False,
                opset_version=18,
            )
        # endregion

    # region step6-2
    register_custom_op_symbolic("argdemo::all_kinds", all_kinds_symbolic, 18)
    for path, m, args, names in [
        ("all_kinds.onnx", model, (x, bias), ["x", "bias"]),
        ("all_kinds_no_bias.onnx", model_no_bias, (x,), ["x"]),
    ]:
        torch.onnx.export(
            m, args, path, dynamo=False, opset_version=18, input_names=names,
            output_names=["y"],
        )
        print_node(path)
    # endregion

    check_node("all_kinds.onnx", ["x", "bias"], WITH_BIAS)
    check_node("all_kinds_no_bias.onnx", ["x"], NO_BIAS)

    # region step6-3
    # A dynamo=False export writes only a file: run_ort and compare check it against PyTorch.
    options = ort.SessionOptions()
    options.register_custom_ops_library(get_library_path())
    (y,) = run_ort("all_kinds.onnx", {"x": x.numpy(), "bias": bias.numpy()}, options)
    compare("all_kinds.onnx", y, model(x, bias), rtol=1e-5, atol=1e-5)
    reference = ReferenceEvaluator("all_kinds_no_bias.onnx", new_ops=[AllKinds])
    (y,) = reference.run(None, {"x": x.numpy()})
    compare("all_kinds_no_bias.onnx (onnx.reference)", y, model_no_bias(x), 1e-5, 1e-5)
    # endregion

    reference_matches("all_kinds.onnx", model, x, bias)  # dims and scales too

    # region step6-4
    register_custom_op_symbolic("argdemo_legacy::all_kinds", all_kinds_legacy_symbolic, 18)
    torch.onnx.export(
        legacy_model, (x, bias), "all_kinds_legacy.onnx", dynamo=False, opset_version=18,
        input_names=["x", "bias"], output_names=["y"],
    )
    print_node("all_kinds_legacy.onnx")
    # endregion

    check_node("all_kinds_legacy.onnx", ["x", "bias"], WITH_BIAS, same_as="all_kinds.onnx")
    reference_matches("all_kinds_legacy.onnx", legacy_model, x, bias)


# 7. dynamo=False: what an autograd.Function's symbolic receives -------------------------------


# region AllKindsFunction
class AllKindsFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, bias, alpha, k, flag, mode, dims, scales):
        return torch.ops.argdemo.all_kinds(x, bias, alpha, k, flag, mode, dims, scales)

    @staticmethod
    def symbolic(g, x, bias, alpha, k, flag, mode, dims, scales):
        # No parse_args: tensors arrive as Values, the rest as the Python objects forward got,
        # and an omitted Tensor? as None, which g.op must not get: leave it out.
        received = kinds(x, bias, alpha, k, flag, mode, dims, scales)
        print("  AllKindsFunction.symbolic received:", received)
        inputs = [x] if bias is None else [x, bias]
        y = g.op(
            "argdemo::AllKinds",
            *inputs,
            alpha_f=alpha,
            k_i=k,
            flag_i=flag,
            mode_s=mode,
            dims_i=dims,
            scales_f=scales,
        )
        y.setType(output_type(x, dims))
        return y
# endregion


def step7_function_symbolic():
    """dynamo=False: what an autograd.Function's symbolic receives"""
    need_the_op()  # the Function's forward calls step 1's C++ op
    x, bias = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5)  # step 4's inputs

    # region step7
    model = AllKindsModel(AllKindsFunction.apply, **WITH_BIAS).eval()
    model_no_bias = AllKindsModel(AllKindsFunction.apply, **NO_BIAS).eval()
    for path, m, args, names in [
        ("all_kinds_function.onnx", model, (x, bias), ["x", "bias"]),
        ("all_kinds_function_no_bias.onnx", model_no_bias, (x,), ["x"]),
    ]:
        torch.onnx.export(
            m, args, path, dynamo=False, opset_version=18, input_names=names,
            output_names=["y"],
        )
        print_node(path)
    # endregion

    check_node("all_kinds_function.onnx", ["x", "bias"], WITH_BIAS, same_as="all_kinds.onnx")
    check_node("all_kinds_function_no_bias.onnx", ["x"], NO_BIAS, same_as="all_kinds_no_bias.onnx")
    reference_matches("all_kinds_function.onnx", model, x, bias)
    reference_matches("all_kinds_function_no_bias.onnx", model_no_bias, x)


# 8. A float16 or bfloat16 model: the node between Casts --------------------------------------


# region all_kinds_half
# The Python kernel takes float32 only (onnxruntime-extensions' Python ops have no float16 or
# bfloat16), so the schema's T stays tensor(float), and a half model casts around the node.
def all_kinds_cast_translation(
    x,
    bias,
    alpha: float,
    k: int,
    flag: bool,
    mode: str,
    dims: Sequence[int],
    scales: Sequence[float],
):
    x32 = op.Cast(x, to=onnx.TensorProto.FLOAT)
    bias32 = None if bias is None else op.Cast(bias, to=onnx.TensorProto.FLOAT)
    attributes = dict(alpha=alpha, k=k, flag=flag, mode=mode, dims=dims, scales=scales)
    y = AllKindsOp(x32, bias32, **attributes)
    return op.CastLike(y, x)  # back to the model's dtype (the exporter's optimizer: a Cast)


@parse_args("v", "v", "f", "i", "b", "s", "is", "fs")
def all_kinds_cast_symbolic(g, x, bias, alpha, k, flag, mode, dims, scales):
    inputs = [x] if bias.node().mustBeNone() else [x, bias]
    inputs = [g.op("Cast", t, to_i=onnx.TensorProto.FLOAT) for t in inputs]
    y = g.op(
        "argdemo::AllKinds",
        *inputs,
        alpha_f=alpha,
        k_i=k,
        flag_i=flag,
        mode_s=mode,
        dims_i=dims,
        scales_f=scales,
    )
    y.setType(output_type(x, dims).with_dtype(torch.float32))
    return g.op("CastLike", y, x)  # CastLike: opset 15 or later
# endregion


@harness.needs_torch("2.6", harness.TABLE)
def step8_half_precision():
    """A float16 or bfloat16 model: the node between Casts"""
    need_the_op_and_the_kernel()

    # region step8
    model = AllKindsModel(torch.ops.argdemo.all_kinds, **WITH_BIAS).eval()  # step 4's
    x, bias = torch.randn(2, 3, 4, 5).bfloat16(), torch.randn(2, 3, 4, 5).bfloat16()
    table = {torch.ops.argdemo.all_kinds.default: all_kinds_translation}  # step 4's: T = float
    path = "failures/all_kinds_bf16_dynamo.onnx"
    os.makedirs("failures", exist_ok=True)
    torch.onnx.export(
        model, (x, bias), path, dynamo=True, opset_version=18, verbose=False,
        output_names=["y"], custom_translation_table=table,
    )
    print(f"  {path}: exported, AllKinds on bfloat16 (schema: float)")
    with expect_error("Type 'tensor(bfloat16)' of input parameter (x) of operator (AllKinds)"):
        initializer(path)  # ONNX Runtime with the kernel: refuses the session
    with expect_error("has unsupported type: tensor(bfloat16)"):
        check_with_schemas(path, ALL_KINDS_SCHEMA)  # right after the export: caught there
    # endregion

    failure = onnx.load(path)
    assert failure.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16
    assert harness.op_types(path) == ["argdemo.AllKinds"], harness.op_types(path)

    # region step8-2
    register_custom_op_symbolic("argdemo::all_kinds", all_kinds_cast_symbolic, 18)
    table = {torch.ops.argdemo.all_kinds.default: all_kinds_cast_translation}
    options = ort.SessionOptions()
    options.register_custom_ops_library(get_library_path())
    # 5 roundings of half a unit at most, and float32's own error: 3 units of the output
    for dtype, unit in [(torch.float16, 2**-10), (torch.bfloat16, 2**-7)]:
        x, bias = torch.randn(2, 3, 4, 5).to(dtype), torch.randn(2, 3, 4, 5).to(dtype)
        expected = model(x, bias)  # the C++ kernel in that dtype
        for dynamo in (True, False):
            path = f"all_kinds_{str(dtype)[6:]}{'_dynamo' if dynamo else ''}.onnx"
            how = {"custom_translation_table": table} if dynamo else {"input_names": ["x", "bias"]}
            torch.onnx.export(
                model, (x, bias), path, dynamo=dynamo, opset_version=18, verbose=False,
                output_names=["y"], **how,
            )
            check_with_schemas(path, ALL_KINDS_SCHEMA)
            (actual,) = run_ort_torch(path, [x, bias], options)
            torch.testing.assert_close(actual, expected, rtol=3 * unit, atol=0)
            diff = float((actual.double() - expected.double()).abs().max())
            print(f"  {path}: {actual.dtype}, matches PyTorch (max abs diff {diff:.1e})")
    # endregion

    last = "CastLike" if harness.TORCH < (2, 7) else "Cast"  # 2.6: export(optimize=False)
    for path in KEPT[8]:
        exported = harness.show(path)
        dtype = exported.graph.input[0].type.tensor_type.elem_type
        assert dtype in (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16), (path, dtype)
        assert exported.graph.output[0].type.tensor_type.elem_type == dtype, path
        ops = harness.op_types(path)
        assert ops == ["Cast", "Cast", "argdemo.AllKinds", last if "dynamo" in path else "CastLike"]
        node = exported.graph.node[2]
        step6 = onnx.load("all_kinds.onnx").graph.node[0]  # the float32 model's node
        assert harness.attributes(node) == harness.attributes(step6), path
        casts = [n for n in exported.graph.node if n.op_type == "Cast"][:2]
        assert [a.i for n in casts for a in n.attribute] == [onnx.TensorProto.FLOAT] * 2, path
        assert list(node.input) == [n.output[0] for n in casts], path


# ---------------------------------------------------------------------------------------------

KEPT = {  # what each step writes and claims valid (checked, and matched against PyTorch)
    4: ("all_kinds_dynamo.onnx", "all_kinds_dynamo_no_bias.onnx"),
    5: ("all_kinds_standard.onnx", "all_kinds_standard_no_bias.onnx"),
    6: ("all_kinds.onnx", "all_kinds_no_bias.onnx", "all_kinds_legacy.onnx"),
    7: ("all_kinds_function.onnx", "all_kinds_function_no_bias.onnx"),
    8: (
        "all_kinds_float16_dynamo.onnx", "all_kinds_float16.onnx",
        "all_kinds_bfloat16_dynamo.onnx", "all_kinds_bfloat16.onnx",
    ),
}
FAILURES = ("failures/all_kinds_bf16_dynamo.onnx",)  # the others raise before a file is written
# For ERRORS.md: part of each reproduced error -> (what raises it, its cause[, fixing step])
CAUSES = {
    'all_kinds: mode must be "sum" or "max"': (
        "PyTorch",
        'the op\'s C++ kernel checks its `str mode` argument (`TORCH_CHECK`) and refuses "mean"',
    ),
    "Parameter dims has unsupported type list[int]": (
        "PyTorch",
        "`torch.library.custom_op` before torch 2.7 knows `typing.List[int]` and "
        "`typing.Sequence[int]`, not the builtin `list[int]`",
    ),
    "No schema registered for 'AllKinds'": (
        "dynamo=True",
        "the translation calls `onnxscript.values.Opset(domain, 1).AllKinds`, which looks the op "
        "up in onnx.defs' registry: give it a local schema with `onnxscript.values.Op(opset, "
        "name, schema)`",
    ),
    "has input size 1 not in range [min=2, max=2]": (
        "ONNX Runtime",
        "onnxruntime-extensions' `PyCustomOpDef` has no optional input: a kernel declared with two "
        "inputs refuses the node without `bias`",
    ),
    "does not know how to unpack the ListConstruct node": (
        "dynamo=False",
        '`parse_args("fs")` on an op registered with `torch::RegisterOperators` (legacy): its '
        "traced float list stays a `prim::ListConstruct`; register the op with `TORCH_LIBRARY`, "
        'or take the list as `"v"` and read each element\'s constant',
    ),
    "Type 'tensor(bfloat16)' of input parameter (x) of operator (AllKinds)": (
        "ONNX Runtime",
        "a custom node of a type its kernel is not declared for (`PyCustomOpDef.dt_float`): the "
        "exporter wrote the model's bfloat16, though the local schema lists `tensor(float)` only; "
        "cast to float32 around the node",
        8,
    ),
    "has unsupported type: tensor(bfloat16)": (
        "onnx.checker",
        "with the op's schema registered, the checker refuses a node of a type the schema does "
        "not list: the check the exporter does not make for a local schema",
        8,
    ),
}


PASSED = "every model in {out} checked and matched PyTorch (ONNX Runtime or onnx.reference)"


def main(argv: list[str] | None = None) -> int:
    return harness.run(__file__, globals(), kept=KEPT, failures=FAILURES, causes=CAUSES, argv=argv,
                       passed=PASSED)  # some models run in onnx.reference only (steps 4, 6, 7)


# Test-only helpers: the checks around the lesson's code ---------------------------------------

CPP_SCHEMA = (
    "argdemo::all_kinds(Tensor x, Tensor? bias, float alpha, int k, bool flag, str mode, "
    "int[] dims, float[] scales) -> Tensor"
)
LEGACY_SCHEMA = (  # torch::RegisterOperators infers the schema, with names _0, _1, ...
    "argdemo_legacy::all_kinds(Tensor _0, Tensor? _1, float _2, int _3, bool _4, str _5, "
    "int[] _6, float[] _7) -> Tensor _0"
)
PY_SCHEMA = (
    "argdemo::all_kinds_py(Tensor x, Tensor? bias, float alpha, SymInt k, bool flag, str mode, "
    "SymInt[] dims, float[] scales) -> Tensor"
)
# Each attribute's ONNX type in every exported model (step 3's schema says the same)
ATTRIBUTE_TYPES = dict(alpha="FLOAT", k="INT", flag="INT", mode="STRING")
ATTRIBUTE_TYPES.update(dims="INTS", scales="FLOATS")


def define_all_kinds_py_with_typing_list():
    """Step 2's op as torch < 2.7 takes it: typing.List[int] infers the very schema of list[int]."""

    @torch.library.custom_op("argdemo::all_kinds_py", mutates_args=())
    def all_kinds_py(
        x: torch.Tensor,
        bias: torch.Tensor | None,
        alpha: float,
        k: int,
        flag: bool,
        mode: str,
        dims: typing.List[int],  # noqa: UP006 - torch < 2.7 refuses list[int]
        scales: typing.List[float],  # noqa: UP006
    ) -> torch.Tensor:
        y = x * alpha
        if bias is not None:
            y = y + bias
        y = y * torch.tensor(scales, dtype=x.dtype).view(1, -1, *[1] * (x.dim() - 2))
        if flag:
            y = y.relu()
        y = y.sum(dims, keepdim=True) if mode == "sum" else y.amax(dims, keepdim=True)
        return y + k

    print("  custom_op schema:", torch.ops.argdemo.all_kinds_py.default._schema)
    return all_kinds_py


# torch 2.2 made c10::optional std::optional (c10/util/Optional.h); before, a kernel's Tensor? is
# c10::optional<at::Tensor>, and a std::optional parameter fails to compile (ivalue_inl.h).
OPTIONAL = "the kernel's Tensor? is a std::optional<at::Tensor>: c10::optional is one from 2.2"


def need_the_op() -> None:
    if harness.TORCH < (2, 2):
        raise harness.NeedsTorch("2.2", "it calls step 1's op: " + OPTIONAL)
    if not hasattr(torch.ops.argdemo, "all_kinds"):
        raise harness.Skip("needs step 1's C++ op argdemo::all_kinds, which was not built")


def need_the_op_and_the_kernel() -> None:
    need_the_op()
    if onnx_op is None:
        raise harness.Skip(harness.ortx_problem())


def check_node(path: str, inputs: list[str], values: dict, same_as: str = "") -> None:
    """The full checker, then one argdemo.AllKinds node on `inputs`, each attribute of the schema's
    ONNX type and the model's value (and, with same_as, the very node another file holds)."""
    model = harness.show(path)
    (node,) = model.graph.node
    assert (node.domain, node.op_type) == ("argdemo", "AllKinds"), (path, node.op_type)
    assert list(node.input) == inputs, (path, list(node.input))
    assert [o.name for o in model.graph.output] == ["y"], path
    assert harness.opsets_of(model) == {"": 18, "argdemo": 1}, harness.opsets_of(model)
    table = harness.attributes(node)
    expected = {
        name: (ATTRIBUTE_TYPES[name], int(v) if isinstance(v, bool) else v)
        for name, v in values.items()
    }
    assert table == expected, (path, table, expected)
    if same_as:
        other = onnx.load(same_as).graph.node[0]
        assert list(other.input) == inputs and harness.attributes(other) == table, (path, same_as)
        print(f"  {path}: the very node of {same_as}")


def check_constants(path: str, values: dict) -> None:
    """In the standard-ONNX model each non-tensor argument is a constant of the right dtype: an
    initializer, or on torch 2.6 (no optimizer run) a Constant node, k an int64 one to CastLike."""
    model = onnx.load(path)
    constants = [onnx.numpy_helper.to_array(t) for t in model.graph.initializer]
    k_dtype = np.float32  # the optimizer folds CastLike(k, y) into a float32 initializer
    if harness.TORCH < (2, 7):  # export(optimize=False): Constant nodes, no initializer
        assert not constants, (path, constants)
        constants = [constant_value(n) for n in model.graph.node if n.op_type == "Constant"]
        k_dtype = np.int64

    def found(dtype, value) -> bool:
        return any(
            c.dtype == dtype and np.array_equal(c.reshape(-1), np.asarray(value, dtype))
            for c in constants
        )

    assert found(np.int64, values["dims"]), (path, "dims", constants)
    assert found(np.float32, values["scales"]), (path, "scales", constants)
    assert found(np.float32, [values["alpha"]]) and found(k_dtype, [values["k"]]), path


def constant_value(node) -> np.ndarray:
    """The value of a Constant node, whichever attribute holds it."""
    (attribute,) = node.attribute
    if attribute.name == "value":
        return onnx.numpy_helper.to_array(attribute.t)
    dtype = {"value_floats": np.float32, "value_ints": np.int64}[attribute.name]
    return np.asarray(onnx.helper.get_attribute_value(attribute), dtype)


def reference_matches(path: str, model: torch.nn.Module, *tensors: torch.Tensor) -> None:
    """The file's meaning, every attribute read: onnx.reference with step 3's op vs PyTorch."""
    names = [i.name for i in onnx.load(path).graph.input]
    feeds = {name: t.numpy() for name, t in zip(names, tensors, strict=True)}
    (y,) = ReferenceEvaluator(path, new_ops=[AllKinds]).run(None, feeds)
    compare(f"{path} (onnx.reference)", y, model(*tensors), rtol=1e-5, atol=1e-5)


if __name__ == "__main__":
    sys.exit(main())
