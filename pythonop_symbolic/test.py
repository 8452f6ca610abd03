"""One symbolic for every torch.autograd.Function: `prim::PythonOp`, dispatched on the Function's name.

Run: python test.py [--out DIR] [-v]

In the TorchScript-based exporter (dynamo=False) a Function that is not inlined and has no `symbolic`
method becomes a `prim::PythonOp` node. One function registered for `prim::PythonOp` can translate
all of them, choosing by the Function's name (and by its arguments). The torch.export-based exporter
(dynamo=True) has no PythonOp: there, each op becomes a torch.library custom op, and one
custom_translation_table holds all the translations.
"""

import contextlib
import os
import re
import warnings

import numpy as np
import onnxruntime as ort
import torch
from onnxscript import opset18 as op

# isort: split
# test-only imports: the command line, the captured output, the ONNX checker
import argparse
import ctypes
import logging
import pathlib
import sys
import tempfile
import textwrap
import traceback

import onnx

TORCH = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])  # e.g. (2, 14)

HERE = pathlib.Path(__file__).resolve().parent
SKIP = 77  # exit status for "cannot run here", as in automake
VERBOSE = False  # -v: print every exported graph in full


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


# =============================================================================================
# 1. Without any symbolic
# =============================================================================================


class MyClip(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, min):
        ctx.save_for_backward(input)
        return input.clamp(min=min)


class MyRelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        return input.clamp(min=0)


class ClipThenRelu(torch.nn.Module):
    def forward(self, x):
        return MyRelu.apply(MyClip.apply(x, -0.5))


def step1_without_symbolic() -> None:
    step_header(1, "Functions without a symbolic (dynamo=False)")
    need_torchscript_exporter()
    # The first dynamo=False export also records torch's deprecation warning: it names the release
    # in which dynamo=True became the default (the README quotes it).
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        os.makedirs("failures", exist_ok=True)  # the failure demonstrations go there
        model = ClipThenRelu().eval()
        x = torch.randn(2, 3)
        # By default (autograd_inlining=True) the exporter inlines each Function's forward.
        torch.onnx.export(model, (x,), "inlined.onnx", dynamo=False, opset_version=17, input_names=["x"])
        compare("inlined.onnx", run_ort("inlined.onnx", {"x": x.numpy()})[0], model(x), rtol=0, atol=0)
        show("inlined.onnx")
    legacy = [str(w.message) for w in caught if "legacy TorchScript-based ONNX export" in str(w.message)]
    if TORCH >= (2, 8):  # the warning came with torch 2.8 (pytorch/pytorch#152478)
        assert legacy, "torch no longer warns that dynamo=False is the legacy exporter"
        print("  torch warns:", legacy[0].split(" Learn more")[0])
    else:
        assert not legacy, legacy
    if TORCH < (2, 8):
        differs("no deprecation warning: dynamo=False is the default exporter, and the warning came with torch 2.8")
    elif TORCH < (2, 9):
        assert "will be the default" in legacy[0], legacy[0]
        differs("dynamo=False is still the default exporter: the warning says dynamo=True will be the default in 2.9")
    ops = op_types("inlined.onnx")
    assert ops.count("Clip") == 2 and "Relu" not in ops, ops  # the clamps inside forward, not the Functions

    noise: list[str] = []
    with captured(noise):
        # Keep each Function as one prim::PythonOp node: with no rule for it, the export fails.
        with expect_error("Couldn't export Python operator MyClip"):
            torch.onnx.export(
                model,
                (x,),
                "failures/pythonop_no_symbolic.onnx",
                dynamo=False,
                opset_version=17,
                autograd_inlining=False,
                input_names=["x"],
            )
    replay(noise)


# =============================================================================================
# 2. One symbolic for prim::PythonOp
# =============================================================================================


# The source material's symbolic (torch 1.10): the exporter passed the node as a second argument `n`.
def symbolic_pythonop_source(g, n, *args, **kwargs):
    name = kwargs["name"]
    if name == "MyClip":
        return g.op("Clip", args[0], min_f=args[1])
    if name == "MyRelu":
        return g.op("Relu", args[0])
    return None


def symbolic_pythonop(g, *args, **kwargs):
    node = g.original_node  # the prim::PythonOp being translated
    name, module = kwargs["name"], kwargs["module"]  # the Function's class name and its module
    print(f"  prim::PythonOp {module}.{name}")
    for i, output in enumerate(node.outputs()):
        print(f"    output {i}: requires grad: {output.requiresGrad()}")
    # args are the Function's inputs in order: tensors as graph values, Python scalars as they are.
    for i, arg in enumerate(args):
        requires_grad = arg.requiresGrad() if isinstance(arg, torch._C.Value) else False
        print(
            f"    arg {i}: {arg.debugName() if isinstance(arg, torch._C.Value) else repr(arg)}, "
            f"requires grad: {requires_grad}"
        )

    if name == "MyClip":
        x, min_value = args
        if min_value == 0:  # dispatch on an argument too: clamp(min=0) is a Relu
            result = g.op("Relu", x)
        else:
            result = g.op("Clip", x, g.op("Constant", value_t=torch.tensor(min_value, dtype=x.type().dtype())))
    elif name == "MyRelu":
        result = g.op("Relu", args[0])
    else:
        raise torch.onnx.errors.SymbolicValueError(
            f"symbolic_pythonop: no ONNX translation for autograd.Function {module}.{name}", args[0]
        )
    result.setType(node.output().type())  # the PythonOp's output type and shape, as PyTorch traced it
    return result


class MyTanh(torch.autograd.Function):  # one that symbolic_pythonop does not know
    @staticmethod
    def forward(ctx, input):
        return torch.tanh(input)


class WithTanh(torch.nn.Module):
    def forward(self, x):
        return MyTanh.apply(MyRelu.apply(x))


def step2_one_symbolic() -> None:
    step_header(2, "One symbolic for prim::PythonOp (dynamo=False)")
    need_torchscript_exporter()
    model = ClipThenRelu().eval()
    x = torch.randn(2, 3)

    print("-- the source's symbolic, registered under the source's name")
    noise: list[str] = []
    with captured(noise):
        # The source's registration: accepted (filed as aten::prim_PythonOp) and never looked up.
        torch.onnx.register_custom_op_symbolic("::prim_PythonOp", symbolic_pythonop_source, 1)
        with expect_error("Couldn't export Python operator MyClip"):
            torch.onnx.export(
                model,
                (x,),
                "failures/pythonop_old_name.onnx",
                dynamo=False,
                opset_version=17,
                autograd_inlining=False,
                input_names=["x"],
            )
    replay(noise)

    print("-- the source's symbolic, registered as prim::PythonOp")
    noise = []
    with captured(noise):
        # Today the exporter calls symbolic(g, *args, **kwargs): `n` receives the first tensor,
        # and every argument after it shifts by one.
        torch.onnx.register_custom_op_symbolic("prim::PythonOp", symbolic_pythonop_source, 1)
        with expect_error("tuple index out of range"):
            torch.onnx.export(
                model,
                (x,),
                "failures/pythonop_old_signature.onnx",
                dynamo=False,
                opset_version=17,
                autograd_inlining=False,
                input_names=["x"],
            )
    replay(noise)
    print("  torch.onnx.SymbolicContext exists:", hasattr(torch.onnx, "SymbolicContext"))
    assert hasattr(torch.onnx, "SymbolicContext") == (TORCH < (2, 5))  # removed in 2.5 (pytorch/pytorch#132184)
    if TORCH < (2, 5):
        differs(
            "torch.onnx.SymbolicContext still exists (removed in 2.5): the table's second form still works here, "
            "with a FutureWarning"
        )

    print("-- symbolic_pythonop(g, *args, **kwargs)")
    # Registered at opset 1, it serves every opset; it replaces the registration above.
    torch.onnx.register_custom_op_symbolic("prim::PythonOp", symbolic_pythonop, 1)
    torch.onnx.export(
        model, (x,), "pythonop.onnx", dynamo=False, opset_version=17, autograd_inlining=False, input_names=["x"]
    )
    compare("pythonop.onnx", run_ort("pythonop.onnx", {"x": x.numpy()})[0], model(x), rtol=0, atol=0)
    show("pythonop.onnx")
    assert op_types("pythonop.onnx") == ["Constant", "Clip", "Relu"], op_types("pythonop.onnx")

    print("-- a Function the symbolic does not know")
    noise = []
    with captured(noise):
        with expect_error("no ONNX translation for autograd.Function __main__.MyTanh"):
            torch.onnx.export(
                WithTanh(),
                (x,),
                "failures/unknown_function.onnx",
                dynamo=False,
                opset_version=17,
                autograd_inlining=False,
                input_names=["x"],
            )
    replay(noise)


# =============================================================================================
# 3. Dispatch on more than the name
# =============================================================================================


class TwoClips(torch.nn.Module):
    def forward(self, x):
        return MyClip.apply(x, 0.0) + MyClip.apply(x, 0.5)


def step3_dispatch_on_arguments() -> None:
    step_header(3, "The same Function, two translations: MyClip(x, 0.0) -> Relu, MyClip(x, 0.5) -> Clip")
    need_torchscript_exporter()
    # Relies on step 2: symbolic_pythonop is still registered for prim::PythonOp (registrations are
    # global to the process).
    model = TwoClips().eval()
    x = torch.randn(2, 3)
    torch.onnx.export(
        model,
        (x,),
        "pythonop_by_argument.onnx",
        dynamo=False,
        opset_version=17,
        autograd_inlining=False,
        input_names=["x"],
    )
    compare(
        "pythonop_by_argument.onnx", run_ort("pythonop_by_argument.onnx", {"x": x.numpy()})[0], model(x), rtol=0, atol=0
    )
    show("pythonop_by_argument.onnx")
    ops = op_types("pythonop_by_argument.onnx")
    assert ops == ["Relu", "Constant", "Clip", "Add"], ops


# =============================================================================================
# 4. The torch.export-based exporter (dynamo=True)
# =============================================================================================


def my_clip_translation(x, min: float):
    if min == 0:  # the same choice as step 3, made in Python while translating
        return op.Relu(x)
    return op.Clip(x, op.CastLike(min, x))


def my_relu_translation(x):
    return op.Relu(x)


class CustomOpModel(torch.nn.Module):
    def forward(self, x, y):
        ops = torch.ops.pythonop_demo  # the custom ops of step 4, looked up when forward runs
        return ops.my_relu(x) + ops.my_clip(y, 0.0) + ops.my_clip(y, 0.5)


def step4_dynamo() -> None:
    step_header(4, "The torch.export-based exporter (dynamo=True)")
    if TORCH < (2, 5):
        raise NeedsTorch("2.5", "before 2.5, dynamo=True is the old torch.onnx.dynamo_export, not torch.export")
    # torch.export runs each Function's forward and records what it calls. The prim::PythonOp
    # symbolic of step 2 is still registered: this exporter never looks at it.
    # Needs torch >= 2.5: before, dynamo=True is the old torch.onnx.dynamo_export.
    # external_data=False: one file per model (by default an empty NAME.onnx.data comes with it).
    model = ClipThenRelu().eval()
    x = torch.randn(2, 3)
    torch.onnx.export(model, (x,), "clip_then_relu_dynamo.onnx", dynamo=True, verbose=False, external_data=False)
    compare(
        "clip_then_relu_dynamo.onnx",
        run_ort("clip_then_relu_dynamo.onnx", {"x": x.numpy()})[0],
        model(x),
        rtol=0,
        atol=0,
    )
    show("clip_then_relu_dynamo.onnx")

    model = TwoClips().eval()
    torch.onnx.export(model, (x,), "two_clips_dynamo.onnx", dynamo=True, verbose=False, external_data=False)
    compare("two_clips_dynamo.onnx", run_ort("two_clips_dynamo.onnx", {"x": x.numpy()})[0], model(x), rtol=0, atol=0)
    show("two_clips_dynamo.onnx")
    assert "PythonOp" not in op_types("clip_then_relu_dynamo.onnx") + op_types("two_clips_dynamo.onnx")
    no_silent_fallback(ClipThenRelu().eval(), (x,))
    no_silent_fallback(model, (x,))

    # Each Function as a custom op: a schema (from the type hints), a kernel, and a fake kernel.
    @torch.library.custom_op("pythonop_demo::my_clip", mutates_args=())
    def my_clip(x: torch.Tensor, min: float) -> torch.Tensor:
        return x.clamp(min=min)

    @torch.library.custom_op("pythonop_demo::my_relu", mutates_args=())
    def my_relu(x: torch.Tensor) -> torch.Tensor:
        return x.clamp(min=0)

    # torch.export traces on fake tensors: say what comes out, without computing it.
    my_clip.register_fake(lambda x, min: torch.empty_like(x))
    my_relu.register_fake(lambda x: torch.empty_like(x))

    # One table for all the custom ops: the dynamo=True counterpart of one prim::PythonOp symbolic.
    translations = {
        torch.ops.pythonop_demo.my_clip.default: my_clip_translation,
        torch.ops.pythonop_demo.my_relu.default: my_relu_translation,
    }

    if TORCH < (2, 6):
        raise NeedsTorch("2.6", "torch.onnx.export has no custom_translation_table before 2.6")
    # custom_translation_table needs torch >= 2.6.
    model = CustomOpModel().eval()
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    with expect_error("No ONNX function found for <OpOverload(op='pythonop_demo.my_relu', overload='default')>"):
        torch.onnx.export(model, (x, y), "failures/custom_ops_no_table.onnx", dynamo=True, verbose=False)
    torch.onnx.export(
        model,
        (x, y),
        "custom_ops_dynamo.onnx",
        dynamo=True,
        verbose=False,
        external_data=False,
        custom_translation_table=translations,
    )
    actual = run_ort("custom_ops_dynamo.onnx", {"x": x.numpy(), "y": y.numpy()})[0]
    compare("custom_ops_dynamo.onnx", actual, model(x, y), rtol=0, atol=0)
    show("custom_ops_dynamo.onnx")
    ops = op_types("custom_ops_dynamo.onnx")
    assert sorted(ops) == ["Add", "Add", "Clip", "Relu", "Relu"], ops  # my_clip(y, 0.0) became a Relu
    no_silent_fallback(model, (x, y))
    # dynamo=True's default opset: 18 before torch 2.9, 20 since (pytorch/pytorch#158802).
    opset = 18 if TORCH < (2, 9) else 20
    for name in ("clip_then_relu_dynamo.onnx", "two_clips_dynamo.onnx", "custom_ops_dynamo.onnx"):
        assert onnx_opset(name) == opset, (name, onnx_opset(name))
    if TORCH < (2, 9):
        differs(
            "the models are at opset 18, dynamo=True's default before 2.9 (20 since); each was captured by "
            "torch.export.export(..., strict=False), so no silent fallback to draft export (checked)"
        )


# Every model this example writes, relative to --out: the ones each step keeps (each checked and run
# against PyTorch; a step skipped on this torch keeps none) and the failure demonstrations. main() removes
# them before a run and refuses to claim PASS while --out holds any other .onnx file.
KEPT = {
    1: ("inlined.onnx",),
    2: ("pythonop.onnx",),
    3: ("pythonop_by_argument.onnx",),
    4: ("clip_then_relu_dynamo.onnx", "two_clips_dynamo.onnx", "custom_ops_dynamo.onnx"),
}
FAILURES = (
    "failures/pythonop_no_symbolic.onnx",
    "failures/pythonop_old_name.onnx",
    "failures/pythonop_old_signature.onnx",
    "failures/unknown_function.onnx",
    "failures/custom_ops_no_table.onnx",
)
STEPS = (step1_without_symbolic, step2_one_symbolic, step3_dispatch_on_arguments, step4_dynamo)



# What ERRORS.md says of each error this example reproduces: part of expect_error's expected text ->
# (what raises it, its cause in one line[, the step that fixes it when that is a later step than the one
# that reproduces it]). recording() fails the run on an error not explained here.
CAUSES = {
    "Couldn't export Python operator MyClip": (
        "dynamo=False",
        "a `torch.autograd.Function` kept as one `prim::PythonOp` node (`autograd_inlining=False`) with no "
        "`symbolic` method and no `prim::PythonOp` rule (one registered as "
        "`::prim_PythonOp` is filed as `aten::prim_PythonOp`, never looked up); or give the Function a `symbolic` "
        "([`autograd_function/` step 1](autograd_function/README.md#1-myrelu---clip))",
        2,  # fixed in step 2
    ),
    "tuple index out of range": (
        "dynamo=False",
        "a torch 1.x `symbolic_pythonop(g, n, *args, **kwargs)`: the exporter now calls it without `n`, so "
        "every argument shifts by one",
    ),
    "no ONNX translation for autograd.Function": (
        "dynamo=False",
        "the `prim::PythonOp` symbolic's own error for a Function its table does not name: add the Function "
        "to the table",
    ),
    "No ONNX function found for <OpOverload(op='pythonop_demo.my_relu'": (
        "dynamo=True",
        "the custom op has no ONNX translation: `dynamo=True` ignores symbolics; give it a "
        "`custom_translation_table` entry",
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
    # Every dynamo=False export warns that the TorchScript-based exporter is deprecated (step 1 prints
    # the warning once). The steps use dynamo=False on purpose: quiet that one warning.
    warnings.filterwarnings("ignore", message="You are using the legacy TorchScript-based ONNX export")
    # test.py only: the exporter's logging setup also warns about itself (hidden outside __main__ anyway).
    warnings.filterwarnings("ignore", message="The feature will be removed", category=DeprecationWarning)
    # torch 2.8 logs a warning for each translation parameter without a type annotation (`x` in step 4's
    # translations: an input, as meant); torch 2.14.1 logs it at debug level.
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


class Skip(Exception):
    """Raised by a step that cannot run on this machine (no C++ compiler, ...): the reason is printed."""


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


def need_torchscript_exporter() -> None:
    """Steps 1-3 need the TorchScript-based exporter (dynamo=False), where prim::PythonOp lives."""
    if not hasattr(torch.onnx, "register_custom_op_symbolic"):
        raise Skip("this torch has no TorchScript-based ONNX exporter (dynamo=False), where prim::PythonOp lives")


def no_silent_fallback(model: torch.nn.Module, args: tuple) -> None:
    """On torch 2.8, when torch.export.export(..., strict=False) fails, dynamo=True silently falls back to
    draft export, whose model can be wrong at other inputs: make sure this model needs no fallback."""
    torch.export.export(model, args, strict=False)


def onnx_opset(path: str) -> int:
    return next(o.version for o in onnx.load(path).opset_import if o.domain in ("", "ai.onnx"))


def op_types(path: str) -> list[str]:
    return [node.op_type for node in onnx.load(path).graph.node]


def replay(sink: list[str]) -> None:
    """Print the lines expect_error printed inside captured(). The rest is the exporter's dump of the
    TorchScript graph at the failure and the symbolic's own lines: printed only with -v. The warnings
    captured() recorded are the deprecation warnings main() filters: dropped."""
    for line in sink[0].splitlines():
        if line.startswith("  reproduced") or (VERBOSE and not re.match(r"\w+Warning: ", line)):
            print(line)


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
