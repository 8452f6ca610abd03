"""One symbolic for every torch.autograd.Function: `prim::PythonOp`, dispatched on the Function's name.

Run: python test.py [--out DIR]

In the TorchScript-based exporter (dynamo=False) a Function that is not inlined and has no `symbolic`
method becomes a `prim::PythonOp` node. One function registered for `prim::PythonOp` can translate
all of them, choosing by the Function's name (and by its arguments). The torch.export-based exporter
(dynamo=True) has no PythonOp: there, each op becomes a torch.library custom op, and one
custom_translation_table holds all the translations.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnxscript import opset18 as op

HERE = pathlib.Path(__file__).resolve().parent
SKIP = 77  # exit status for "cannot run here"


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
    """The full ONNX checker (with shape inference), then the graph as text."""
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    print(onnx.printer.to_text(model.graph))
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


def op_types(path: pathlib.Path) -> list[str]:
    return [n.op_type for n in onnx.load(str(path)).graph.node]


def export_and_compare(model, inputs, path: pathlib.Path, **export_kwargs) -> None:
    """Export, check, print, run in ORT and compare exactly (clamps and maxima: no arithmetic)."""
    model = model.eval()
    if export_kwargs.get("dynamo"):
        torch.onnx.export(model, inputs, verbose=False, **export_kwargs).save(path)
    else:
        torch.onnx.export(model, inputs, path, **export_kwargs)
    check_and_show(path)
    (actual,) = run_ort(path, input_feeds(path, inputs))
    compare(actual, model(*inputs), rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------
# The Functions: no `symbolic` method on any of them.
# ---------------------------------------------------------------------------------------------


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


class MyTanh(torch.autograd.Function):  # one the symbolic below does not know
    @staticmethod
    def forward(ctx, input):
        return torch.tanh(input)


class ClipThenRelu(torch.nn.Module):
    def forward(self, x):
        return MyRelu.apply(MyClip.apply(x, -0.5))


class TwoClips(torch.nn.Module):
    def forward(self, x):
        return MyClip.apply(x, 0.0) + MyClip.apply(x, 0.5)


class WithTanh(torch.nn.Module):
    def forward(self, x):
        return MyTanh.apply(MyRelu.apply(x))


# ---------------------------------------------------------------------------------------------
# 1. Without any symbolic
# ---------------------------------------------------------------------------------------------


def step1_without_symbolic(out: pathlib.Path) -> None:
    print("\n== 1. Functions without a symbolic (dynamo=False) ==")
    x = torch.randn(2, 3)
    # Why it works by default: the exporter inlines a Function's forward (autograd_inlining=True),
    # so it exports the clamps inside, not the Functions.
    print("\n-- default: forward inlined")
    export_and_compare(ClipThenRelu(), (x,), out / "inlined.onnx", dynamo=False, opset_version=17)
    assert "Clip" in op_types(out / "inlined.onnx")

    # Why turn inlining off: to keep each Function as one unit and choose its ONNX yourself. Then
    # each is a prim::PythonOp, which no built-in rule translates.
    print("\n-- autograd_inlining=False: a prim::PythonOp per Function")
    reproduce(
        "prim::PythonOp without a symbolic",
        lambda: torch.onnx.export(
            ClipThenRelu(), (x,), out / "failures/pythonop.onnx", dynamo=False, autograd_inlining=False
        ),
        "ONNX export failed: Couldn't export Python operator MyClip",
    )


# ---------------------------------------------------------------------------------------------
# 2. One symbolic for prim::PythonOp
# ---------------------------------------------------------------------------------------------


# The source's form. Today the exporter calls symbolic(g, *args, **kwargs): this `n` receives the
# first tensor, and every argument after it shifts by one.
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


def step2_one_symbolic(out: pathlib.Path) -> None:
    print("\n== 2. One symbolic for prim::PythonOp (dynamo=False) ==")
    from torch.onnx import register_custom_op_symbolic

    x = torch.randn(2, 3)
    export = {"dynamo": False, "opset_version": 17, "autograd_inlining": False}

    # The source registers "::prim_PythonOp". That name is accepted, filed as aten::prim_PythonOp,
    # and never looked up: the export fails as if nothing was registered.
    print("\n-- the source's registration name")
    register_custom_op_symbolic("::prim_PythonOp", symbolic_pythonop, 1)
    reproduce(
        'registered as "::prim_PythonOp"',
        lambda: torch.onnx.export(ClipThenRelu(), (x,), out / "failures/pythonop.onnx", **export),
        "Couldn't export Python operator MyClip",
    )

    # The source's signature, under the right name.
    print("\n-- the source's signature, symbolic_pythonop(g, n, *args, **kwargs)")
    register_custom_op_symbolic("prim::PythonOp", symbolic_pythonop_source, 1)
    reproduce(
        "(g, n, *args) today",
        lambda: torch.onnx.export(ClipThenRelu(), (x,), out / "failures/pythonop.onnx", **export),
        "tuple index out of range",
    )

    # Registered at opset 1, it serves every opset.
    print("\n-- symbolic_pythonop(g, *args, **kwargs)")
    register_custom_op_symbolic("prim::PythonOp", symbolic_pythonop, 1)
    path = out / "pythonop.onnx"
    export_and_compare(ClipThenRelu(), (x,), path, **export)
    assert op_types(path) == ["Constant", "Clip", "Relu"], op_types(path)

    print("\n-- a Function the symbolic does not know")
    reproduce(
        "MyTanh",
        lambda: torch.onnx.export(WithTanh(), (x,), out / "failures/unknown_function.onnx", **export),
        f"no ONNX translation for autograd.Function {MyTanh.__module__}.MyTanh",
    )


# ---------------------------------------------------------------------------------------------
# 3. Dispatch on more than the name
# ---------------------------------------------------------------------------------------------


def step3_dispatch_on_arguments(out: pathlib.Path) -> None:
    print("\n== 3. The same Function, two translations: MyClip(x, 0.0) -> Relu, MyClip(x, 0.5) -> Clip ==")
    x = torch.randn(2, 3)
    path = out / "pythonop_by_argument.onnx"
    export_and_compare(TwoClips(), (x,), path, dynamo=False, opset_version=17, autograd_inlining=False)
    assert op_types(path) == ["Relu", "Constant", "Clip", "Add"], op_types(path)


# ---------------------------------------------------------------------------------------------
# 4. The torch.export-based exporter (dynamo=True)
# ---------------------------------------------------------------------------------------------


def my_clip_translation(x, min: float):
    if min == 0:  # the same choice as step 3, made in Python while translating
        return op.Relu(x)
    return op.Clip(x, op.CastLike(min, x))


def my_relu_translation(x):
    return op.Relu(x)


def define_custom_ops():
    """Each Function becomes a custom op with a schema, a kernel and a fake kernel."""

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
    return my_clip, my_relu, translations


class CustomOpModel(torch.nn.Module):
    def __init__(self, my_clip, my_relu) -> None:
        super().__init__()
        self.my_clip, self.my_relu = my_clip, my_relu

    def forward(self, x, y):
        return self.my_relu(x) + self.my_clip(y, 0.0) + self.my_clip(y, 0.5)


def step4_dynamo(out: pathlib.Path) -> None:
    print("\n== 4. The torch.export-based exporter (dynamo=True) ==")
    x = torch.randn(2, 3)

    # Why: torch.export runs each Function's forward and records what it calls; no PythonOp, and the
    # prim::PythonOp symbolic (still registered) is never consulted.
    print("\n-- the Functions, traced through")
    for name, model in [("clip_then_relu", ClipThenRelu()), ("two_clips", TwoClips())]:
        path = out / f"{name}_dynamo.onnx"
        export_and_compare(model, (x,), path, dynamo=True)
        print(f"  ops: {op_types(path)}")

    print("\n-- custom ops + one custom_translation_table")
    my_clip, my_relu, translations = define_custom_ops()
    model = CustomOpModel(my_clip, my_relu).eval()
    y = torch.randn(2, 3)
    reproduce(
        "custom ops without translations",
        lambda: torch.onnx.export(model, (x, y), dynamo=True, verbose=False),
        "No ONNX function found for <OpOverload(op='pythonop_demo.my_relu', overload='default')>",
    )
    path = out / "custom_ops_dynamo.onnx"
    onnx_program = torch.onnx.export(model, (x, y), dynamo=True, verbose=False, custom_translation_table=translations)
    onnx_program.save(path)
    check_and_show(path)
    (actual,) = run_ort(path, input_feeds(path, (x, y)))
    compare(actual, model(x, y), rtol=0, atol=0)
    ops = op_types(path)
    assert sorted(ops) == ["Add", "Add", "Clip", "Relu", "Relu"], ops  # my_clip(y, 0.0) became a Relu
    print(f"  ops: {ops}")


# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=HERE / "output", help="where models are written")
    args = parser.parse_args(argv)
    if not hasattr(torch.onnx, "register_custom_op_symbolic"):
        print("SKIP: this torch has no TorchScript-based ONNX exporter, where prim::PythonOp lives")
        return SKIP
    out = args.out.resolve()
    (out / "failures").mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    # Each dynamo=False export and registration warns that the TorchScript exporter is deprecated.
    # That is known and stated in the README; keep the output readable.
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.onnx")
    warnings.filterwarnings("ignore", message=".*legacy TorchScript-based ONNX export.*")
    warnings.filterwarnings("ignore", message="The feature will be removed.*")
    try:
        step1_without_symbolic(out)
        step2_one_symbolic(out)
        step3_dispatch_on_arguments(out)
        step4_dynamo(out)
    except AssertionError as exc:
        print(f"\nFAIL: {exc}")
        return 1
    print(f"\nPASS: every model in {out} checked and matched PyTorch in ONNX Runtime")
    return 0


if __name__ == "__main__":
    sys.exit(main())
