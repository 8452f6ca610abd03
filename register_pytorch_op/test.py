"""A C++ PyTorch op exported as one custom ONNX node with two outputs, by both exporters.

Run: python test.py [--out DIR] [-v]

Builds `cst::dual_residual(x, y, alpha) -> (x*alpha - y, y*alpha - x)` with
torch.utils.cpp_extension (TORCH_LIBRARY; and the legacy torch::RegisterOperators of the source
material). The torch.export-based exporter (dynamo=True, the default) first: a fake kernel
(checked by torch.library.opcheck), a custom_translation_table entry with a local ONNX schema
writes one `rknn_cst::cstDualResidual` node, which runs in ONNX Runtime with a Python kernel
(assert_onnx_program); the legacy op is traced through to Mul/Sub unless the translation is keyed
on it. Then the TorchScript-based exporter (dynamo=False): the same node from a symbolic, and
attributes of every kind from a second op. Last, what a runtime must provide.
Every python block of README.md is in this file; the lines
around them are the checks. Needs a C++ compiler; without one it exits 77 (SKIP).
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # the repository's harness.py
import harness  # the runner: the command line, the steps, the checks (harness.py)
from page_helpers import *  # noqa: F403 - the page's first block: common imports, helpers
from lesson_code import dual_residual_symbolic  # shared lessons

# The page's imports, then its helpers, word for word (a pasted page starts with them) ---------

# region imports
import logging
import time

import onnxscript
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun
# endregion

# ---------------------------------------------------------------------------------------------
# 1. Build the op
# ---------------------------------------------------------------------------------------------

# region step1
DUAL_RESIDUAL_CPP = r"""
// Two outputs from two tensors and a float.
std::tuple<torch::Tensor, torch::Tensor> dual_residual(
    const torch::Tensor& x, const torch::Tensor& y, double alpha) {
  return {x * alpha - y, y * alpha - x};
}

// The op's schema, then its kernel under a real dispatch key (CPU).
TORCH_LIBRARY(cst, m) {
  m.def("dual_residual(Tensor x, Tensor y, float alpha) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(cst, CPU, m) {
  m.impl("dual_residual", &dual_residual);
}
"""
# endregion

# region step1-2
LEGACY_CPP = r"""
#include <torch/script.h>
#include <string>
#include <vector>

// Legacy: torch::RegisterOperators, as Rockchip's example registers cst::dual_residual.
// The schema is inferred from the C++ signature; the function becomes a catch-all kernel.
static auto legacy_registry =
    torch::RegisterOperators().op("cst_legacy::dual_residual", &dual_residual);

// Step 6: one argument of each attribute kind: float, int, string, float list, int list.
torch::Tensor foo_forward(torch::Tensor x, torch::Tensor y, double alpha, int64_t beta,
                          std::string mode, std::vector<double> scales,
                          std::vector<int64_t> dims) {
  auto z = mode == "sub" ? x * alpha - y * beta : x * alpha + y * beta;
  auto per_channel = torch::tensor(scales, z.options()).view({1, -1, 1, 1});
  return (z * per_channel).sum(dims, /*keepdim=*/true);
}

// Legacy too, as PyTorch 1.10's torch.onnx documentation registers its foo_forward (step 6).
static auto foo_registry =
    torch::RegisterOperators().op("cst_legacy::foo_forward", &foo_forward);
"""
# endregion


def step1_build():
    """Build cst::dual_residual with torch.utils.cpp_extension.load_inline"""
    problem = harness.build_problem()
    if problem:
        raise harness.Skip(problem)
    with harness.quiet() as noise:  # torch 2.4 prints "No CUDA runtime is found", unfiltered
        # region step1-3
        logging.getLogger("torch.utils.cpp_extension").addFilter(
            lambda record: "No CUDA runtime" not in record.msg
        )
        from torch.utils import cpp_extension  # after the filter: importing it logs the message
        # endregion
    unexpected = [line for line in noise[0].splitlines() if line.strip() and "No CUDA" not in line]
    assert not unexpected, f"importing torch.utils.cpp_extension printed: {unexpected}"

    # region step1-4
    EXTENSION_NAME = "onnx_tutorial_register_pytorch_op"
    print("building the C++ extension: about a minute the first time, cached after")
    started = time.time()
    cpp_extension.load_inline(
        name=EXTENSION_NAME,
        cpp_sources=[DUAL_RESIDUAL_CPP, LEGACY_CPP],
        is_python_module=False,  # the ops register themselves when the library loads
        verbose=False,
    )
    (library,) = [path for path in torch.ops.loaded_libraries if EXTENSION_NAME in path]
    if os.path.getmtime(library) >= started:
        print(f"  built {library} in {time.time() - started:.0f} s")
    else:
        print(f"  reused the cached build {library} ({time.time() - started:.1f} s)")
    print("  torch.ops.cst.dual_residual:", torch.ops.cst.dual_residual.default._schema)
    # endregion

    x, y = torch.randn(2, 3, 4), torch.randn(2, 3, 4)
    for op in (torch.ops.cst.dual_residual, torch.ops.cst_legacy.dual_residual):
        first, second = op(x, y, 0.5)
        torch.testing.assert_close(first, x * 0.5 - y)
        torch.testing.assert_close(second, y * 0.5 - x)


# region DualResidualModel
class DualResidualModel(torch.nn.Module):
    def __init__(self, alpha: float = 0.5) -> None:
        super().__init__()
        self.alpha = alpha

    def forward(self, x, y):
        return torch.ops.cst.dual_residual(x, y, self.alpha)
# endregion


# ---------------------------------------------------------------------------------------------
# 2. dynamo=True: a fake kernel for torch.export
# ---------------------------------------------------------------------------------------------

# Why the dynamo=True steps (2 to 4) need torch 2.6
DYNAMO_WHY = harness.TABLE + "; on 2.4, dynamo=True is the old torch.onnx.dynamo_export"
# What torch 2.8's draft export ends with (step 2), and every torch without a translation
NO_TRANSLATION = "No ONNX function found for <OpOverload(op='cst.dual_residual'"


@harness.needs_torch("2.6", DYNAMO_WHY)
def step2_fake_kernel():
    """dynamo=True: a fake kernel for torch.export"""
    need_step1_ops()
    print("  exporting with dynamo=True: a few seconds per export, six exports in steps 2 to 4")
    # region step2
    os.makedirs("failures", exist_ok=True)
    model = DualResidualModel().eval()
    inputs = (torch.randn(2, 3, 4), torch.randn(2, 3, 4))
    # endregion

    # torch 2.8's CAPTURE_STRATEGIES end in draft export (2.6 and 2.7: no draft export; 2.9 on:
    # off by default): torch.export fails on the missing fake kernel, and draft export runs
    if harness.TORCH == (2, 8):
        harness.differs(
            "dynamo=True writes opset 18 (20 from 2.9), and a missing fake kernel does not stop "
            "it: draft export runs the CPU kernel, and the export fails later, at conversion"
        )
        report = "it was not able to soundly produce a graph"
        with harness.quiet(report), expect_error(NO_TRANSLATION):
            torch.onnx.export(model, inputs, dynamo=True, verbose=False)
        print(f"  draft export logged: ... {report} ...")
    else:
        # region step2-2
        with expect_error("UnsupportedOperatorException'>: cst.dual_residual.default"):
            torch.onnx.export(model, inputs, dynamo=True, verbose=False)
        # endregion
    # region step2-3
    with expect_error("UnsupportedOperatorException: cst.dual_residual.default"):
        torch.export.export(model, inputs, strict=False)
    # endregion

    # region _
    @torch.library.register_fake("cst::dual_residual")
    def _(x, y, alpha):
        return torch.empty_like(x), torch.empty_like(y)
    # endregion

    # region step2-4
    checks = torch.library.opcheck(torch.ops.cst.dual_residual.default, (*inputs, 0.5))
    print("  opcheck:", ", ".join(f"{test}: {result}" for test, result in checks.items()))
    # endregion

    # region step2-5
    with expect_error("No ONNX function found for <OpOverload(op='cst.dual_residual'"):
        torch.onnx.export(model, inputs, dynamo=True, verbose=False)
    # endregion

    assert set(checks.values()) == {"SUCCESS"}, checks
    captured = torch.export.export(model, inputs, strict=False)  # the fake kernel got it through
    assert "cst.dual_residual.default" in call_targets(captured), call_targets(captured)


# ---------------------------------------------------------------------------------------------
# 3. dynamo=True: one node from a translation, run in ONNX Runtime
# ---------------------------------------------------------------------------------------------


# region dual_residual_no_schema
rknn_cst = onnxscript.values.Opset("rknn_cst", 1)


def dual_residual_no_schema(x, y, alpha: float):
    return rknn_cst.cstDualResidual(x, y, alpha=alpha)
# endregion


# region dual_residual_translation
# The node's ONNX schema, kept local: it tells onnxscript that the node has two outputs.
Parameter = onnx.defs.OpSchema.FormalParameter
dual_residual_schema = onnx.defs.OpSchema(
    "cstDualResidual",
    "rknn_cst",
    1,
    inputs=[Parameter("X", "T"), Parameter("Y", "T")],
    outputs=[Parameter("X_res", "T"), Parameter("Y_res", "T")],
    type_constraints=[("T", ["tensor(float)"], "float32 tensors")],
    attributes=[onnx.defs.OpSchema.Attribute("alpha", onnx.defs.OpSchema.AttrType.FLOAT, "")],
)
cstDualResidual = onnxscript.values.Op(rknn_cst, "cstDualResidual", dual_residual_schema)


def dual_residual_translation(x, y, alpha: float):
    return cstDualResidual(x, y, alpha=alpha)
# endregion


@harness.needs_torch("2.6", DYNAMO_WHY)
def step3_translation():
    """dynamo=True: one rknn_cst::cstDualResidual node from a translation"""
    need_step1_ops()
    model = DualResidualModel().eval()  # the model and inputs of step 2, and its fake kernel
    inputs = (torch.randn(2, 3, 4), torch.randn(2, 3, 4))
    if harness.TORCH < (2, 9):
        harness.differs("dynamo=True writes opset 18 (20 from 2.9)")

    # region step3
    table = {torch.ops.cst.dual_residual.default: dual_residual_no_schema}
    with expect_error("No schema registered for 'cstDualResidual' version '1'"):
        torch.onnx.export(model, inputs, dynamo=True, verbose=False, custom_translation_table=table)
    # endregion

    # region step3-2
    onnx_program = torch.onnx.export(
        model, inputs, dynamo=True, verbose=False, input_names=["x", "y"],
        output_names=["x_res", "y_res"],
        custom_translation_table={torch.ops.cst.dual_residual.default: dual_residual_translation},
    )
    onnx_program.save("dual_residual_dynamo.onnx")
    print(onnx.printer.to_text(onnx_program.model_proto.graph))
    # endregion

    exported = onnx.load("dual_residual_dynamo.onnx")
    onnx.checker.check_model(exported, full_check=True)
    (node,) = exported.graph.node
    assert (node.domain, node.op_type) == ("rknn_cst", "cstDualResidual")
    assert not onnx.defs.has("cstDualResidual", "rknn_cst")  # the schema stayed local
    outputs = [(o.name, harness.type_text(o.type)) for o in exported.graph.output]
    assert outputs == [("x_res", "float32[2,3,4]"), ("y_res", "float32[2,3,4]")], outputs
    assert harness.opsets_of(exported) == {"": 18 if harness.TORCH < (2, 9) else 20, "rknn_cst": 1}

    # region step3-3
    with expect_error("rknn_cst:cstDualResidual(-1) is not a registered function/op"):
        ort.InferenceSession("dual_residual_dynamo.onnx", providers=["CPUExecutionProvider"])
    # endregion
    if onnx_op is None:
        raise harness.Skip(harness.ortx_problem())

    # region step3-4
    onnx_program.initialize_inference_session(ortx_session)  # runs the @onnx_op kernel
    assert_onnx_program(onnx_program, rtol=1e-6, atol=1e-6)  # ONNX Runtime vs PyTorch
    print("  dual_residual_dynamo.onnx: ONNX Runtime matches PyTorch (assert_onnx_program)")
    # endregion


# ---------------------------------------------------------------------------------------------
# 4. dynamo=True and a legacy RegisterOperators op
# ---------------------------------------------------------------------------------------------


# region LegacyDualResidualModel
class LegacyDualResidualModel(torch.nn.Module):
    def forward(self, x, y):
        return torch.ops.cst_legacy.dual_residual(x, y, 0.5)
# endregion


@harness.needs_torch("2.5", "on 2.4, dynamo=True is the older torch.onnx.dynamo_export")
def step4_legacy_op():
    """dynamo=True and a legacy RegisterOperators op"""
    need_step1_ops()
    inputs = (torch.randn(2, 3, 4), torch.randn(2, 3, 4))  # the inputs of step 2
    traced_ops = ["Mul", "Sub", "Mul", "Sub"]
    if harness.TORCH < (2, 7):  # 2.5, 2.6: torch.onnx.export says optimize=False by default
        harness.differs("dynamo=True writes opset 18 (20 from 2.9) and, before 2.7, does not "
                        "optimize by default (optimize=False): alpha's two Constant nodes stay")
        traced_ops = ["Constant", "Mul", "Sub", "Constant", "Mul", "Sub"]
    elif harness.TORCH < (2, 9):
        harness.differs("dynamo=True writes opset 18 (20 from 2.9)")

    # region step4
    legacy_model = LegacyDualResidualModel().eval()
    legacy_program = torch.onnx.export(legacy_model, inputs, dynamo=True, verbose=False)
    print("  the custom node is gone:", [n.op_type for n in legacy_program.model_proto.graph.node])
    assert_onnx_program(legacy_program, rtol=1e-6, atol=1e-6)  # right numbers, no custom node
    legacy_program.save("failures/dual_residual_traced_through.onnx")
    # endregion

    # region step4-2
    dispatch = torch._C._dispatch_dump("cst_legacy::dual_residual")
    print(" ", next(line for line in dispatch.splitlines() if "CompositeImplicitAutograd" in line))
    # endregion

    traced = harness.show("failures/dual_residual_traced_through.onnx")
    assert [n.op_type for n in traced.graph.node] == traced_ops, traced.graph.node
    opsets = {"": 18 if harness.TORCH < (2, 9) else 20}
    if harness.TORCH < (2, 6):  # 2.5 imports the domain of onnxscript's helper functions too
        opsets["pkg.onnxscript.torch_lib.common"] = 1
        harness.differs("the file also imports pkg.onnxscript.torch_lib.common, a domain no node uses")
    assert harness.opsets_of(traced) == opsets, harness.opsets_of(traced)
    assert "registered by RegisterOperators" in dispatch
    # torch.export keeps the legacy op; the exporter's run_decompositions replaces it
    captured = torch.export.export(legacy_model, inputs, strict=False)
    assert "cst_legacy.dual_residual.default" in call_targets(captured), call_targets(captured)
    decomposed = call_targets(captured.run_decompositions())
    assert not any(t.startswith("cst_legacy.") for t in decomposed), decomposed
    if harness.TORCH < (2, 7):  # torch 2.6's _decomp.py keeps from decomposition aten/prims only
        raise harness.NeedsTorch("2.7", "custom_translation_table came with 2.6, and 2.6 decomposes "
                                 "a non-aten op even when the table names it: the translation goes unused")

    # region step4-3
    legacy_table = {torch.ops.cst_legacy.dual_residual.default: dual_residual_translation}
    legacy_kept = torch.onnx.export(
        legacy_model, inputs, dynamo=True, verbose=False, input_names=["x", "y"],
        output_names=["x_res", "y_res"], custom_translation_table=legacy_table,
    )
    print("  one node again:", [n.op_type for n in legacy_kept.model_proto.graph.node])
    legacy_kept.save("dual_residual_legacy_dynamo.onnx")
    # endregion

    kept = onnx.load("dual_residual_legacy_dynamo.onnx")
    onnx.checker.check_model(kept, full_check=True)
    (node,) = kept.graph.node
    assert (node.domain, node.op_type) == ("rknn_cst", "cstDualResidual")
    outputs = [(o.name, harness.type_text(o.type)) for o in kept.graph.output]
    assert outputs == [("x_res", "float32[2,3,4]"), ("y_res", "float32[2,3,4]")], outputs
    from torch._library.simple_registry import singleton  # where register_fake records

    assert singleton.find("cst_legacy::dual_residual").fake_impl.kernel is None  # no fake kernel
    if onnx_op is None:
        raise harness.Skip(harness.ortx_problem())

    # region step4-4
    legacy_kept.initialize_inference_session(ortx_session)
    assert_onnx_program(legacy_kept, rtol=1e-6, atol=1e-6)  # ONNX Runtime vs PyTorch
    print("  dual_residual_legacy_dynamo.onnx: ONNX Runtime matches PyTorch (assert_onnx_program)")
    # endregion


# ---------------------------------------------------------------------------------------------
# 5. dynamo=False: the same node from a symbolic
# ---------------------------------------------------------------------------------------------

# The graphs the TorchScript exporter prints before it raises: torch 2.5 to 2.14 the second,
# torch 2.15 both, torch 2.4 neither (README, Notes)
DUMPS = ("ONNX graph being constructed during exception:", "Torch IR graph at exception:")


# region dual_residual_untyped
@parse_args("v", "v", "f")
def dual_residual_untyped(g, x, y, alpha):
    return g.op("rknn_cst::cstDualResidual", x, y, alpha_f=alpha, outputs=2)
# endregion


# dual_residual_symbolic: lesson_code.py's region, on the page here


def step5_symbolic():
    """dynamo=False: the same node from a symbolic"""
    need_step1_ops()
    model = DualResidualModel().eval()  # the model and inputs of step 2
    inputs = (torch.randn(2, 3, 4), torch.randn(2, 3, 4))
    with harness.quiet() as dump:  # the exporter's graph dumps, reported below
        # region step5
        with expect_error("ONNX export failed on an operator with unrecognized namespace"):
            torch.onnx.export(
                model, inputs, "failures/dual_residual.onnx", dynamo=False, opset_version=12
            )
        # endregion
    other_dumps = held_back(dump[0])

    name = "cst::dual_residual"  # the op's name, in the message on torch 2.4, 2.14 and 2.15
    if harness.TORCH in ((2, 8), (2, 9)):  # their torch/onnx/errors.py lacks an f-string's f
        name = "{op_name}"
        harness.differs("the message says {op_name} where the op's name belongs")
    elif harness.TORCH < (2, 0):  # torch 1.13's torch/onnx/errors.py quotes the name
        name = "'cst::dual_residual'"
        harness.differs("the message quotes the op's name: 'cst::dual_residual'")
    elif other_dumps:  # torch 2.4: no dump; torch 2.15: two
        harness.differs(other_dumps)
    assert f"unrecognized namespace {name}. If you are trying" in harness.printed()

    warning = "The shape inference of rknn_cst::cstDualResidual type is missing"
    with harness.quiet(warning):  # the exporter's C++ warning, checked
        # region step5-2
        register_custom_op_symbolic("cst::dual_residual", dual_residual_untyped, 12)
        torch.onnx.export(
            model, inputs, "dual_residual_untyped.onnx", dynamo=False, opset_version=12,
            custom_opsets={"rknn_cst": 1}, input_names=["x", "y"],
            output_names=["x_res", "y_res"],
        )
        # endregion
    print(f"  the exporter warned: {warning} ...")
    with harness.quiet() as typed:
        # region step5-3
        register_custom_op_symbolic("cst::dual_residual", dual_residual_symbolic, 12)
        torch.onnx.export(
            model, inputs, "dual_residual.onnx", dynamo=False, opset_version=12,
            custom_opsets={"rknn_cst": 1}, input_names=["x", "y"],
            output_names=["x_res", "y_res"],
        )
        # endregion
    assert (warning in typed[0]) == (harness.TORCH < (2, 0)), typed[0]  # 1.13: see below

    # region step5-4
    for path in ["dual_residual_untyped.onnx", "dual_residual.onnx"]:
        print(onnx.printer.to_text(onnx.load(path).graph))
    # endregion

    shapes = {}
    for path in ["dual_residual_untyped.onnx", "dual_residual.onnx"]:
        written = onnx.load(path)
        onnx.checker.check_model(written, full_check=True)
        assert [v.name for v in written.graph.output] == ["x_res", "y_res"], path
        shapes[path] = [harness.type_text(v.type) for v in written.graph.output]
    made_up = r"float32\[(cstDualResidual\w+,?){3}\]"  # the exporter's made-up dimension names
    assert all(re.fullmatch(made_up, t) for t in shapes["dual_residual_untyped.onnx"]), shapes
    if harness.TORCH < (2, 0):  # torch 1.13 keeps its made-up sizes: setType's do not reach the file
        assert shapes["dual_residual.onnx"] == shapes["dual_residual_untyped.onnx"], shapes
        harness.differs("setType's sizes do not reach the file: the exporter warns, sizes made up")
    else:
        assert shapes["dual_residual.onnx"] == ["float32[2,3,4]"] * 2, shapes
        print("  with setType: no warning; outputs x_res, y_res: float32[2,3,4]")

    if onnx_op is None:
        raise harness.Skip(harness.ortx_problem())
    # region step5-5
    feeds = {"x": inputs[0].numpy(), "y": inputs[1].numpy()}
    for path in ["dual_residual_untyped.onnx", "dual_residual.onnx"]:
        actual = ortx_session(path).run(None, feeds)
        for name, got, expected in zip(["x_res", "y_res"], actual, model(*inputs), strict=True):
            compare(f"{path} {name}", got, expected, rtol=1e-6, atol=1e-6)
    # endregion


# ---------------------------------------------------------------------------------------------
# 6. Attributes of every kind
# ---------------------------------------------------------------------------------------------


# region FooModel
class FooModel(torch.nn.Module):
    def forward(self, x, y):
        return torch.ops.cst_legacy.foo_forward(x, y, 0.5, 2, "sub", [1.0, 2.0, 3.0], [2, 3])
# endregion


# region foo_forward_with_fs
@parse_args("v", "v", "f", "i", "s", "fs", "is")
def foo_forward_with_fs(g, x, y, alpha, beta, mode, scales, dims):
    attributes = {"alpha_f": alpha, "beta_i": beta, "mode_s": mode, "scales_f": scales}
    return g.op("rknn_cst::Foo", x, y, dims_i=dims, **attributes)
# endregion


# region foo_forward_symbolic
@parse_args("v", "v", "f", "i", "s", "v", "is")
def foo_forward_symbolic(g, x, y, alpha, beta, mode, scales, dims):
    # Take the float list as "v" and read each element's constant.
    scales = [element.node().t("value").item() for element in scales.node().inputs()]
    # parse_args' descriptor: the Python value you get; the g.op suffix: what ONNX stores.
    out = g.op(
        "rknn_cst::Foo",
        x,
        y,
        alpha_f=alpha,  # FLOAT
        beta_i=beta,  # INT
        mode_s=mode,  # STRING
        scales_f=scales,  # FLOATS: a list given to _f
        dims_i=dims,  # INTS: a list given to _i
    )
    # Output shape: the input's, with the summed dimensions kept as size 1.
    shape = [1 if axis in dims else size for axis, size in enumerate(x.type().sizes())]
    out.setType(x.type().with_sizes(shape))
    return out
# endregion


# region Foo
class Foo(OpRun):
    """rknn_cst::Foo for onnx.reference.ReferenceEvaluator: it reads every attribute kind."""

    op_domain = "rknn_cst"

    def _run(self, x, y, alpha=None, beta=None, mode=None, scales=None, dims=None):
        z = x * np.float32(alpha) + (-1 if mode == "sub" else 1) * y * np.float32(beta)
        z = z * np.asarray(scales, dtype=x.dtype).reshape(1, -1, 1, 1)
        return (z.sum(axis=tuple(dims), keepdims=True),)
# endregion


def step6_attributes():
    """dynamo=False: attributes of every kind, from cst_legacy::foo_forward"""
    need_step1_ops()
    with harness.quiet() as dump:  # the exporter's graph dumps, as in step 5
        # region step6
        foo_model = FooModel().eval()
        foo_inputs = (torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5))
        register_custom_op_symbolic("cst_legacy::foo_forward", foo_forward_with_fs, 12)
        with expect_error("unpack the ListConstruct node that is not a list of integers"):
            torch.onnx.export(
                foo_model, foo_inputs, "failures/foo.onnx", dynamo=False, opset_version=12
            )
        # endregion
    other_dumps = held_back(dump[0])
    if other_dumps:  # torch 2.4: no dump; torch 2.15: two
        harness.differs(other_dumps)

    # region step6-2
    register_custom_op_symbolic("cst_legacy::foo_forward", foo_forward_symbolic, 12)
    torch.onnx.export(
        foo_model, foo_inputs, "failures/foo_all_attributes.onnx", dynamo=False,
        opset_version=12, custom_opsets={"rknn_cst": 1}, input_names=["x", "y"],
    )
    # endregion
    exported = harness.show("failures/foo_all_attributes.onnx")

    # region step6-3
    foo_onnx = onnx.load("failures/foo_all_attributes.onnx")
    (foo_node,) = foo_onnx.graph.node
    kinds = {a.name: onnx.AttributeProto.AttributeType.Name(a.type) for a in foo_node.attribute}
    print("  attribute types:", kinds)
    feeds = {"x": foo_inputs[0].numpy(), "y": foo_inputs[1].numpy()}
    (foo_actual,) = ReferenceEvaluator(foo_onnx, new_ops=[Foo]).run(None, feeds)
    expected = foo_model(*foo_inputs)
    compare("failures/foo_all_attributes.onnx", foo_actual, expected, rtol=1e-5, atol=1e-5)
    # endregion

    assert kinds == {
        "alpha": "FLOAT",
        "beta": "INT",
        "mode": "STRING",
        "scales": "FLOATS",
        "dims": "INTS",
    }, kinds
    (output,) = [harness.type_text(o.type) for o in exported.graph.output]
    if harness.TORCH < (2, 0):  # torch 1.13 keeps its made-up sizes (step 5)
        assert output.startswith("float32[") and "2,3,1,1" not in output, output
        harness.differs("setType's sizes do not reach the file: the output's sizes are made up")
    else:
        assert output == "float32[2,3,1,1]", output


# ---------------------------------------------------------------------------------------------
# 7. Deploying a model with a custom-domain node
# ---------------------------------------------------------------------------------------------


# region custom_nodes
def custom_nodes(path):
    """Print what a runtime must provide to run PATH: each node outside ONNX's own domains."""
    model_proto = onnx.load(path)
    versions = {opset.domain: opset.version for opset in model_proto.opset_import}
    for node in model_proto.graph.node:
        if node.domain and node.domain.split(".")[:2] != ["ai", "onnx"]:  # not ai.onnx.*
            attributes = [
                f"{a.name}: {onnx.AttributeProto.AttributeType.Name(a.type)}"
                for a in node.attribute
            ]
            op = f"{node.domain}::{node.op_type} version {versions[node.domain]}"
            counts = f"{len(node.input)} inputs, {len(node.output)} outputs"
            print(f"  {path} needs {op}:\n    {counts}, attributes {', '.join(attributes)}")
# endregion


def step7_deploy():
    """Deploying a model with a custom-domain node"""
    if harness.TORCH < (2, 6):  # step 3, which writes dual_residual_dynamo.onnx, needs torch 2.6
        if not os.path.isfile("dual_residual.onnx"):
            raise harness.Skip("needs the model of step 5: dual_residual.onnx")
        custom_nodes("dual_residual.onnx")
        why = "the other model, dual_residual_dynamo.onnx, comes from step 3"
        raise harness.NeedsTorch("2.6", why)
    models = ["dual_residual_dynamo.onnx", "dual_residual.onnx"]
    missing = [path for path in models if not os.path.isfile(path)]
    if missing:
        raise harness.Skip(f"needs the models of steps 3 and 5: {', '.join(missing)}")
    # region step7
    for path in ["dual_residual_dynamo.onnx", "dual_residual.onnx"]:
        custom_nodes(path)
    # endregion


# ---------------------------------------------------------------------------------------------
# 8. A float16 or bfloat16 model: the node between Casts
# ---------------------------------------------------------------------------------------------


# region dual_residual_half
# The kernel takes float32 only (onnxruntime-extensions' Python kernels have no float16 or
# bfloat16): the schema's T stays tensor(float); a half-precision model casts around the node.
op = onnxscript.opset18  # ONNX's standard ops, for translations


def dual_residual_cast_translation(x, y, alpha: float):
    x32, y32 = op.Cast(x, to=onnx.TensorProto.FLOAT), op.Cast(y, to=onnx.TensorProto.FLOAT)
    x_res, y_res = cstDualResidual(x32, y32, alpha=alpha)
    return op.CastLike(x_res, x), op.CastLike(y_res, y)  # back to the model's dtype
# endregion


# region dual_residual_cast_symbolic
@parse_args("v", "v", "f")
def dual_residual_cast_symbolic(g, x, y, alpha):  # the same Casts, for dynamo=False
    x32 = g.op("Cast", x, to_i=onnx.TensorProto.FLOAT)
    y32 = g.op("Cast", y, to_i=onnx.TensorProto.FLOAT)
    x_res, y_res = g.op("rknn_cst::cstDualResidual", x32, y32, alpha_f=alpha, outputs=2)
    x_res.setType(x.type().with_dtype(torch.float32))
    y_res.setType(y.type().with_dtype(torch.float32))
    return g.op("CastLike", x_res, x), g.op("CastLike", y_res, y)  # CastLike: opset 15 on
# endregion


def step8_half_precision():
    """A float16 or bfloat16 model: the node between Casts"""
    need_step1_ops()
    if onnx_op is None:
        raise harness.Skip(harness.ortx_problem())
    model = DualResidualModel().eval()  # step 2's model, alpha = 0.5
    dynamo = harness.TORCH >= (2, 6)
    if dynamo:  # torch 2.6 on: the failing file, then the fix, with dynamo=True
        # region step8
        x, y = torch.randn(2, 3, 4).to(torch.bfloat16), torch.randn(2, 3, 4).to(torch.bfloat16)
        path = "failures/dual_residual_bf16_dynamo.onnx"
        torch.onnx.export(  # step 3's translation: its local schema says T = tensor(float)
            model, (x, y), path, dynamo=True, verbose=False, external_data=False,
            input_names=["x", "y"], output_names=["x_res", "y_res"],
            custom_translation_table={torch.ops.cst.dual_residual.default: dual_residual_translation},
        )
        (node,) = onnx.load(path).graph.node
        print(f"  {path}: exported, {node.op_type} on bfloat16")
        with expect_error("Type 'tensor(bfloat16)' of input parameter (x) of operator (cstDual"):
            ort.InferenceSession(path, ortx_options(), providers=["CPUExecutionProvider"])
        with expect_error("has unsupported type: tensor(bfloat16)"):
            check_with_schemas(path, dual_residual_schema)  # right after the export: caught
        # endregion

        # region step8-2
        table = {torch.ops.cst.dual_residual.default: dual_residual_cast_translation}
        paths = {torch.float16: "dual_residual_float16_dynamo.onnx",
                 torch.bfloat16: "dual_residual_bfloat16_dynamo.onnx"}
        for dtype, path in paths.items():
            x, y = torch.randn(2, 3, 4).to(dtype), torch.randn(2, 3, 4).to(dtype)
            torch.onnx.export(
                model, (x, y), path, dynamo=True, verbose=False, external_data=False,
                input_names=["x", "y"], output_names=["x_res", "y_res"],
                custom_translation_table=table,
            )
            check_with_schemas(path, dual_residual_schema)  # the full check, schema registered
            actual, expected = run_ort_torch(path, [x, y], ortx_options()), model(x, y)
            ulp = torch.finfo(dtype).eps  # one unit in the last place, relative: 2**-10, 2**-7
            for got, want in zip(actual, expected, strict=True):  # subnormal: atol, one unit
                torch.testing.assert_close(got, want, rtol=ulp, atol=torch.finfo(dtype).tiny * ulp)
            print(f"  {path}: checked; within one ulp of PyTorch's, in {str(dtype)[6:]}")
        # endregion
        for dtype in ("float16", "bfloat16"):  # torch 2.6 keeps each CastLike; later a Cast
            path = f"dual_residual_{dtype}_dynamo.onnx"
            exported = harness.show(path)
            ops = harness.op_types(path)
            assert ops[:3] == ["Cast", "Cast", "rknn_cst.cstDualResidual"], ops
            assert ops[3:] in (["Cast", "Cast"], ["CastLike", "CastLike"]), ops
            assert [harness.type_text(o.type) for o in exported.graph.output] == [
                f"{dtype}[2,3,4]"] * 2, exported.graph.output

    # region step8-3
    register_custom_op_symbolic("cst::dual_residual", dual_residual_cast_symbolic, 15)
    paths = {torch.float16: "dual_residual_float16.onnx",
             torch.bfloat16: "dual_residual_bfloat16.onnx"}
    for dtype, path in paths.items():
        x, y = torch.randn(2, 3, 4).to(dtype), torch.randn(2, 3, 4).to(dtype)
        torch.onnx.export(
            model, (x, y), path, dynamo=False, opset_version=17, custom_opsets={"rknn_cst": 1},
            input_names=["x", "y"], output_names=["x_res", "y_res"],
        )
        check_with_schemas(path, dual_residual_schema)
        actual, expected = run_ort_torch(path, [x, y], ortx_options()), model(x, y)
        ulp = torch.finfo(dtype).eps
        for got, want in zip(actual, expected, strict=True):
            torch.testing.assert_close(got, want, rtol=ulp, atol=torch.finfo(dtype).tiny * ulp)
        print(f"  {path}: checked; within one ulp of PyTorch's, in {str(dtype)[6:]}")
    # endregion
    for dtype in ("float16", "bfloat16"):
        path = f"dual_residual_{dtype}.onnx"
        exported = harness.show(path)
        assert harness.op_types(path) == [
            "Cast", "Cast", "rknn_cst.cstDualResidual", "CastLike", "CastLike"]
        assert harness.opsets_of(exported) == {"": 17, "rknn_cst": 1}, exported.opset_import
        outputs = [harness.type_text(o.type) for o in exported.graph.output]
        if harness.TORCH < (2, 0):  # torch 1.13: setType's sizes do not reach the file (step 5)
            assert all(t.startswith(f"{dtype}[") for t in outputs), outputs
        else:
            assert outputs == [f"{dtype}[2,3,4]"] * 2, exported.graph.output
    if harness.TORCH < (2, 0):
        harness.differs("setType's sizes do not reach the file: the outputs' sizes are made up")
    if not dynamo:
        raise harness.NeedsTorch("2.6", "the dynamo=True half of this step: " + DYNAMO_WHY)


# ---------------------------------------------------------------------------------------------

KEPT = {  # what each step writes and claims valid; failure demonstrations below
    3: ("dual_residual_dynamo.onnx",),
    4: ("dual_residual_legacy_dynamo.onnx",),
    5: ("dual_residual_untyped.onnx", "dual_residual.onnx"),
    8: ("dual_residual_float16_dynamo.onnx", "dual_residual_bfloat16_dynamo.onnx",
        "dual_residual_float16.onnx", "dual_residual_bfloat16.onnx"),
}
FAILURES = (
    "failures/dual_residual_traced_through.onnx",  # right numbers, no custom node (step 4)
    "failures/dual_residual.onnx",  # never written: the export fails (step 5)
    "failures/foo.onnx",  # never written: the export fails (step 6)
    "failures/foo_all_attributes.onnx",  # valid, but the Python stand-in cannot run it (step 6)
    "failures/dual_residual_bf16_dynamo.onnx",  # bfloat16 through a float-only schema (step 8)
)
# For ERRORS.md: part of each reproduced error -> (what raises it, its cause[, fixing step])
CAUSES = {
    "UnsupportedOperatorException'>: cst.dual_residual.default": (
        "dynamo=True",
        "a `TORCH_LIBRARY` op with no fake kernel: `torch.export` cannot trace it on fake "
        "tensors; add `torch.library.register_fake`",
        2,
    ),
    "UnsupportedOperatorException: cst.dual_residual.default": (
        "dynamo=True",
        "`torch.export.export` (step 1 of `dynamo=True`) on a `TORCH_LIBRARY` op with no fake "
        "kernel: add `torch.library.register_fake`",
        2,
    ),
    NO_TRANSLATION: (
        "dynamo=True",
        "the custom op has no ONNX translation: `dynamo=True` ignores symbolics; give it a "
        "`custom_translation_table` entry",
        3,
    ),
    "No schema registered for 'cstDualResidual' version '1' and domain 'rknn_cst'": (
        "dynamo=True",
        "`Opset(...).cstDualResidual` looks the node's schema up in ONNX's registry: build the "
        "op with a local schema, `onnxscript.values.Op(opset, name, schema)`",
        3,
    ),
    "rknn_cst:cstDualResidual(-1) is not a registered function/op": (
        "ONNX Runtime",
        "the custom-domain node is meant for RKNN: ONNX Runtime has no kernel for it unless you "
        "register one",
        3,
    ),
    "ONNX export failed on an operator with unrecognized namespace": (
        "dynamo=False",
        "your C++ op (`cst::dual_residual`) has no symbolic: register one with "
        "`register_custom_op_symbolic`",
        5,
    ),
    "unpack the ListConstruct node that is not a list of integers": (
        "dynamo=False",
        '`parse_args("fs")` on an op registered with `torch::RegisterOperators` (legacy): the '
        'traced float list stays a `prim::ListConstruct`; take it as `"v"` (or register the op '
        "with `TORCH_LIBRARY`)",
        6,
    ),
    "Type 'tensor(bfloat16)' of input parameter (x) of operator (cstDual": (
        "ONNX Runtime",
        "a custom node of a type its kernel is not declared for (`PyCustomOpDef.dt_float`): the "
        "exporter wrote the model's bfloat16, though the local schema lists `tensor(float)` only; "
        "cast to float32 around the node",
        8,
    ),
    "has unsupported type: tensor(bfloat16)": (
        "onnx.checker",
        "with the op's schema registered, the checker refuses a node of a type the schema does not "
        "list: the check the exporter does not make for a local schema",
        8,
    ),
}


def main(argv: list[str] | None = None) -> int:
    return harness.run(__file__, globals(), kept=KEPT, failures=FAILURES, causes=CAUSES, argv=argv)


# ---------------------------------------------------------------------------------------------
# Test-only helpers
# ---------------------------------------------------------------------------------------------


def need_step1_ops() -> None:
    """Steps 2 to 6 use the ops step 1 builds: skip them, with the reason, when step 1 could not."""
    if not hasattr(torch.ops.cst, "dual_residual"):
        raise harness.Skip("needs the C++ ops of step 1")


def call_targets(program) -> list[str]:
    """The ops an ExportedProgram calls, in order."""
    return [str(n.target) for n in program.graph.nodes if n.op == "call_function"]


def held_back(text: str) -> str:
    """Say which graph dumps of the exporter quiet() held back; return how that differs from
    torch 2.5 to 2.14, which print the TorchScript graph only ('' when it does not)."""
    dumps = [d for d in DUMPS if d in text]
    if not dumps:
        print("  the exporter printed no graph dump")
        return "the failing export prints no graph dump"
    shown = f"dump{'s' if len(dumps) > 1 else ''} {' and '.join(map(repr, dumps))}"
    print(f"  held back (shown with -v): the exporter's {shown}")
    return f"the failing export also prints {DUMPS[0]!r} and that graph" if len(dumps) > 1 else ""


if __name__ == "__main__":
    sys.exit(main())
