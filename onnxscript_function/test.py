"""Operators written as onnxscript functions inside the exported ONNX model.

Run: python test.py [--out DIR]

When an op has no single ONNX equivalent but can be composed from standard ops, write the
composition once as an onnxscript function. With the TorchScript-based exporter (dynamo=False),
g.onnxscript_op puts a call to it in the graph and the function itself (a FunctionProto) in the
model, so any runtime can run it, and one that knows the op can swap in its own kernel. With the
torch.export-based exporter (dynamo=True), custom_translation_table takes the translation instead.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import onnxscript
import torch
from onnxscript import FLOAT
from onnxscript.onnx_opset import opset14, opset15, opset18

HERE = pathlib.Path(__file__).resolve().parent
SKIP = 77  # exit status for "cannot run here"

try:  # the TorchScript-based exporter's API; a future torch may drop it
    from torch.onnx import register_custom_op_symbolic, unregister_custom_op_symbolic
    from torch.onnx.symbolic_helper import parse_args
except ImportError as exc:  # pragma: no cover - depends on the installed torch
    TORCHSCRIPT_EXPORTER_MISSING = f"{type(exc).__name__}: {exc}"

    def parse_args(*_descriptors):  # lets this file import, so main() can report the SKIP
        return lambda fn: fn
else:
    TORCHSCRIPT_EXPORTER_MISSING = ""


# ---------------------------------------------------------------------------------------------
# Helpers: the same few checks run on every model the example keeps.
# ---------------------------------------------------------------------------------------------


def reproduce(what: str, call, expect: str) -> BaseException:
    """Run `call`, which must fail with `expect` in its message; print the exception type and first line."""
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - showing whatever the reader would see is the point
        message = str(exc).strip()
        cause = exc.__cause__
        while cause is not None:  # a wrapped error: its cause names the real problem
            message += f"\n{type(cause).__name__}: {cause}"
            cause = cause.__cause__
        first_line = message.splitlines()[0].split("  [Caused by")[0] if message else ""
        print(f"  reproduced ({what}): {type(exc).__name__}: {first_line}")
        assert expect in message, f"{what}: expected {expect!r} in the error, got {type(exc).__name__}: {message}"
        if expect not in first_line:  # the cause is further down: show the line that names it
            print("    ... " + next(line.strip() for line in message.splitlines() if expect in line))
        return exc
    raise AssertionError(f"expected a failure ({what}), but it succeeded")


def check_and_show(path: pathlib.Path) -> onnx.ModelProto:
    """The full ONNX checker (with shape inference), then the model, functions included, as text."""
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    print(onnx.printer.to_text(model))
    return model


def run_ort(path: pathlib.Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def compare(actual: np.ndarray, expected: torch.Tensor, rtol: float, atol: float) -> None:
    np.testing.assert_allclose(actual, expected.detach().numpy(), rtol=rtol, atol=atol)
    print(f"  ONNX Runtime matches PyTorch (rtol={rtol}, atol={atol})")


def input_feeds(path: pathlib.Path, tensors) -> dict[str, np.ndarray]:
    names = [i.name for i in onnx.load(str(path)).graph.input]
    return {name: t.numpy() for name, t in zip(names, tensors, strict=True)}


def both_signs() -> torch.Tensor:
    """Negative and positive inputs, so both branches of each function are checked."""
    x = torch.linspace(-6.0, 6.0, steps=96).reshape(2, 3, 16)
    assert (x < 0).any() and (x > 0).any()
    return x


# ---------------------------------------------------------------------------------------------
# 1. Selu as an onnxscript function
# ---------------------------------------------------------------------------------------------

custom_onnx_script = onnxscript.values.Opset(domain="custom-onnx-script", version=1)


# Written against opset 15, the first with CastLike. The constants are torch.nn.SELU's, in full:
# the source's 1.67326 and 1.0507 are off by about 2e-6 relative.
@onnxscript.script(custom_onnx_script)
def Selu(X):
    alpha = opset15.CastLike(1.6732632423543772, X)
    gamma = opset15.CastLike(1.0507009873554805, X)
    zero = opset15.CastLike(0.0, X)
    negative = gamma * (alpha * opset15.Exp(X) - alpha)
    positive = gamma * X
    return opset15.Where(X <= zero, negative, positive)


def selu_symbolic(g, x):
    # One call node in the graph; the exporter adds Selu's FunctionProto to the model.
    return g.onnxscript_op(Selu, x).setType(x.type())


def step1_selu_function(out: pathlib.Path) -> None:
    print("\n== 1. Selu as an onnxscript function (dynamo=False, opset 15) ==")
    model, x = torch.nn.SELU().eval(), both_signs()
    register_custom_op_symbolic("aten::selu", selu_symbolic, 15)
    path = out / "selu_function.onnx"
    torch.onnx.export(model, (x,), path, dynamo=False, opset_version=15, custom_opsets={"custom-onnx-script": 1})
    exported = check_and_show(path)
    assert [(n.domain, n.op_type) for n in exported.graph.node] == [("custom-onnx-script", "Selu")]
    assert [(f.domain, f.name) for f in exported.functions] == [("custom-onnx-script", "Selu")]
    (actual,) = run_ort(path, input_feeds(path, (x,)))
    compare(actual, model(x), rtol=1e-6, atol=1e-6)  # exp in two libraries: last-bit differences


# ---------------------------------------------------------------------------------------------
# 2. The source's bug, and the rule
# ---------------------------------------------------------------------------------------------


# The source's version: CastLike from opset 14, which has no CastLike (it arrived in opset 15).
@onnxscript.script(custom_onnx_script)
def SeluOpset14(X):
    alpha = opset14.CastLike(1.67326, X)
    gamma = opset14.CastLike(1.0507, X)
    zero = opset14.CastLike(0, X)
    negative = gamma * (alpha * opset14.Exp(X) - alpha)
    positive = gamma * X
    return opset14.Where(X <= zero, negative, positive)


def selu_opset14_symbolic(g, x):
    return g.onnxscript_op(SeluOpset14, x).setType(x.type())


def step2_opsets_must_agree(out: pathlib.Path) -> None:
    print("\n== 2. The function's opset, the export's and the registration's must agree ==")
    model, x = torch.nn.SELU().eval(), both_signs()

    # (a) The source: written against opset 14, exported at 14. The checker passes it; ORT refuses it.
    print("\n-- (a) the source's function, written against opset 14")
    register_custom_op_symbolic("aten::selu", selu_opset14_symbolic, 14)
    path = out / "failures/selu_function_opset14.onnx"
    torch.onnx.export(model, (x,), path, dynamo=False, opset_version=14, custom_opsets={"custom-onnx-script": 1})
    check_and_show(path)
    reproduce(
        "ORT on the opset-14 function",
        lambda: run_ort(path, input_feeds(path, (x,))),
        "No Op registered for CastLike with domain_version of 14",
    )

    unregister_custom_op_symbolic("aten::selu", 14)  # back to step 1's registration, from opset 15 up

    # (b) An opset-15 function in an opset-17 model: a function must use the model's opset.
    print("\n-- (b) the opset-15 function in an opset-17 export")
    path = out / "failures/selu_function_in_opset17_model.onnx"
    torch.onnx.export(model, (x,), path, dynamo=False, opset_version=17, custom_opsets={"custom-onnx-script": 1})
    reproduce(
        "onnx.checker on an opset-15 function in an opset-17 model",
        lambda: onnx.checker.check_model(onnx.load(str(path)), full_check=True),
        "FunctionOp imports version 15 whereas model imports version 17",
    )

    # (c) Registered at 15, exported at 14: the symbolic does not apply below its opset, so the
    # built-in rule runs and no function is written, without an error.
    print("\n-- (c) registered at opset 15, exported at 14")
    path = out / "failures/selu_registered_above_export_opset.onnx"
    torch.onnx.export(model, (x,), path, dynamo=False, opset_version=14, custom_opsets={"custom-onnx-script": 1})
    exported = onnx.load(str(path))
    ops = [(n.domain, n.op_type) for n in exported.graph.node]
    assert ops == [("", "Selu")] and not exported.functions, ops
    print(f"  the symbolic was skipped: the graph holds {ops} and no function")


# ---------------------------------------------------------------------------------------------
# 3. A function with attributes
# ---------------------------------------------------------------------------------------------

rknn_cst = onnxscript.values.Opset(domain="rknn_cst", version=1)


# The node keeps its custom name (rknn_cst::cstThreshold) and its attributes, for a runtime that
# has a kernel for it; any other runtime runs this body instead.
@onnxscript.script(rknn_cst)
def cstThreshold(X, threshold: float, value: float):
    above = X > opset15.CastLike(threshold, X)
    return opset15.Where(above, X, opset15.CastLike(value, X))


@parse_args("v", "f", "f")
def threshold_symbolic(g, x, threshold, value):
    return g.onnxscript_op(cstThreshold, x, threshold_f=threshold, value_f=value).setType(x.type())


def step3_function_with_attributes(out: pathlib.Path) -> None:
    print("\n== 3. Threshold as a function with attributes, in domain rknn_cst (dynamo=False) ==")
    model, x = torch.nn.Threshold(0.1, 20).eval(), both_signs()
    register_custom_op_symbolic("aten::threshold", threshold_symbolic, 15)
    path = out / "threshold_function.onnx"
    torch.onnx.export(model, (x,), path, dynamo=False, opset_version=15, custom_opsets={"rknn_cst": 1})
    exported = check_and_show(path)
    (node,) = exported.graph.node
    assert (node.domain, node.op_type) == ("rknn_cst", "cstThreshold")
    assert {a.name: round(a.f, 6) for a in node.attribute} == {"threshold": 0.1, "value": 20.0}
    (actual,) = run_ort(path, input_feeds(path, (x,)))  # plain ORT: no kernel registered, runs the body
    compare(actual, model(x), rtol=0, atol=0)  # a selection, no arithmetic: exact


# ---------------------------------------------------------------------------------------------
# 4. The torch.export-based exporter (dynamo=True)
# ---------------------------------------------------------------------------------------------


# Works: a plain Python function calling onnxscript ops. The exporter traces it op by op.
def selu_translation(X):
    alpha = opset18.CastLike(1.6732632423543772, X)
    gamma = opset18.CastLike(1.0507009873554805, X)
    negative = gamma * (alpha * opset18.Exp(X) - alpha)
    return opset18.Where(X <= opset18.CastLike(0.0, X), negative, gamma * X)


# Fails: an @onnxscript.script function without a return annotation. torch builds the call's
# signature from the annotations (torch/onnx/_internal/exporter/_schemas.py,
# op_signature_from_function): no `-> ...` means zero outputs.
@onnxscript.script(custom_onnx_script)
def SeluScript(X):
    alpha = opset18.CastLike(1.6732632423543772, X)
    gamma = opset18.CastLike(1.0507009873554805, X)
    negative = gamma * (alpha * opset18.Exp(X) - alpha)
    return opset18.Where(X <= opset18.CastLike(0.0, X), negative, gamma * X)


# Works: the same function with its types annotated, so the call gets its one output.
@onnxscript.script(custom_onnx_script)
def SeluScriptAnnotated(X: FLOAT) -> FLOAT:
    alpha = opset18.CastLike(1.6732632423543772, X)
    gamma = opset18.CastLike(1.0507009873554805, X)
    negative = gamma * (alpha * opset18.Exp(X) - alpha)
    return opset18.Where(X <= opset18.CastLike(0.0, X), negative, gamma * X)


def step4_dynamo(out: pathlib.Path) -> None:
    print("\n== 4. The torch.export-based exporter (dynamo=True) ==")
    model, x = torch.nn.SELU().eval(), both_signs()
    for name, translation in [("plain", selu_translation), ("script_annotated", SeluScriptAnnotated)]:
        print(f"\n-- custom_translation_table={{aten.selu.default: {translation.__name__}}}")
        path = out / f"selu_dynamo_{name}.onnx"
        onnx_program = torch.onnx.export(
            model,
            (x,),
            dynamo=True,
            verbose=False,
            custom_translation_table={torch.ops.aten.selu.default: translation},
        )
        onnx_program.save(path)
        exported = check_and_show(path)
        ops = [n.op_type for n in exported.graph.node]
        # Why no function here: the exporter inlines functions into the graph.
        assert "Selu" not in ops and {"Exp", "Where"} <= set(ops) and not exported.functions, ops
        print(f"  inlined: {ops}, no function in the model")
        (actual,) = run_ort(path, input_feeds(path, (x,)))
        compare(actual, model(x), rtol=1e-6, atol=1e-6)

    print("\n-- custom_translation_table={aten.selu.default: SeluScript}, no return annotation")
    # The call node gets no output; the exporter logs "Expected meta_vals to be a sequence, but got
    # FakeTensor", and the inliner then cannot replace the call with the function's one output.
    reproduce(
        "an unannotated @onnxscript.script translation",
        lambda: torch.onnx.export(
            model, (x,), dynamo=True, verbose=False, custom_translation_table={torch.ops.aten.selu.default: SeluScript}
        ),
        "The number of values and replacements must match",
    )


# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=HERE / "output", help="where models are written")
    args = parser.parse_args(argv)
    if TORCHSCRIPT_EXPORTER_MISSING:
        print(f"SKIP: this torch has no TorchScript-based ONNX exporter ({TORCHSCRIPT_EXPORTER_MISSING})")
        return SKIP
    out = args.out.resolve()
    (out / "failures").mkdir(parents=True, exist_ok=True)
    # ORT logs each failed session to stderr before raising; the exceptions are printed anyway.
    ort.set_default_logger_severity(4)
    # Each dynamo=False export and registration warns that the TorchScript exporter is deprecated.
    # That is known and stated in the README; keep the output readable.
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.onnx")
    warnings.filterwarnings("ignore", message=".*legacy TorchScript-based ONNX export.*")
    warnings.filterwarnings("ignore", message="The feature will be removed.*")
    try:
        step1_selu_function(out)
        step2_opsets_must_agree(out)
        step3_function_with_attributes(out)
        step4_dynamo(out)
    except AssertionError as exc:
        print(f"\nFAIL: {exc}")
        return 1
    print(f"\nPASS: every model in {out} checked and matched PyTorch in ONNX Runtime")
    return 0


if __name__ == "__main__":
    sys.exit(main())
