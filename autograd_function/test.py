"""torch.autograd.Function with a `symbolic` method: choose the ONNX your Python op becomes.

Run: python test.py [--out DIR]

A Function's static `symbolic(g, ...)` replaces its forward in the TorchScript-based exporter
(dynamo=False): MyRelu -> Clip, MyAdd -> Mul + Add, a C++ extension wrapped in a Function, and a
bicubic upsampler -> one Resize whose scale factor is a model input. The torch.export-based exporter
(dynamo=True) ignores `symbolic`; there, torch.onnx.ops.symbolic inside forward chooses the node.
The C++ step needs a compiler; without one it is skipped and the example exits 77 after the rest.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import sys
import sysconfig
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn.functional as F
import torch.utils.cpp_extension

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
    """The full ONNX checker (with shape inference), then the graph as text, weights left out."""
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    graph = onnx.GraphProto()
    graph.CopyFrom(model.graph)
    del graph.initializer[:]  # the printer would print every weight
    print(onnx.printer.to_text(graph))
    if model.graph.initializer:
        print(f"   ({len(model.graph.initializer)} initializers not shown)")
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


def export_and_compare(model, inputs, path: pathlib.Path, rtol: float, atol: float, **export_kwargs) -> None:
    """Export, check, print, run in ORT and compare: the routine every kept model goes through."""
    model = model.eval()
    if export_kwargs.get("dynamo"):
        torch.onnx.export(model, inputs, verbose=False, **export_kwargs).save(path)
    else:
        torch.onnx.export(model, inputs, path, **export_kwargs)
    check_and_show(path)
    (actual,) = run_ort(path, input_feeds(path, inputs))
    compare(actual, model(*inputs), rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------------------------
# 1. MyRelu -> Clip
# ---------------------------------------------------------------------------------------------


class MyRelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_output):  # needed for training only (step 5), never for export
        (x,) = ctx.saved_tensors
        return grad_output * (x > 0).to(grad_output.dtype)

    @staticmethod
    def symbolic(g, x):
        # Clip's min must have x's dtype; x.type().dtype() reads it from the traced graph.
        zero = g.op("Constant", value_t=torch.tensor(0, dtype=x.type().dtype()))
        return g.op("Clip", x, zero)


class MyReluModel(torch.nn.Module):
    def forward(self, x):
        return MyRelu.apply(x)


def step1_my_relu(out: pathlib.Path) -> None:
    print("\n== 1. MyRelu -> Clip (dynamo=False) ==")
    x = torch.randn(2, 3, 4)
    # Why a symbolic: without it the exporter would inline forward's clamp; with it, you decide.
    export_and_compare(MyReluModel(), (x,), out / "my_relu.onnx", rtol=0, atol=0, dynamo=False, opset_version=17)
    assert op_types(out / "my_relu.onnx") == ["Constant", "Clip"]


# ---------------------------------------------------------------------------------------------
# 2. MyAdd (2a + b) and the dtype of constants
# ---------------------------------------------------------------------------------------------


class MyAdd(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        return 2 * a + b

    @staticmethod
    def symbolic(g, a, b):
        two = g.op("Constant", value_t=torch.tensor([2]))  # the source's constant: int64
        return g.op("Add", g.op("Mul", two, a), b)


class MyAddModel(torch.nn.Module):
    def forward(self, a, b):
        return MyAdd.apply(a, b)


class ClipFloat32Min(torch.autograd.Function):
    """The source's MyRelu symbolic: a float32 min, whatever the input's dtype."""

    @staticmethod
    def forward(ctx, x):
        return x.clamp(min=0)

    @staticmethod
    def symbolic(g, x):
        return g.op("Clip", x, g.op("Constant", value_t=torch.tensor(0, dtype=torch.float)))


class ClipFloat32MinModel(torch.nn.Module):
    def forward(self, x):
        return ClipFloat32Min.apply(x)


def step2_my_add(out: pathlib.Path) -> None:
    print("\n== 2. MyAdd (2a + b) -> Constant, Mul, Add (dynamo=False) ==")
    for dtype in (torch.float32, torch.float64):
        a, b = torch.randn(2, 3, dtype=dtype), torch.randn(2, 3, dtype=dtype)
        path = out / f"my_add_{str(dtype).split('.')[-1]}.onnx"
        print(f"\n-- {dtype} inputs, int64 constant in the symbolic")
        export_and_compare(MyAddModel(), (a, b), path, rtol=0, atol=0, dynamo=False, opset_version=17)
        # Why it works: for Mul, Add and other arithmetic ops, the exporter's scalar type analysis casts
        # constants to the other input's dtype. The int64 [2] is stored as the inputs' float type.
        const = onnx.numpy_helper.to_array(onnx.load(str(path)).graph.node[0].attribute[0].t)
        assert const.dtype == a.numpy().dtype, const.dtype
        print(f"  the exporter stored the constant as {const.dtype}, not int64")

    # Why it can fail elsewhere: Clip is not an arithmetic op, so nothing casts its min for you.
    print("\n-- the source's float32 Clip min on a float64 input")
    x = torch.randn(2, 3, dtype=torch.float64)
    path = out / "failures/clip_float32_min_float64_input.onnx"
    torch.onnx.export(ClipFloat32MinModel(), (x,), path, dynamo=False, opset_version=17)
    model = onnx.load(str(path))
    reproduce(
        "onnx.checker",
        lambda: onnx.checker.check_model(model, full_check=True),
        "min has inconsistent type tensor(float)",
    )
    reproduce(
        "ONNX Runtime",
        lambda: run_ort(path, {"x.1": x.numpy()}),
        "Type parameter (T) of Optype (Clip) bound to different types (tensor(double) and tensor(float)",
    )
    # The fix is MyRelu's symbolic of step 1: the constant takes x's dtype.
    export_and_compare(
        MyReluModel(), (x,), out / "my_relu_float64.onnx", rtol=0, atol=0, dynamo=False, opset_version=17
    )


# ---------------------------------------------------------------------------------------------
# 3. A C++ extension wrapped in a Function
# ---------------------------------------------------------------------------------------------

MY_ADD_CPP = r"""
// 2a + b, computed element by element on raw memory, as a hand-written kernel would be:
// there is no ATen op in here for a tracer to record.
torch::Tensor my_add(torch::Tensor a, torch::Tensor b) {
  TORCH_CHECK(a.sizes() == b.sizes() && a.scalar_type() == torch::kFloat, "my_add: two float tensors of one shape");
  auto a_c = a.contiguous(), b_c = b.contiguous();
  auto out = torch::empty_like(a_c);
  const float* pa = a_c.data_ptr<float>();
  const float* pb = b_c.data_ptr<float>();
  float* po = out.data_ptr<float>();
  for (int64_t i = 0; i < out.numel(); ++i) po[i] = 2 * pa[i] + pb[i];
  return out;
}
"""


def missing_build_requirement() -> str:
    """Why the C++ extension cannot be built here, or "" when it can."""
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        return f"no C++ compiler: {compiler!r} is not on PATH (install g++, or set CXX)"
    if not pathlib.Path(sysconfig.get_paths()["include"], "Python.h").is_file():
        return "no Python headers (Python.h): install your Python's development package"
    if not torch.utils.cpp_extension.is_ninja_available():
        return "ninja is not installed: pip install ninja"
    return ""


def build_my_lib():
    # functions=["my_add"] generates the pybind11 binding, so my_lib.my_add is callable from Python.
    # The name is the build's cache key in ~/.cache/torch_extensions: one no other example uses.
    return torch.utils.cpp_extension.load_inline(
        name="onnx_tutorial_autograd_my_add",
        cpp_sources=MY_ADD_CPP,
        functions=["my_add"],
        verbose=False,
    )


def make_my_add_cpp(my_lib):
    class MyAddCpp(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            return my_lib.my_add(a, b)  # the exporter cannot see into C++; symbolic says what it is

        @staticmethod
        def symbolic(g, a, b):
            two = g.op("Constant", value_t=torch.tensor(2, dtype=a.type().dtype()))
            return g.op("Add", g.op("Mul", two, a), b)

    return MyAddCpp


class DirectCallModel(torch.nn.Module):
    def __init__(self, my_lib) -> None:
        super().__init__()
        self.my_lib = my_lib

    def forward(self, a, b):
        return self.my_lib.my_add(a, b)


class FunctionModel(torch.nn.Module):
    def __init__(self, function) -> None:
        super().__init__()
        self.function = function

    def forward(self, *inputs):
        return self.function.apply(*inputs)


def step3_cpp_extension(out: pathlib.Path):
    """Returns (the MyAddCpp Function, "") or, when no compiler is available, (None, the reason)."""
    print("\n== 3. A C++ extension wrapped in a Function (dynamo=False) ==")
    reason = missing_build_requirement()
    if reason:
        print(f"  SKIP step 3: {reason}")
        return None, reason
    my_lib = build_my_lib()
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    torch.testing.assert_close(my_lib.my_add(a, b), 2 * a + b)

    # Why a Function: called directly, the C++ code is invisible to the tracer. The export succeeds
    # without a word and writes the example's result as a constant: a model that ignores its inputs.
    print("\n-- my_lib.my_add called directly in forward")
    path = out / "failures/my_add_cpp_direct.onnx"
    torch.onnx.export(DirectCallModel(my_lib), (a, b), path, dynamo=False, opset_version=17)
    direct = check_and_show(path)
    assert len(direct.graph.input) == 0 and op_types(path) == ["Constant"], op_types(path)
    print("  the model has no inputs: its output is a constant")

    print("\n-- my_lib.my_add wrapped in a Function with symbolic")
    my_add_cpp = make_my_add_cpp(my_lib)
    model = FunctionModel(my_add_cpp)
    path = out / "my_add_cpp.onnx"
    # Standard ops only: plain ORT runs it, no custom kernel needed.
    export_and_compare(model, (a, b), path, rtol=0, atol=0, dynamo=False, opset_version=17)
    assert op_types(path) == ["Constant", "Mul", "Add"]
    return my_add_cpp, ""


# ---------------------------------------------------------------------------------------------
# 4. Super-resolution with a run-time scale factor
# ---------------------------------------------------------------------------------------------


class BicubicUpsample(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scales):
        # scales is a tensor [1, 1, s_h, s_w], a model input: forward needs Python floats.
        return F.interpolate(x, scale_factor=scales.tolist()[-2:], mode="bicubic", align_corners=False)

    @staticmethod
    def symbolic(g, x, scales):
        empty_roi = g.op("Constant", value_t=torch.tensor([], dtype=torch.float32))
        return g.op(
            "Resize",
            x,
            empty_roi,
            scales,  # a graph input, so the factor is chosen at run time
            coordinate_transformation_mode_s="pytorch_half_pixel",  # = align_corners=False
            cubic_coeff_a_f=-0.75,  # PyTorch's bicubic kernel; ONNX's default is -0.75 too
            mode_s="cubic",
            nearest_mode_s="floor",
        )


class FunctionUpsample(torch.nn.Module):
    def forward(self, x, scales):
        return BicubicUpsample.apply(x, scales)


class SuperResolution(torch.nn.Module):
    """SRCNN-style: upsample, then patch extraction, non-linear mapping and reconstruction."""

    def __init__(self, upsample: torch.nn.Module) -> None:
        super().__init__()
        self.upsample = upsample
        self.conv1 = torch.nn.Conv2d(3, 16, kernel_size=9, padding=4)
        self.conv2 = torch.nn.Conv2d(16, 8, kernel_size=1)
        self.conv3 = torch.nn.Conv2d(8, 3, kernel_size=5, padding=2)

    def forward(self, x, scales):
        x = self.upsample(x, scales)
        return self.conv3(torch.relu(self.conv2(torch.relu(self.conv1(x)))))


def factor(f: float) -> torch.Tensor:
    return torch.tensor([1.0, 1.0, f, f])


def check_two_factors(path: pathlib.Path, model: torch.nn.Module, x: torch.Tensor) -> None:
    """One file, two factors chosen at run time: both must match PyTorch."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for f in (2.0, 3.0):
        (actual,) = session.run(None, {"x": x.numpy(), "factor": factor(f).numpy()})
        expected = model(x, factor(f))
        assert actual.shape == (1, 3, int(16 * f), int(16 * f)), actual.shape
        # Cubic weights are computed in float32 by each library, then summed through three convs:
        # about 2e-7 apart on outputs of about 0.1; atol covers outputs near zero.
        np.testing.assert_allclose(actual, expected.detach().numpy(), rtol=1e-5, atol=1e-6)
        print(f"  factor {f:g}: output {actual.shape}, ONNX Runtime matches PyTorch (rtol=1e-05, atol=1e-06)")


def step4_super_resolution(out: pathlib.Path, sr: SuperResolution) -> None:
    print("\n== 4. Super-resolution: bicubic upsample -> Resize with the factor as an input (dynamo=False) ==")
    x = torch.rand(1, 3, 16, 16)
    path = out / "super_resolution.onnx"
    torch.onnx.export(
        sr,
        (x, factor(3.0)),
        path,
        dynamo=False,
        opset_version=17,
        input_names=["x", "factor"],
        output_names=["y"],
    )
    model = check_and_show(path)
    assert [i.name for i in model.graph.input] == ["x", "factor"]
    check_two_factors(path, sr, x)


# ---------------------------------------------------------------------------------------------
# 5. Backward
# ---------------------------------------------------------------------------------------------


def step5_backward() -> None:
    print("\n== 5. Does a Function need backward? ==")
    # Export runs forward (and symbolic) only, so MyAdd exported in step 2 without a backward.
    # Training does need it:
    a = torch.randn(3, requires_grad=True)
    reproduce(
        "MyAdd.backward",
        lambda: MyAdd.apply(a, torch.randn(3)).sum().backward(),
        "You must implement either the backward or vjp method",
    )
    # MyRelu has one; gradcheck compares it with finite differences, in float64 as it requires.
    x = torch.randn(4, 5, dtype=torch.float64)
    x = (x + 0.1 * x.sign()).requires_grad_()  # keep away from the kink at 0
    assert torch.autograd.gradcheck(MyRelu.apply, (x,))
    print("  torch.autograd.gradcheck(MyRelu.apply, (x,)) passed")


# ---------------------------------------------------------------------------------------------
# 6. The torch.export-based exporter (dynamo=True)
# ---------------------------------------------------------------------------------------------


class MyAddOnnxOps(torch.nn.Module):
    def forward(self, a, b):
        if torch.onnx.is_in_onnx_export():
            # Each call becomes exactly one ONNX node; dtype and shape describe its output.
            two = torch.tensor(2, dtype=a.dtype)
            doubled = torch.onnx.ops.symbolic("Mul", (two, a), dtype=a.dtype, shape=a.shape)
            return torch.onnx.ops.symbolic("Add", (doubled, b), dtype=a.dtype, shape=a.shape)
        return 2 * a + b


class OnnxOpsUpsample(torch.nn.Module):
    def forward(self, x, scales):
        if torch.onnx.is_in_onnx_export():
            n, c, h, w = x.shape
            # The output size depends on the scales' values: .item() makes it a symbolic size.
            out_h = (scales[2] * h).floor().to(torch.int64).item()
            out_w = (scales[3] * w).floor().to(torch.int64).item()
            return torch.onnx.ops.symbolic(
                "Resize",
                (x, None, scales),  # None: the optional roi input is left empty
                {"coordinate_transformation_mode": "pytorch_half_pixel", "cubic_coeff_a": -0.75, "mode": "cubic"},
                dtype=x.dtype,
                shape=(n, c, out_h, out_w),
            )
        return F.interpolate(x, scale_factor=scales.tolist()[-2:], mode="bicubic", align_corners=False)


class SplitInTwo(torch.nn.Module):
    def forward(self, x):
        if torch.onnx.is_in_onnx_export():
            half = [x.shape[0], x.shape[1] // 2, *x.shape[2:]]
            # Several outputs: symbolic_multi_out, with a dtype and a shape per output.
            first, second = torch.onnx.ops.symbolic_multi_out(
                "Split", (x,), {"axis": 1, "num_outputs": 2}, dtypes=(x.dtype, x.dtype), shapes=(half, half)
            )
        else:
            first, second = torch.chunk(x, 2, dim=1)
        return first * second


def step6_dynamo(out: pathlib.Path, sr: SuperResolution, my_add_cpp) -> None:
    print("\n== 6. The torch.export-based exporter (dynamo=True) ==")
    a, b = torch.randn(2, 3), torch.randn(2, 3)

    # Why: dynamo=True never calls `symbolic`; it traces into forward (and into C++ through the
    # dispatcher), so you get whatever forward computes with.
    traced = [("my_relu", MyReluModel(), (a,)), ("my_add", MyAddModel(), (a, b))]
    for name, model, inputs in traced:
        print(f"\n-- {name}: symbolic ignored, forward traced")
        path = out / f"{name}_dynamo.onnx"
        export_and_compare(model, inputs, path, rtol=0, atol=0, dynamo=True)
        assert "Constant" not in op_types(path), op_types(path)  # not what symbolic writes
        print(f"  ops: {op_types(path)}")

    if my_add_cpp is not None:
        # torch.export runs forward on fake tensors, which have no memory for C++ to read.
        print("\n-- MyAddCpp: forward cannot be traced")
        reproduce(
            "raw-memory C++ under torch.export",
            lambda: torch.onnx.export(FunctionModel(my_add_cpp).eval(), (a, b), dynamo=True, verbose=False),
            "The tensor has a non-zero number of elements, but its data is not allocated yet",
        )

    x = torch.rand(1, 3, 16, 16)
    print("\n-- the super-resolution model: forward cannot be traced")
    reproduce(
        "scales.tolist() under torch.export",
        lambda: torch.onnx.export(sr, (x, factor(3.0)), dynamo=True, verbose=False),
        "argument 'scale_factors' must be tuple of floats, but found element of type SymFloat",
    )

    # The way to choose the node under dynamo=True: torch.onnx.ops.symbolic inside forward.
    print("\n-- MyAdd with torch.onnx.ops.symbolic")
    path = out / "my_add_onnx_ops_dynamo.onnx"
    export_and_compare(MyAddOnnxOps(), (a, b), path, rtol=0, atol=0, dynamo=True)
    assert op_types(path) == ["Mul", "Add"], op_types(path)
    # is_in_onnx_export() is true under both exporters, but torch.onnx.ops works only with dynamo=True.
    reproduce(
        "torch.onnx.ops.symbolic under dynamo=False",
        lambda: torch.onnx.export(MyAddOnnxOps(), (a, b), out / "failures/my_add_onnx_ops.onnx", dynamo=False),
        "unsupported input list type: Tensor?",
    )

    print("\n-- Split with torch.onnx.ops.symbolic_multi_out")
    path = out / "split_onnx_ops_dynamo.onnx"
    export_and_compare(SplitInTwo(), (torch.randn(2, 4, 3),), path, rtol=0, atol=0, dynamo=True)
    assert op_types(path) == ["Split", "Mul"], op_types(path)

    print("\n-- the super-resolution model with torch.onnx.ops.symbolic")
    sr.upsample = OnnxOpsUpsample()  # same convolution weights, new upsampler
    path = out / "super_resolution_dynamo.onnx"
    onnx_program = torch.onnx.export(
        sr, (x, factor(3.0)), dynamo=True, verbose=False, input_names=["x", "factor"], output_names=["y"]
    )
    onnx_program.save(path)
    model = check_and_show(path)
    assert [i.name for i in model.graph.input] == ["x", "factor"]
    check_two_factors(path, sr, x)


# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=HERE / "output", help="where models are written")
    args = parser.parse_args(argv)
    if not hasattr(torch.onnx, "register_custom_op_symbolic"):
        print("SKIP: this torch has no TorchScript-based ONNX exporter, which `symbolic` methods need")
        return SKIP
    out = args.out.resolve()
    (out / "failures").mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    # ORT logs each failed session to stderr before raising; the exceptions are printed anyway.
    ort.set_default_logger_severity(4)
    # Each dynamo=False export warns that the TorchScript exporter is deprecated. That is known and
    # stated in the README; keep the output readable.
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.onnx")
    warnings.filterwarnings("ignore", message=".*legacy TorchScript-based ONNX export.*")
    sr = SuperResolution(FunctionUpsample()).eval()
    try:
        step1_my_relu(out)
        step2_my_add(out)
        my_add_cpp, skipped = step3_cpp_extension(out)
        step4_super_resolution(out, sr)
        step5_backward()
        step6_dynamo(out, sr, my_add_cpp)
    except AssertionError as exc:
        print(f"\nFAIL: {exc}")
        return 1
    if skipped:
        print(f"\nSKIP: every other check passed; the C++ step was skipped: {skipped}")
        return SKIP
    print(f"\nPASS: every model in {out} checked and matched PyTorch in ONNX Runtime")
    return 0


if __name__ == "__main__":
    sys.exit(main())
