"""Operators written as onnxscript functions inside the exported ONNX model.

Run: python test.py [--out DIR] [-v]

An op ONNX has no operator for (here torch.special.spherical_bessel_j0, sin(x) / x), which
standard ops can compute, is written once as an onnxscript function. dynamo=True:
custom_translation_table takes it, and the exporter inlines it. dynamo=False: g.onnxscript_op puts
a call to it in the graph and the function (a FunctionProto) in the model; the source material's
Selu shows the opsets that must agree. Every python block of README.md is in this file; the lines
around them are the checks.
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # the repository's harness.py
import harness  # the runner: the command line, the steps, the checks (harness.py)
from page_helpers import *  # noqa: F403 - the page's first block: common imports, helpers

# The page's imports, then its helpers, word for word (a pasted page starts with them) ---------

# region imports
import onnx.inliner
import onnxscript
from onnxscript import FLOAT
from onnxscript.onnx_opset import opset14, opset15, opset18
from torch.onnx import unregister_custom_op_symbolic
# endregion

# ---------------------------------------------------------------------------------------------
# 1. dynamo=True: the function in custom_translation_table
# ---------------------------------------------------------------------------------------------

# region J0
class J0(torch.nn.Module):
    """torch.special.spherical_bessel_j0: sin(x) / x, and 1 at x = 0. ONNX has no such op."""

    def forward(self, x):
        return torch.special.spherical_bessel_j0(x)
# endregion


# region j0_translation
custom_onnx_script = onnxscript.values.Opset(domain="custom-onnx-script", version=1)


# Works: a plain Python function calling onnxscript ops, traced op by op. Its parameter is named
# as in the op's schema, aten::special_spherical_bessel_j0(Tensor x): torch 2.8 matches by name.
def j0_translation(x):
    zero = opset18.CastLike(0.0, x)
    quotient = opset18.Sin(x) / x  # nan at 0 and at ±inf, where torch gives 1 and 0
    finite = opset18.Where(opset18.IsInf(x), zero, quotient)
    # Equal, not ==: here == compares two Python objects, and is False
    return opset18.Where(opset18.Equal(x, zero), opset18.CastLike(1.0, x), finite)


# Works: an @onnxscript.script function with its types annotated (FLOAT: a float32 tensor).
@onnxscript.script(custom_onnx_script)
def SphericalBesselJ0(x: FLOAT) -> FLOAT:
    zero = opset18.CastLike(0.0, x)
    quotient = opset18.Sin(x) / x
    finite = opset18.Where(opset18.IsInf(x), zero, quotient)
    return opset18.Where(opset18.Equal(x, zero), opset18.CastLike(1.0, x), finite)
# endregion


@harness.needs_torch("2.6", harness.TABLE)
def step1_dynamo_translation():
    """dynamo=True: the function in custom_translation_table"""
    # region j0_model_input
    model = J0().eval()
    x = torch.arange(-48.0, 48.0).reshape(2, 3, 16) / 4  # -12 to 11.75, and 0
    # endregion

    # region j0_no_translation
    with expect_error("No ONNX function found for <OpOverload(op='prims.spherical_bessel_j0'"):
        torch.onnx.export(model, (x,), dynamo=True, verbose=False)
    # endregion

    # region j0_dynamo_translations
    for translation, path in [
        (j0_translation, "j0_dynamo_plain.onnx"),
        (SphericalBesselJ0, "j0_dynamo_script.onnx"),
    ]:
        table = {torch.ops.aten.special_spherical_bessel_j0.default: translation}
        program = torch.onnx.export(
            model, (x,), dynamo=True, verbose=False, custom_translation_table=table
        )
        assert_onnx_program(program, rtol=1e-6, atol=0)  # ONNX Runtime vs PyTorch
        program.save(path)
        ops = [node.op_type for node in onnx.load(path).graph.node]
        print(f"  {path}: matches PyTorch; inlined: {' '.join(ops)}")
    # endregion

    expected = ["Sin", "Div", "IsInf", "Where", "Equal", "Where"]
    if harness.TORCH < (2, 7):  # 2.6: export(optimize=False) by default, torch/onnx/__init__.py
        # each Python float in the translation stays a Constant and a CastLike
        expected = ["Constant", "CastLike", *expected[:5], "Constant", "CastLike", "Where"]
    for path in KEPT[1]:
        written = harness.show(path)
        ops = [node.op_type for node in written.graph.node]
        assert ops == expected, f"{path}: {ops}"
        assert not written.functions
        assert harness.opsets_of(written)[""] == (18 if harness.TORCH < (2, 9) else 20)
    if harness.TORCH < (2, 7):
        harness.differs(
            "dynamo=True writes opset 18 and does not optimize: constants stay Constant/CastLike"
        )
    elif harness.TORCH < (2, 9):
        harness.differs("dynamo=True writes opset 18, not 20, and matches translations by name")


# ---------------------------------------------------------------------------------------------
# 2. dynamo=True: an @onnxscript.script translation needs its return type
# ---------------------------------------------------------------------------------------------

# region SphericalBesselJ0Unannotated
# Fails: the same function without its annotations.
@onnxscript.script(custom_onnx_script)
def SphericalBesselJ0Unannotated(x):
    zero = opset18.CastLike(0.0, x)
    quotient = opset18.Sin(x) / x
    finite = opset18.Where(opset18.IsInf(x), zero, quotient)
    return opset18.Where(opset18.Equal(x, zero), opset18.CastLike(1.0, x), finite)
# endregion


@harness.needs_torch("2.6", harness.TABLE)
def step2_script_needs_return_type():
    """dynamo=True: an @onnxscript.script translation needs its return type"""
    model = J0().eval()  # step 1's model and input
    x = torch.arange(-48.0, 48.0).reshape(2, 3, 16) / 4

    logged = "Expected meta_vals to be a sequence, but got FakeTensor(..., size=(2, 3, 16))."
    with harness.quiet(logged):  # the exporter logs it before it fails
        # region unannotated_translation_fails
        unannotated = SphericalBesselJ0Unannotated
        table = {torch.ops.aten.special_spherical_bessel_j0.default: unannotated}
        with expect_error("The number of values and replacements must match"):
            torch.onnx.export(
                model, (x,), dynamo=True, verbose=False, custom_translation_table=table
            )
        # endregion
    print(f"  logged before the error: {logged}")


# ---------------------------------------------------------------------------------------------
# 3. dynamo=False: the same function, kept as a function in the model
# ---------------------------------------------------------------------------------------------

# region j0_symbolic
def j0_symbolic(g, x):
    # One call node in the graph; the exporter adds the function's FunctionProto to the model.
    return g.onnxscript_op(SphericalBesselJ0, x).setType(x.type())
# endregion


def need_onnxscript_op() -> None:
    """Steps 3 to 6 write their functions with g.onnxscript_op, which came with torch 2.0; torch
    2.0's reads the function's `opname`, which onnxscript 0.7 calls `name` (torch 2.1 reads that)."""
    if harness.TORCH < (2, 0):
        raise harness.NeedsTorch("2.0", "the symbolic's g.onnxscript_op came with torch 2.0")
    if harness.TORCH < (2, 1):
        raise harness.NeedsTorch(
            "2.1", "torch 2.0's g.onnxscript_op reads OnnxFunction.opname; onnxscript 0.7 has .name"
        )


def step3_torchscript_function():
    """dynamo=False: the same function, kept as a function in the model"""
    need_onnxscript_op()
    model = J0().eval()  # step 1's model and input
    x = torch.arange(-48.0, 48.0).reshape(2, 3, 16) / 4

    with harness.quiet():  # the exporter's 'Torch IR graph at exception' dump
        # region j0_unsupported_torchscript
        os.makedirs("failures", exist_ok=True)  # for the failure demonstrations
        unsupported = "Exporting the operator 'aten::special_spherical_bessel_j0' to ONNX opset"
        with expect_error(unsupported):
            torch.onnx.export(
                model, (x,), "failures/j0_plain.onnx", dynamo=False, opset_version=18
            )
        # endregion
    assert not os.path.exists("failures/j0_plain.onnx")

    # region j0_function_export
    register_custom_op_symbolic("aten::special_spherical_bessel_j0", j0_symbolic, 18)
    torch.onnx.export(
        model, (x,), "j0_function.onnx", dynamo=False, opset_version=18, input_names=["x"],
        output_names=["y"], custom_opsets={"custom-onnx-script": 1},
    )
    # endregion
    harness.show("j0_function.onnx")

    # region j0_function_run
    (call,) = onnx.load("j0_function.onnx").graph.node
    print(f"  the graph calls {call.domain}.{call.op_type}")
    (actual,) = run_ort("j0_function.onnx", {"x": x.numpy()})
    compare("j0_function.onnx", actual, model(x), rtol=1e-6, atol=0)
    # endregion

    assert (call.domain, call.op_type) == ("custom-onnx-script", "SphericalBesselJ0")


# ---------------------------------------------------------------------------------------------
# 4. dynamo=False: Selu, the source material's example
# ---------------------------------------------------------------------------------------------

# region Selu
# The body once, written against the opset `op` (step 5 builds it against another). The
# constants are torch.nn.SELU's in full (the 1.67326 and 1.0507 of PyTorch's docs are off by up
# to 2e-6 relative).
def selu_function(op):
    @onnxscript.script(custom_onnx_script)
    def Selu(X):
        alpha = op.CastLike(1.6732632423543772, X)
        gamma = op.CastLike(1.0507009873554805, X)
        zero = op.CastLike(0.0, X)
        negative = gamma * (alpha * op.Exp(X) - alpha)
        positive = gamma * X
        return op.Where(X <= zero, negative, positive)

    return Selu


Selu = selu_function(opset15)  # opset 15: the first with CastLike


def selu_symbolic(g, x):
    # One call node in the graph; the exporter adds Selu's FunctionProto to the model.
    return g.onnxscript_op(Selu, x).setType(x.type())
# endregion


def step4_selu_function():
    """dynamo=False: Selu, the source material's example"""
    need_onnxscript_op()
    # region selu_model_input
    model = torch.nn.SELU().eval()
    x = torch.linspace(-6.0, 6.0, steps=96).reshape(2, 3, 16)
    # endregion

    # region selu_function_export
    register_custom_op_symbolic("aten::selu", selu_symbolic, 15)
    torch.onnx.export(
        model, (x,), "selu_function.onnx", dynamo=False, opset_version=15, output_names=["y"],
        custom_opsets={"custom-onnx-script": 1},
    )
    # endregion
    harness.show("selu_function.onnx")

    # region selu_function_run
    selu_model = onnx.load("selu_function.onnx")
    (call,) = selu_model.graph.node
    (function,) = selu_model.functions
    print(f"  the graph calls {call.domain}.{call.op_type}; the model carries its body:")
    print("   ", " ".join(node.op_type for node in function.node))
    (actual,) = run_ort("selu_function.onnx", {"input": x.numpy()})
    compare("selu_function.onnx", actual, model(x), rtol=1e-6, atol=1e-6)
    # endregion

    assert (call.domain, call.op_type) == ("custom-onnx-script", "Selu")
    assert (function.domain, function.name) == ("custom-onnx-script", "Selu")
    assert harness.opsets_of(function) == {"": 15}  # the model's opset

    # region selu_function_inlined
    # For a runtime without model-local functions: the same model, each call replaced by its body
    inlined = onnx.inliner.inline_local_functions(onnx.load("selu_function.onnx"))
    onnx.save(inlined, "selu_function_inlined.onnx")
    print("  inlined:", " ".join(node.op_type for node in inlined.graph.node))
    (actual,) = run_ort("selu_function_inlined.onnx", {"input": x.numpy()})
    compare("selu_function_inlined.onnx", actual, model(x), rtol=1e-6, atol=1e-6)
    # endregion

    assert not inlined.functions and "Selu" not in harness.op_types("selu_function_inlined.onnx")
    harness.show("selu_function_inlined.onnx")


# ---------------------------------------------------------------------------------------------
# 5. dynamo=False: the opsets must agree
# ---------------------------------------------------------------------------------------------


# region SeluOpset14
# PyTorch's docs write it against opset15; the source material used opset14, without CastLike.
SeluOpset14 = selu_function(opset14)


def selu_opset14_symbolic(g, x):
    return g.onnxscript_op(SeluOpset14, x).setType(x.type())
# endregion


def step5_opsets_must_agree():
    """dynamo=False: the opsets must agree"""
    need_onnxscript_op()
    model = torch.nn.SELU().eval()  # step 4's model and input
    x = torch.linspace(-6.0, 6.0, steps=96).reshape(2, 3, 16)

    os.makedirs("failures", exist_ok=True)  # step 3 made it on the page
    # region selu_opset14_fails
    register_custom_op_symbolic("aten::selu", selu_opset14_symbolic, 14)
    torch.onnx.export(
        model, (x,), "failures/selu_function_opset14.onnx", dynamo=False, opset_version=14,
        custom_opsets={"custom-onnx-script": 1},
    )
    onnx.checker.check_model(onnx.load("failures/selu_function_opset14.onnx"), full_check=True)
    with expect_error("No Op registered for CastLike with domain_version of 14"):
        run_ort("failures/selu_function_opset14.onnx", {"input": x.numpy()})
    unregister_custom_op_symbolic("aten::selu", 14)  # back to step 4's registration, from 15 up
    # endregion

    if harness.TORCH < (2, 5):  # the export itself runs the checker, after writing the file
        harness.differs("torch.onnx.export raises CheckerError itself, after writing the model")
        with expect_error("FunctionOp imports version 15 whereas model imports version 17"):
            export_opset15_function_at_opset17(model, x)
    else:
        export_opset15_function_at_opset17(model, x)
    # region selu_opset17_checker_fails
    with expect_error("FunctionOp imports version 15 whereas model imports version 17"):
        model_17 = onnx.load("failures/selu_function_in_opset17_model.onnx")
        onnx.checker.check_model(model_17, full_check=True)
    # endregion

    exporter_log: list[str] = []
    with harness.captured(exporter_log):  # the C++ exporter's warning, checked below
        # region selu_registered_above_export_opset
        # Registered at 15, exported at 14: the symbolic does not apply below its opset.
        torch.onnx.export(
            model, (x,), "failures/selu_registered_above_export_opset.onnx", dynamo=False,
            opset_version=14, custom_opsets={"custom-onnx-script": 1},
        )
        # endregion
    warning = "Custom opset domain: 'custom-onnx-script' provided is not used in the model."
    assert warning in exporter_log[0], exporter_log[0]
    print(f"  the exporter only warned: {warning}")

    # region selu_symbolic_skipped
    skipped = onnx.load("failures/selu_registered_above_export_opset.onnx")
    ops = [(node.domain, node.op_type) for node in skipped.graph.node]
    print(f"  the symbolic was skipped: the graph holds {ops}, {len(skipped.functions)} functions")
    # endregion

    assert ops == [("", "Selu")] and not skipped.functions, ops


def export_opset15_function_at_opset17(model, x):
    # region selu_function_in_opset17_model
    # Step 4's registration (from opset 15 up) applies: an opset-15 function, an opset-17 model.
    torch.onnx.export(
        model, (x,), "failures/selu_function_in_opset17_model.onnx", dynamo=False,
        opset_version=17, custom_opsets={"custom-onnx-script": 1},
    )
    # endregion


# ---------------------------------------------------------------------------------------------
# 6. dynamo=False: a function with attributes
# ---------------------------------------------------------------------------------------------

# region cstThreshold
rknn_cst = onnxscript.values.Opset(domain="rknn_cst", version=1)


# The node keeps its custom name and attributes, for a runtime that has a kernel for it; other
# runtimes run the body. torch's rule, NaN included: x <= threshold gives value, else x. The
# comparison is in float32 (FLOAT.dtype), as PyTorch compares float16 and bfloat16 inputs.
@onnxscript.script(rknn_cst)
def cstThreshold(X, threshold: float, value: float):
    below = opset15.Cast(X, to=FLOAT.dtype) <= threshold
    return opset15.Where(below, opset15.CastLike(value, X), X)


@parse_args("v", "f", "f")
def threshold_symbolic(g, x, threshold, value):
    y = g.onnxscript_op(cstThreshold, x, threshold_f=threshold, value_f=value)
    return y.setType(x.type())
# endregion


def step6_function_with_attributes():
    """dynamo=False: a function with attributes"""
    need_onnxscript_op()
    x = torch.linspace(-6.0, 6.0, steps=96).reshape(2, 3, 16)  # step 4's input

    # region threshold_function_export
    threshold_model = torch.nn.Threshold(0.1, 20).eval()
    register_custom_op_symbolic("aten::threshold", threshold_symbolic, 15)
    torch.onnx.export(
        threshold_model, (x,), "threshold_function.onnx", dynamo=False, opset_version=15,
        output_names=["y"], custom_opsets={"rknn_cst": 1},
    )
    # endregion
    harness.show("threshold_function.onnx")

    # region threshold_function_run
    (call,) = onnx.load("threshold_function.onnx").graph.node
    attributes = {a.name: round(a.f, 6) for a in call.attribute}
    print(f"  the graph calls {call.domain}.{call.op_type} with {attributes}")
    (actual,) = run_ort("threshold_function.onnx", {"input": x.numpy()})  # runs the body
    compare("threshold_function.onnx", actual, threshold_model(x), rtol=0, atol=0)  # exact
    # endregion

    assert (call.domain, call.op_type) == ("rknn_cst", "cstThreshold")
    assert attributes == {"threshold": 0.1, "value": 20.0}


# ---------------------------------------------------------------------------------------------
# 7. A float16 or bfloat16 model: the function computed in float32, between Casts
# ---------------------------------------------------------------------------------------------

# region j0_half
# ONNX's Sin takes no bfloat16 before opset 22, and ONNX Runtime's CPU provider has no bfloat16
# Div, Equal, Where, Exp or Mul: the functions compute in float32, the model's dtype outside.
def j0_cast_translation(x):
    y = j0_translation(opset18.Cast(x, to=FLOAT.dtype))
    return opset18.CastLike(y, x)  # back to the model's dtype


def selu_cast_symbolic(g, x):  # the same for dynamo=False: Cast, the call on float32, CastLike
    x32 = g.op("Cast", x, to_i=onnx.TensorProto.FLOAT)
    y = g.onnxscript_op(Selu, x32).setType(x.type().with_dtype(torch.float32))
    return g.op("CastLike", y, x)


# One unit in the last place of each dtype, relative to the value, and below the normal range
# its smallest step: the most by which two roundings of nearly equal float32 values differ.
UNIT = {torch.float16: (2**-10, 2**-24), torch.bfloat16: (2**-7, 2**-133)}
# endregion


@harness.needs_torch("2.6", harness.TABLE)
def step7_half_precision():
    """A float16 or bfloat16 model: the function computed in float32, between Casts"""
    os.makedirs("failures", exist_ok=True)  # step 3 made it on the page
    # region j0_bfloat16_fails
    model = J0().eval()
    x = (torch.arange(-48.0, 48.0).reshape(2, 3, 16) / 4).to(torch.bfloat16)  # step 1's x
    with expect_error("\"spherical_bessel_j0_cpu\" not implemented for 'BFloat16'"):
        model(x)  # no half kernel in PyTorch: the reference is its float32 result, rounded
    table = {torch.ops.aten.special_spherical_bessel_j0.default: SphericalBesselJ0}  # x: FLOAT
    path = "failures/j0_bf16_dynamo.onnx"
    program = torch.onnx.export(
        model, (x,), dynamo=True, verbose=False, custom_translation_table=table
    )
    program.save(path)
    ops = " ".join(node.op_type for node in onnx.load(path).graph.node)
    print(f"  {path}: exported, {ops} on bfloat16")
    with expect_error("Type 'tensor(bfloat16)' of input parameter (x) of operator (Sin)"):
        ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    with expect_error("has unsupported type: tensor(bfloat16)"):
        onnx.checker.check_model(path, full_check=True)  # right after the export: caught
    # endregion
    assert onnx.load(path).graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16

    # region j0_half_between_casts
    table = {torch.ops.aten.special_spherical_bessel_j0.default: j0_cast_translation}
    paths = {torch.float16: "j0_float16_dynamo.onnx", torch.bfloat16: "j0_bfloat16_dynamo.onnx"}
    for dtype, path in paths.items():
        x = (torch.arange(-48.0, 48.0).reshape(2, 3, 16) / 4).to(dtype)
        name = str(dtype)[6:]  # float16, bfloat16
        program = torch.onnx.export(
            model, (x,), dynamo=True, verbose=False, custom_translation_table=table
        )
        program.save(path)
        onnx.checker.check_model(path, full_check=True)
        (actual,) = run_ort_torch(path, [x])
        expected = model(x.float()).to(dtype)  # PyTorch's float32 result, rounded once
        rtol, atol = UNIT[dtype]
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
        diff = (actual.float() - expected.float()).abs().max().item()
        print(f"  {path}: {name} out, max diff {diff:.1e} (rtol={rtol:.1e}, atol={atol:.1e})")
        assert actual.dtype == dtype
    # endregion
    elem_type = {torch.float16: onnx.TensorProto.FLOAT16, torch.bfloat16: onnx.TensorProto.BFLOAT16}
    for dtype, path in paths.items():
        exported = harness.show(path)
        ops = harness.op_types(path)
        assert ops[0] == "Cast" and ops[-1] in ("Cast", "CastLike") and "Sin" in ops, ops
        assert exported.graph.input[0].type.tensor_type.elem_type == elem_type[dtype]
        assert exported.graph.output[0].type.tensor_type.elem_type == elem_type[dtype]

    # region selu_half_between_casts
    model = torch.nn.SELU().eval()
    register_custom_op_symbolic("aten::selu", selu_cast_symbolic, 15)
    for dtype in (torch.float16, torch.bfloat16):
        x = torch.linspace(-6.0, 6.0, steps=96).reshape(2, 3, 16).to(dtype)  # step 4's x
        name = str(dtype)[6:]
        path = f"selu_function_{name}.onnx"
        torch.onnx.export(
            model, (x,), path, dynamo=False, opset_version=15, output_names=["y"],
            custom_opsets={"custom-onnx-script": 1},
        )
        onnx.checker.check_model(path, full_check=True)
        (actual,) = run_ort_torch(path, [x])
        rtol, _ = UNIT[dtype]  # and step 4's float32 atol, for exp(x) - 1 just below 0
        expected = model(x)  # PyTorch's half SELU: computed in float32, rounded once
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=1e-6, equal_nan=True)
        diff = (actual.float() - expected.float()).abs().max().item()
        print(f"  {path}: {name} out, max diff {diff:.1e} (rtol={rtol:.1e}, atol=1.0e-06)")
    unregister_custom_op_symbolic("aten::selu", 15)
    # endregion

    for name in KEPT[7][2:]:
        harness.show(name)
        assert harness.op_types(name) == ["Cast", "custom-onnx-script.Selu", "CastLike"], name
        assert harness.opsets_of(onnx.load(name)) == {"": 15, "custom-onnx-script": 1}


# ---------------------------------------------------------------------------------------------

KEPT = {  # what each step writes and claims valid; failure demonstrations below
    1: ("j0_dynamo_plain.onnx", "j0_dynamo_script.onnx"),
    3: ("j0_function.onnx",),
    4: ("selu_function.onnx", "selu_function_inlined.onnx"),
    6: ("threshold_function.onnx",),
    7: (
        "j0_float16_dynamo.onnx", "j0_bfloat16_dynamo.onnx",
        "selu_function_float16.onnx", "selu_function_bfloat16.onnx",
    ),
}
FAILURES = (
    "failures/j0_plain.onnx",
    "failures/selu_function_opset14.onnx",
    "failures/selu_function_in_opset17_model.onnx",
    "failures/selu_registered_above_export_opset.onnx",
    "failures/j0_bf16_dynamo.onnx",
)
# For ERRORS.md: part of each reproduced error -> (what raises it, its cause[, fixing step])
CAUSES = {
    "No ONNX function found for <OpOverload(op='prims.spherical_bessel_j0'": (
        "dynamo=True",
        "torchlib has no translation for the op ONNX lacks (the exporter decomposed "
        "`aten::special_spherical_bessel_j0` to this prim): give one in `custom_translation_table`",
        1,
    ),
    "The number of values and replacements must match": (
        "dynamo=True",
        "the `@onnxscript.script` translation has no return annotation, so its call gets no "
        "output and the inliner fails: annotate the return (`-> FLOAT`)",
        2,
    ),
    "Exporting the operator 'aten::special_spherical_bessel_j0' to ONNX opset": (
        "dynamo=False",
        "the TorchScript exporter has no symbolic for the op: register one that calls the "
        "onnxscript function with `g.onnxscript_op`",
        3,
    ),
    "No Op registered for CastLike with domain_version of 14": (
        "ONNX Runtime",
        "the onnxscript function uses `CastLike` (opset 15) but the model imports opset 14: "
        "export at an opset no lower than the function's",
    ),
    "FunctionOp imports version 15 whereas model imports version 17": (
        "onnx.checker",
        "the function imports opset 15 and the model opset 17: a function must import the "
        "model's version of each domain",
    ),
    "\"spherical_bessel_j0_cpu\" not implemented for 'BFloat16'": (
        "PyTorch",
        "PyTorch's CPU kernel for the op has no float16 or bfloat16: compare a half model with "
        "PyTorch's float32 result, rounded once to that dtype",
        7,
    ),
    "Type 'tensor(bfloat16)' of input parameter (x) of operator (Sin)": (
        "ONNX Runtime",
        "the exporter wrote the function's ops on bfloat16 whatever its `FLOAT` annotations say, "
        "and ONNX's `Sin` takes no bfloat16 before opset 22: cast to float32 around the function",
        7,
    ),
    "has unsupported type: tensor(bfloat16)": (
        "onnx.checker",
        "the full checker finds a standard op on a type its schema does not list (here `Sin` on "
        "bfloat16): the check the exporter does not make; cast to float32 around the function",
        7,
    ),
}


def main(argv: list[str] | None = None) -> int:
    return harness.run(__file__, globals(), kept=KEPT, failures=FAILURES, causes=CAUSES, argv=argv)


if __name__ == "__main__":
    sys.exit(main())
