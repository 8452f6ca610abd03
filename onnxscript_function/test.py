"""Operators written as onnxscript functions inside the exported ONNX model.

Run: python test.py [--out DIR] [-v]

When an op has no single ONNX equivalent but can be composed from standard ops, write the
composition once as an onnxscript function. With the TorchScript-based exporter (dynamo=False),
g.onnxscript_op puts a call to it in the graph and the function itself (a FunctionProto) in the
model, so any runtime can run it, and one that knows the op can swap in its own kernel. With the
torch.export-based exporter (dynamo=True), custom_translation_table takes the translation instead.

Every code block of README.md is in this file, word for word; the lines around them are the checks.
"""

import contextlib
import os
import re

import numpy as np
import onnx
import onnxruntime as ort
import onnxscript
import torch
from onnxscript import FLOAT
from onnxscript.onnx_opset import opset14, opset15, opset18
from torch.onnx import register_custom_op_symbolic, unregister_custom_op_symbolic
from torch.onnx.symbolic_helper import parse_args

# isort: split
# Test-only imports: the command line and the checks around the lesson's code.
import argparse
import ctypes
import inspect
import logging
import pathlib
import sys
import tempfile
import textwrap
import traceback
import warnings

TORCH = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])  # e.g. (2, 14)
HERE = pathlib.Path(__file__).resolve().parent
SKIP = 77  # exit status for "cannot run here", as in automake
VERBOSE = False  # -v: print every exported graph in full

# ---------------------------------------------------------------------------------------------
# 1. Selu as an onnxscript function
# ---------------------------------------------------------------------------------------------

custom_onnx_script = onnxscript.values.Opset(domain="custom-onnx-script", version=1)


# Written against opset 15, the first with CastLike. The constants are torch.nn.SELU's, in full:
# the 1.67326 and 1.0507 of PyTorch's docs and of the source material are off by up to 2e-6 relative.
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


def step1_selu_function() -> None:
    step_header(1, "Selu as an onnxscript function (dynamo=False, opset 15)")
    model = torch.nn.SELU().eval()
    x = torch.linspace(-6.0, 6.0, steps=96).reshape(2, 3, 16)

    register_custom_op_symbolic("aten::selu", selu_symbolic, 15)
    torch.onnx.export(
        model, (x,), "selu_function.onnx", dynamo=False, opset_version=15, custom_opsets={"custom-onnx-script": 1}
    )
    show("selu_function.onnx")

    selu_model = onnx.load("selu_function.onnx")
    (call,) = selu_model.graph.node
    (function,) = selu_model.functions
    body = " ".join(node.op_type for node in function.node)
    print(f"  the graph calls {call.domain}.{call.op_type}; the model carries {function.domain}.{function.name}:", body)
    (actual,) = run_ort("selu_function.onnx", {"input": x.numpy()})
    compare("selu_function.onnx", actual, model(x), rtol=1e-6, atol=1e-6)

    assert (call.domain, call.op_type) == ("custom-onnx-script", "Selu")
    assert (function.domain, function.name) == ("custom-onnx-script", "Selu")
    assert {o.domain: o.version for o in function.opset_import} == {"": 15}  # the model's opset


# ---------------------------------------------------------------------------------------------
# 2. The opsets must agree
# ---------------------------------------------------------------------------------------------


# The source material's version: CastLike from opset 14, which has no CastLike (it arrived in opset 15).
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


def step2_opsets_must_agree() -> None:
    step_header(2, "The function's opset, the export's and the registration's must agree")
    model = torch.nn.SELU().eval()  # step 1's model and input
    x = torch.linspace(-6.0, 6.0, steps=96).reshape(2, 3, 16)

    os.makedirs("failures", exist_ok=True)  # the models of this step are failure demonstrations
    register_custom_op_symbolic("aten::selu", selu_opset14_symbolic, 14)
    torch.onnx.export(
        model,
        (x,),
        "failures/selu_function_opset14.onnx",
        dynamo=False,
        opset_version=14,
        custom_opsets={"custom-onnx-script": 1},
    )
    onnx.checker.check_model(onnx.load("failures/selu_function_opset14.onnx"), full_check=True)  # passes
    with expect_error("No Op registered for CastLike with domain_version of 14"):
        run_ort("failures/selu_function_opset14.onnx", {"input": x.numpy()})
    unregister_custom_op_symbolic("aten::selu", 14)  # back to step 1's registration, from opset 15 up

    # This step relies on step 1's registration of selu_symbolic at opset 15 (the README says so).
    # Before torch 2.5, torch.onnx.export runs the ONNX checker itself, after writing the file: there the error
    # comes from the export already (CheckerError), and the checker after it still finds it in the file.
    checked_by_export = TORCH < (2, 5)
    with (
        expect_error("FunctionOp imports version 15 whereas model imports version 17")
        if checked_by_export
        else contextlib.nullcontext()
    ):
        # Step 1's registration (from opset 15 up) applies: an opset-15 function lands in an opset-17 model.
        # On torch 2.4 this export itself raises torch.onnx.errors.CheckerError, after writing the file.
        torch.onnx.export(
            model,
            (x,),
            "failures/selu_function_in_opset17_model.onnx",
            dynamo=False,
            opset_version=17,
            custom_opsets={"custom-onnx-script": 1},
        )
    if checked_by_export:
        differs("torch.onnx.export runs the ONNX checker itself and raises CheckerError, after writing the model")
    with expect_error("FunctionOp imports version 15 whereas model imports version 17"):
        onnx.checker.check_model(onnx.load("failures/selu_function_in_opset17_model.onnx"), full_check=True)

    exporter_log: list[str] = []
    with captured(exporter_log):  # the C++ exporter's warning, checked below
        # Registered at 15, exported at 14: the symbolic does not apply below its opset, without an error.
        torch.onnx.export(
            model,
            (x,),
            "failures/selu_registered_above_export_opset.onnx",
            dynamo=False,
            opset_version=14,
            custom_opsets={"custom-onnx-script": 1},
        )
    warning = "Custom opset domain: 'custom-onnx-script' provided is not used in the model."
    assert warning in exporter_log[0], exporter_log[0]
    print(f"  the exporter only warned: {warning}")

    skipped = onnx.load("failures/selu_registered_above_export_opset.onnx")
    ops = [(node.domain, node.op_type) for node in skipped.graph.node]
    print(f"  the symbolic was skipped: the graph holds {ops} and {len(skipped.functions)} functions")

    assert ops == [("", "Selu")] and not skipped.functions, ops


# ---------------------------------------------------------------------------------------------
# 3. A function with attributes
# ---------------------------------------------------------------------------------------------

rknn_cst = onnxscript.values.Opset(domain="rknn_cst", version=1)


# The node keeps its custom name (rknn_cst::cstThreshold) and its attributes, for a runtime that
# has a kernel for it; any other runtime runs this body instead. It is torch's rule, NaN included:
# x <= threshold gives value, anything else (NaN too) passes through.
@onnxscript.script(rknn_cst)
def cstThreshold(X, threshold: float, value: float):
    below = X <= opset15.CastLike(threshold, X)
    return opset15.Where(below, opset15.CastLike(value, X), X)


@parse_args("v", "f", "f")
def threshold_symbolic(g, x, threshold, value):
    return g.onnxscript_op(cstThreshold, x, threshold_f=threshold, value_f=value).setType(x.type())


def step3_function_with_attributes() -> None:
    step_header(3, "Threshold as a function with attributes, in domain rknn_cst (dynamo=False)")
    x = torch.linspace(-6.0, 6.0, steps=96).reshape(2, 3, 16)  # step 1's input

    threshold_model = torch.nn.Threshold(0.1, 20).eval()
    register_custom_op_symbolic("aten::threshold", threshold_symbolic, 15)
    torch.onnx.export(
        threshold_model, (x,), "threshold_function.onnx", dynamo=False, opset_version=15, custom_opsets={"rknn_cst": 1}
    )
    show("threshold_function.onnx")

    (call,) = onnx.load("threshold_function.onnx").graph.node
    print(f"  the graph calls {call.domain}.{call.op_type} with", {a.name: round(a.f, 6) for a in call.attribute})
    (actual,) = run_ort("threshold_function.onnx", {"input": x.numpy()})  # plain ORT, no kernel: it runs the body
    compare("threshold_function.onnx", actual, threshold_model(x), rtol=0, atol=0)  # a selection, no arithmetic

    assert (call.domain, call.op_type) == ("rknn_cst", "cstThreshold")
    assert {a.name: round(a.f, 6) for a in call.attribute} == {"threshold": 0.1, "value": 20.0}


# ---------------------------------------------------------------------------------------------
# 4. The torch.export-based exporter (dynamo=True)
# ---------------------------------------------------------------------------------------------


# Works: a plain Python function calling onnxscript ops. The exporter traces it op by op.
# The parameter is named as in the op's ATen schema, aten::selu(Tensor self): torch 2.8 matches a
# translation to the op by parameter name and silently uses its own Selu when the names differ.
def selu_translation(self):
    alpha = opset18.CastLike(1.6732632423543772, self)
    gamma = opset18.CastLike(1.0507009873554805, self)
    negative = gamma * (alpha * opset18.Exp(self) - alpha)
    return opset18.Where(self <= opset18.CastLike(0.0, self), negative, gamma * self)


# Works: the same function with its types annotated, so the call gets its one output.
@onnxscript.script(custom_onnx_script)
def SeluScriptAnnotated(self: FLOAT) -> FLOAT:
    alpha = opset18.CastLike(1.6732632423543772, self)
    gamma = opset18.CastLike(1.0507009873554805, self)
    negative = gamma * (alpha * opset18.Exp(self) - alpha)
    return opset18.Where(self <= opset18.CastLike(0.0, self), negative, gamma * self)


# Fails: the same function without a return annotation.
@onnxscript.script(custom_onnx_script)
def SeluScript(self):
    alpha = opset18.CastLike(1.6732632423543772, self)
    gamma = opset18.CastLike(1.0507009873554805, self)
    negative = gamma * (alpha * opset18.Exp(self) - alpha)
    return opset18.Where(self <= opset18.CastLike(0.0, self), negative, gamma * self)


def step4_dynamo() -> None:
    step_header(4, "The torch.export-based exporter (dynamo=True)")
    if TORCH < (2, 6):
        raise NeedsTorch("2.6", "torch.onnx.export has no custom_translation_table before 2.6")
    model = torch.nn.SELU().eval()  # step 1's model and input; step 1's registration is ignored here
    x = torch.linspace(-6.0, 6.0, steps=96).reshape(2, 3, 16)
    schema = [argument.name for argument in torch.ops.aten.selu.default._schema.arguments]
    for translation in (selu_translation, SeluScriptAnnotated.function, SeluScript.function):
        assert list(inspect.signature(translation).parameters) == schema, (translation.__name__, schema)

    # custom_translation_table came with torch 2.6; on 2.4, dynamo=True is the old torch.onnx.dynamo_export.
    onnx_program = torch.onnx.export(
        model,
        (x,),
        dynamo=True,
        verbose=False,
        custom_translation_table={torch.ops.aten.selu.default: selu_translation},
    )
    onnx_program.save("selu_dynamo_plain.onnx")
    onnx_program = torch.onnx.export(
        model,
        (x,),
        dynamo=True,
        verbose=False,
        custom_translation_table={torch.ops.aten.selu.default: SeluScriptAnnotated},
    )
    onnx_program.save("selu_dynamo_script_annotated.onnx")
    for path in ("selu_dynamo_plain.onnx", "selu_dynamo_script_annotated.onnx"):
        written = show(path)
        ops = [node.op_type for node in written.graph.node]
        # No Selu: the translation was used (torch 2.8 writes torchlib's Selu when the parameter names differ).
        assert "Selu" not in ops and {"Exp", "Where"} <= set(ops), f"{path}: {ops}"
        opset = {o.domain: o.version for o in written.opset_import}[""]
        assert opset == (18 if TORCH < (2, 9) else 20), f"{path}: opset {opset}"
    if TORCH < (2, 9):
        differs("dynamo=True writes opset 18, not 20; it uses a translation only if its parameter names are the op's")

    for path in ["selu_dynamo_plain.onnx", "selu_dynamo_script_annotated.onnx"]:
        inlined = onnx.load(path)
        print(f"  {path}: inlined {[node.op_type for node in inlined.graph.node]}, functions {list(inlined.functions)}")
        (actual,) = run_ort(path, {"input": x.numpy()})
        compare(path, actual, model(x), rtol=1e-6, atol=1e-6)

    exporter_log: list[str] = []
    with captured(exporter_log):  # the exporter logs a warning before it fails: checked and shown below
        with expect_error("The number of values and replacements must match"):
            torch.onnx.export(
                model,
                (x,),
                dynamo=True,
                verbose=False,
                custom_translation_table={torch.ops.aten.selu.default: SeluScript},
            )
    logged = "Expected meta_vals to be a sequence, but got FakeTensor(..., size=(2, 3, 16))."
    assert logged in exporter_log[0], exporter_log[0]
    print(f"  logged first: {logged} There may be an internal error.")
    print("".join(line + "\n" for line in exporter_log[0].splitlines() if line.startswith("  reproduced")), end="")


# ---------------------------------------------------------------------------------------------

# Every model this example writes, relative to --out: the ones it keeps (each checked and run against
# PyTorch), by the step that writes them, and the failure demonstrations. main() removes them before a run,
# requires the kept models of every step that ran, and refuses to claim PASS while --out holds any other
# .onnx file.
KEPT = {
    1: ("selu_function.onnx",),
    3: ("threshold_function.onnx",),
    4: ("selu_dynamo_plain.onnx", "selu_dynamo_script_annotated.onnx"),
}
FAILURES = (
    "failures/selu_function_opset14.onnx",
    "failures/selu_function_in_opset17_model.onnx",
    "failures/selu_registered_above_export_opset.onnx",
)
STEPS = (step1_selu_function, step2_opsets_must_agree, step3_function_with_attributes, step4_dynamo)



# What ERRORS.md says of each error this example reproduces: part of expect_error's expected text ->
# (what raises it, its cause in one line[, the step that fixes it when that is a later step than the one
# that reproduces it]). recording() fails the run on an error not explained here.
CAUSES = {
    "No Op registered for CastLike with domain_version of 14": (
        "ONNX Runtime",
        "the onnxscript function uses `CastLike` (opset 15) but the model imports opset 14: export at an "
        "opset no lower than the function's",
    ),
    "FunctionOp imports version 15 whereas model imports version 17": (
        "onnx.checker",
        "the function imports opset 15 and the model opset 17: a function must import the model's version of "
        "each domain",
    ),
    "The number of values and replacements must match": (
        "dynamo=True",
        "the onnxscript translation has no return annotation, so the exporter cannot tell its output's type "
        "and the inliner fails: annotate the return",
    ),
}


def main(argv: list[str] | None = None) -> int:
    # expect_error also notes what each step reproduced, in steps.json, for ERRORS.md (see recording())
    globals()["expect_error"] = recording(expect_error)
    args = parse_command_line(argv)
    out = args.out.resolve()
    owned = tuple(m for models in KEPT.values() for m in models) + FAILURES
    problem = prepare_out(out, owned)
    if problem:
        print(f"FAIL: cannot write models under {out}: {problem}")
        return 1
    # Each dynamo=False export warns that the TorchScript-based exporter is deprecated; the README says so.
    warnings.filterwarnings("ignore", message="You are using the legacy TorchScript-based ONNX export")
    # torch 2.8 logs "Missing annotation for parameter 'self' ... Treating as an Input." for an unannotated
    # translation (torch 2.14 logs it at debug level); the README says so.
    logging.getLogger("torch.onnx._internal.exporter._schemas").setLevel(logging.ERROR)
    skipped: list[str] = []
    home = os.getcwd()
    os.chdir(out)  # the lesson's code writes "x.onnx" and "failures/x.onnx", as the README does
    try:
        torch.manual_seed(0)
        for number, step in enumerate(STEPS, start=1):
            STEP_STATUS[number] = {"status": "runs", "why": ""}
            CURRENT_STEP[0] = number
            try:
                step()
            except NeedsTorch as reason:  # a newer torch's feature: this step only; the example still passes
                print(f"SKIP step {number}: {reason}")
                STEP_STATUS[number].update(status=f"needs torch >= {reason.version}", why=reason.why)
            except Skip as reason:  # this machine cannot run it (no compiler, ...): exit 77 at the end
                print(f"SKIP step {number}: {reason}")
                STEP_STATUS[number].update(status="skipped", why=str(reason))
                skipped.append(f"step {number}: {reason}")
            except BaseException:
                STEP_STATUS[number].update(status="fails")
                raise
    except AssertionError as exc:
        print(f"\nFAIL: {exc}")
        return 1
    except OSError as exc:
        print(f"\nFAIL: cannot write models under {out}: {exc}")
        return 1
    except Exception as exc:  # noqa: BLE001 - an unexpected error: one line, the traceback with -v
        print(f"\nFAIL: unexpected {type(exc).__name__}: {first_line(exc)}")
        if VERBOSE:
            traceback.print_exc(file=sys.stdout)
        return 1
    finally:
        os.chdir(home)
        summary_problem = write_step_summary(out)
    if summary_problem:
        print(f"\nFAIL: cannot write models under {out}: {summary_problem}")
        return 1
    foreign = foreign_models(out, owned)
    if foreign:
        print(f"\nFAIL: {out} holds models this example did not write: {', '.join(foreign)} (remove them)")
        return 1
    if skipped:
        print(f"\nSKIP: {'; '.join(skipped)}")
        return SKIP
    ran = [n for n, s in STEP_STATUS.items() if s["status"] in ("runs", "differs")]
    missing = [m for n in ran for m in KEPT.get(n, ()) if not (out / m).is_file()]
    if missing:
        print(f"\nFAIL: these models were not written: {', '.join(missing)}")
        return 1
    print(f"\nPASS: every model in {out} checked and matched PyTorch in ONNX Runtime")
    return 0


# =============================================================================================
# Helpers: safe to skip on a first read. The command line, the output folder, and the checks that
# run around the lesson's code: the ONNX checker, ONNX Runtime against PyTorch, captured output.
# =============================================================================================


STEP_STATUS: dict[int, dict[str, str]] = {}
CURRENT_STEP = [0]


class NeedsTorch(Exception):
    """Raised by a step that needs a newer torch: `SKIP step N: needs torch >= X (why)`; the example goes on."""

    def __init__(self, version: str, why: str) -> None:
        super().__init__(f"needs torch >= {version} ({why})")
        self.version, self.why = version, why


def differs(why: str) -> None:
    """Mark the running step as behaving differently (and validly) on the installed torch; print why."""
    print(f"  on torch {torch.__version__}: {why}")
    STEP_STATUS[CURRENT_STEP[0]].update(status="differs", why=why)


def step_header(number: int, title: str) -> None:  # optional: print("\n== N. Title ==") and record the title
    STEP_STATUS.setdefault(number, {"status": "runs", "why": ""})["title"] = title
    print(f"\n== {number}. {title} ==")


def write_step_summary(out: pathlib.Path) -> str | None:
    """DIR/steps.json: what each step did on this torch, for the version table in the top README. Returns why it
    could not be written (an OSError: DIR full, steps.json a directory, ...), or None."""
    import json

    summary = {"torch": torch.__version__.split("+")[0], "steps": {str(n): s for n, s in STEP_STATUS.items()}}
    try:
        (out / "steps.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    except OSError as exc:
        return f"steps.json: {exc}"
    return None


@contextlib.contextmanager
def expect_error(expected):
    """The code inside must fail with `expected` in its message: print the error's first line and go on."""
    try:
        yield
    except Exception as error:  # noqa: BLE001 - showing what the reader would see is the point
        message = f"{type(error).__name__}: {error}"
        cause = error.__cause__
        while cause is not None:  # a wrapped error: its cause often names the real problem
            message += f"\n{type(cause).__name__}: {cause}"
            cause = cause.__cause__
        message = re.sub(r"\x1b\[[0-9;]*m", "", message)  # some errors colour their text
        if expected not in message:
            raise
        lines = [line.strip() for line in message.splitlines() if line.strip()]
        print("  reproduced:", lines[0])
        if expected not in lines[0]:  # the line that names the cause is further down
            print("  reproduced, further down:", next(line for line in lines if expected in line))
    else:
        raise AssertionError(f"expected an error containing {expected!r}, but the code ran")


class Skip(Exception):
    """Raised by a step that cannot run on this machine (no C++ compiler, ...): the reason is printed."""


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def parse_command_line(argv: list[str] | None) -> argparse.Namespace:
    global VERBOSE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=non_empty_path,
        default=HERE / "output",
        metavar="DIR",
        help="write the models under DIR, failure demonstrations under DIR/failures (default: output/ here)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="print every exported graph in full")
    args = parser.parse_args(argv)
    VERBOSE = args.verbose
    return args


def non_empty_path(text: str) -> pathlib.Path:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty (it would write into the current directory)")
    return pathlib.Path(text)


def prepare_out(out: pathlib.Path, owned: tuple[str, ...]) -> str:
    """Make DIR and DIR/failures and remove this example's models of an earlier run: '' or why it cannot."""
    if out.exists() and not out.is_dir():
        return "it exists and is not a directory"
    try:
        (out / "failures").mkdir(parents=True, exist_ok=True)
        for name in owned:
            (out / name).unlink(missing_ok=True)
        for folder in (out, out / "failures"):
            with tempfile.TemporaryFile(dir=folder):
                pass  # can we write there?
    except OSError as exc:
        return f"{type(exc).__name__}: {exc.strerror or exc}"
    return ""


def foreign_models(out: pathlib.Path, owned: tuple[str, ...]) -> list[str]:
    """The .onnx files in DIR and DIR/failures that this example did not write (it never deletes them)."""
    found = [*out.glob("*.onnx"), *(out / "failures").glob("*.onnx")]
    return sorted(p.relative_to(out).as_posix() for p in found if p.relative_to(out).as_posix() not in owned)


def show(path: str | os.PathLike) -> onnx.ModelProto:
    """The full ONNX checker, then one line: ops in order, opset imports, outputs (the whole graph with -v)."""
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    ops = [f"{n.domain}.{n.op_type}" if n.domain else n.op_type for n in model.graph.node]
    opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import)
    outputs = ", ".join(f"{o.name}: {type_text(o.type)}" for o in model.graph.output)
    print(f"  {pathlib.PurePath(path).as_posix()}: {' '.join(ops)} | opsets {opsets} | {outputs}")
    if VERBOSE:
        print(textwrap.indent(onnx.printer.to_text(model.graph), "    "))
        for function in model.functions:  # FOLDER: this folder's lesson is in the functions too
            print(textwrap.indent(onnx.printer.to_text(function), "    "))
    return model


def type_text(value_type: onnx.TypeProto) -> str:
    tensor = value_type.tensor_type
    dims = [str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in tensor.shape.dim]
    return f"{onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)}[{','.join(dims)}]"


def run_ort(path, feeds: dict[str, np.ndarray], options: ort.SessionOptions | None = None) -> list[np.ndarray]:
    session = ort.InferenceSession(str(path), options or ort.SessionOptions(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def compare(name: str, actual: np.ndarray, expected, rtol: float, atol: float) -> None:
    """assert_allclose, then one line that names the model (and output) and the largest difference."""
    expected = expected.detach().numpy() if isinstance(expected, torch.Tensor) else np.asarray(expected)
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=name)
    diff = float(np.max(np.abs(actual.astype(np.float64) - expected))) if expected.size else 0.0
    print(f"  {name}: ONNX Runtime matches PyTorch (max abs diff {diff:.1e}; rtol={rtol}, atol={atol})")


def flush_stdio():
    """Flush Python's buffers and C's: C++ code (the TorchScript exporter, RKNN) prints through C's stdout, which
    is block-buffered when stdout is a file or a pipe, so text left in it would cross a redirect of the descriptors
    (unless PYTHONUNBUFFERED is set). fflush(NULL) flushes every C stream."""
    sys.stdout.flush()
    sys.stderr.flush()
    ctypes.CDLL(None).fflush(None)


@contextlib.contextmanager
def captured(sink: list[str]):
    """Capture file descriptors 1 and 2 and Python warnings into sink[0]: C++ code (the exporter, ORT, the
    compiler) writes to the descriptors directly. Check what the lesson depends on; drop the rest."""
    flush_stdio()
    saved = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile() as tmp, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        os.dup2(tmp.fileno(), 1)
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            flush_stdio()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            tmp.seek(0)
            text = tmp.read().decode(errors="replace")
            sink.append(text + "".join(f"{w.category.__name__}: {w.message}\n" for w in caught))


def recording(expect_error):
    """expect_error that also notes, in the current step's entry of steps.json, what it reproduced: the lines
    it printed and the cause CAUSES gives for its expected text. `python run_stacks.py --write-table` writes
    ERRORS.md from those notes. An error CAUSES does not explain fails the run."""
    if getattr(expect_error, "records", False):
        return expect_error

    @contextlib.contextmanager
    def recorded(expected):
        printed: list[str] = []
        saved = sys.stdout
        sys.stdout = Tee(saved, printed)
        try:
            with expect_error(expected):
                yield
        finally:
            sys.stdout = saved
        record_reproduced(expected, "".join(printed))

    recorded.records = True
    return recorded


class Tee:
    """A stdout that also keeps what is written to it; everything else (encoding, flush, ...) is the stream's."""

    def __init__(self, stream, kept: list[str]):
        self.stream, self.kept = stream, kept

    def write(self, text: str) -> int:
        self.kept.append(text)
        return self.stream.write(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)


def record_reproduced(expected: str, printed: str) -> None:
    step = CURRENT_STEP[0]
    lines = printed.splitlines()
    first = [line.split("reproduced: ", 1)[1] for line in lines if line.startswith("  reproduced: ")]
    further = [line.split("further down: ", 1)[1] for line in lines if line.startswith("  reproduced, further down: ")]
    keys = [key for key in CAUSES if key in expected]
    assert first, f"step {step}: expect_error({expected!r}) printed no 'reproduced:' line"
    assert len(keys) == 1, f"step {step}: CAUSES must explain {expected!r} once, not {len(keys)} times"
    raised_by, cause, *fixed_in = CAUSES[keys[0]]  # a third element: the step that fixes it, when a later one
    entry = {"error": first[-1], "further_down": further[-1] if further else "", "raised_by": raised_by, "cause": cause}
    entry["fixed_in"] = fixed_in[0] if fixed_in else step
    STEP_STATUS[step].setdefault("reproduced", []).append(entry)


if __name__ == "__main__":
    sys.exit(main())
