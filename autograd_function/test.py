"""torch.autograd.Function with a `symbolic` method: choose the ONNX your Python (or C++) op becomes.

Run: python test.py [--out DIR] [-v]

A Function's static `symbolic(g, ...)` replaces its forward in the TorchScript-based exporter
(dynamo=False): MyRelu -> Clip, MyAdd -> Mul + Add, a C++ extension wrapped in a Function, and a
bicubic upsampler -> one Resize whose scale factor is a model input. The torch.export-based exporter
(dynamo=True) ignores `symbolic`; there, torch.onnx.ops.symbolic inside forward chooses the node.
The C++ step needs a compiler; without one it is skipped and the example exits 77 after the rest.

Every python block of README.md is in this file, word for word; the lines around them are the checks.
"""

import contextlib
import logging
import os
import re
import time
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn.functional as F
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun

# isort: split
# Test-only imports: the command line and the checks around the lesson's code.
import argparse
import ctypes
import pathlib
import shutil
import sys
import sysconfig
import tempfile
import textwrap
import traceback

TORCH = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])  # e.g. (2, 14)
HERE = pathlib.Path(__file__).resolve().parent
SKIP = 77  # exit status for "cannot run here", as in automake
VERBOSE = False  # -v: print every exported graph in full

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


def step1_my_relu() -> None:
    print("\n== 1. MyRelu -> Clip (dynamo=False) ==")
    x = torch.randn(2, 3, 4)
    torch.onnx.export(MyReluModel(), (x,), "my_relu.onnx", dynamo=False, opset_version=17, input_names=["x"])
    (actual,) = run_ort("my_relu.onnx", {"x": x.numpy()})
    compare("my_relu.onnx", actual, MyReluModel()(x), rtol=0, atol=0)

    show("my_relu.onnx")
    assert op_types("my_relu.onnx") == ["Constant", "Clip"], op_types("my_relu.onnx")


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


def step2_my_add() -> None:
    print("\n== 2. MyAdd (2a + b) -> Constant, Mul, Add (dynamo=False) ==")
    for path, dtype in [("my_add_float32.onnx", torch.float32), ("my_add_float64.onnx", torch.float64)]:
        a, b = torch.randn(2, 3, dtype=dtype), torch.randn(2, 3, dtype=dtype)
        torch.onnx.export(MyAddModel(), (a, b), path, dynamo=False, opset_version=17, input_names=["a", "b"])
        (actual,) = run_ort(path, {"a": a.numpy(), "b": b.numpy()})
        compare(path, actual, MyAddModel()(a, b), rtol=0, atol=0)
        two = onnx.numpy_helper.to_array(onnx.load(path).graph.node[0].attribute[0].t)
        print(f"  {path}: the exporter stored the constant as {two.dtype}, not int64")

    for path, dtype in [("my_add_float32.onnx", np.float32), ("my_add_float64.onnx", np.float64)]:
        show(path)
        assert op_types(path) == ["Constant", "Mul", "Add"], op_types(path)
        two = onnx.numpy_helper.to_array(onnx.load(path).graph.node[0].attribute[0].t)
        assert two.dtype == dtype and two.tolist() == [2], (two.dtype, two)

    with warnings.catch_warnings(record=True) as caught:  # torch 2.4's exporter warns about this model
        os.makedirs("failures", exist_ok=True)  # failure demonstrations go there
        x64 = torch.randn(2, 3, dtype=torch.float64)
        torch.onnx.export(
            ClipFloat32MinModel(),
            (x64,),
            "failures/clip_float32_min_float64_input.onnx",
            dynamo=False,
            opset_version=17,
            input_names=["x"],
        )
    inference = [str(w.message) for w in caught if "failed ONNX shape inference" in str(w.message)]
    if TORCH < (2, 5):  # torch 2.4 runs the ONNX checker on the file it wrote; 2.5 dropped it (pytorch/pytorch#135180)
        assert inference, [str(w.message) for w in caught]
        print("  UserWarning:", inference[0].split(" If this is unintended")[0])
        differs("the export itself warns that the model failed ONNX shape inference (torch 2.4 checks what it wrote)")
    else:
        assert not inference, inference  # the exporter writes the model without a word

    with expect_error("min has inconsistent type tensor(float)"):
        onnx.checker.check_model(onnx.load("failures/clip_float32_min_float64_input.onnx"), full_check=True)
    with expect_error("Type parameter (T) of Optype (Clip) bound to different types (tensor(double) and tensor(float)"):
        run_ort("failures/clip_float32_min_float64_input.onnx", {"x": x64.numpy()})

    torch.onnx.export(MyReluModel(), (x64,), "my_relu_float64.onnx", dynamo=False, opset_version=17, input_names=["x"])
    (actual,) = run_ort("my_relu_float64.onnx", {"x": x64.numpy()})
    compare("my_relu_float64.onnx", actual, MyReluModel()(x64), rtol=0, atol=0)

    show("my_relu_float64.onnx")
    zero = onnx.numpy_helper.to_array(onnx.load("my_relu_float64.onnx").graph.node[0].attribute[0].t)
    assert zero.dtype == np.float64, zero.dtype  # step 1's fix: the constant takes x's dtype


# ---------------------------------------------------------------------------------------------
# 3. A C++ extension wrapped in a Function
# ---------------------------------------------------------------------------------------------

MY_ADD_CPP = r"""
// 2a + b as a hand-written kernel computes it: allocate the output (an ATen call), then fill it
// element by element through raw pointers (no ATen call: nothing a tracer could record).
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

// The source material's version: 2a + b with ATen ops only.
torch::Tensor my_add_aten(torch::Tensor a, torch::Tensor b) {
  return 2 * a + b;
}
"""

my_lib = None  # the compiled extension: step 3 builds it, step 6 uses it again


class DirectCall(torch.nn.Module):
    def __init__(self, kernel) -> None:
        super().__init__()
        self.kernel = kernel  # a C++ function, called as it is: no Function around it

    def forward(self, a, b):
        return self.kernel(a, b)


class MyAddCpp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        return my_lib.my_add(a, b)  # the exporter cannot see into C++; symbolic says what it is

    @staticmethod
    def symbolic(g, a, b):
        two = g.op("Constant", value_t=torch.tensor(2, dtype=a.type().dtype()))
        return g.op("Add", g.op("Mul", two, a), b)


class MyAddCppModel(torch.nn.Module):
    def forward(self, a, b):
        return MyAddCpp.apply(a, b)


def step3_cpp_extension() -> None:
    global my_lib
    print("\n== 3. A C++ extension wrapped in a Function (dynamo=False) ==")
    problem = build_problem()
    if problem:
        raise Skip(problem)

    logging.getLogger("torch.utils.cpp_extension").addFilter(lambda record: "No CUDA runtime" not in record.msg)
    from torch.utils import cpp_extension  # noqa: E402 - after the filter: the import itself logs the message

    print("building the C++ extension: about a minute the first time, cached after")
    started = time.time()
    my_lib = cpp_extension.load_inline(
        name="onnx_tutorial_autograd_my_add",
        cpp_sources=MY_ADD_CPP,
        functions=["my_add", "my_add_aten"],  # pybind11 bindings: Python calls my_lib.my_add(a, b)
        verbose=False,
    )
    if os.path.getmtime(my_lib.__file__) >= started:
        print(f"  built {my_lib.__file__} in {time.time() - started:.0f} s")
    else:
        print(f"  reused the cached build {my_lib.__file__} ({time.time() - started:.1f} s)")

    a, b = torch.randn(2, 3), torch.randn(2, 3)
    torch.testing.assert_close(my_lib.my_add(a, b), 2 * a + b)  # the kernel itself is right
    torch.onnx.export(
        DirectCall(my_lib.my_add),
        (a, b),
        "failures/my_add_cpp_direct.onnx",
        dynamo=False,
        opset_version=17,
        input_names=["a", "b"],
    )
    direct = onnx.load("failures/my_add_cpp_direct.onnx")
    constant = onnx.numpy_helper.to_array(direct.graph.node[0].attribute[0].t)
    inputs = [i.name for i in direct.graph.input]
    print(f"  my_add_cpp_direct.onnx: inputs {inputs}, output Constant {constant.tolist()}")

    show("failures/my_add_cpp_direct.onnx")
    assert len(direct.graph.input) == 0 and op_types("failures/my_add_cpp_direct.onnx") == ["Constant"]
    assert not np.allclose(constant, (2 * a + b).numpy()), "the constant is 2a + b after all"
    assert not constant.any(), f"expected zeros (empty_like exported as zeros), got {constant}"

    # What the exporter's tracer recorded: each ATen op that ran, including those the C++ code calls.
    with brief_warnings(torch.jit.TracerWarning) as caught:  # trace runs its graph again, to check it
        traced = torch.jit.trace(my_lib.my_add, (a, b))
        traced_aten = torch.jit.trace(my_lib.my_add_aten, (a, b))
    for name, graph in [("my_add", traced.graph), ("my_add_aten", traced_aten.graph)]:
        print(f"  my_lib.{name} traced as", [node.kind() for node in graph.nodes() if node.kind() != "prim::Constant"])

    assert [n.kind() for n in traced.graph.nodes() if n.kind() != "prim::Constant"] == ["aten::empty_like"]
    assert [n.kind() for n in traced_aten.graph.nodes() if n.kind() != "prim::Constant"] == ["aten::mul", "aten::add"]
    assert any("does not match the corresponding output" in str(w.message) for w in caught), caught

    torch.onnx.export(
        DirectCall(my_lib.my_add_aten),
        (a, b),
        "my_add_aten_direct.onnx",
        dynamo=False,
        opset_version=17,
        input_names=["a", "b"],
    )
    (actual,) = run_ort("my_add_aten_direct.onnx", {"a": a.numpy(), "b": b.numpy()})
    compare("my_add_aten_direct.onnx", actual, 2 * a + b, rtol=0, atol=0)

    show("my_add_aten_direct.onnx")
    assert op_types("my_add_aten_direct.onnx")[-2:] == ["Mul", "Add"], op_types("my_add_aten_direct.onnx")

    torch.onnx.export(
        MyAddCppModel(),
        (a, b),
        "my_add_cpp.onnx",
        dynamo=False,
        opset_version=17,
        input_names=["a", "b"],
    )
    (actual,) = run_ort("my_add_cpp.onnx", {"a": a.numpy(), "b": b.numpy()})
    compare("my_add_cpp.onnx", actual, MyAddCppModel()(a, b), rtol=0, atol=0)

    show("my_add_cpp.onnx")  # standard ops only: plain ONNX Runtime runs it, no custom kernel needed
    assert op_types("my_add_cpp.onnx") == ["Constant", "Mul", "Add"], op_types("my_add_cpp.onnx")


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


def upsample_atol(x):
    """How far ONNX Runtime's cubic Resize may be from torch's bicubic interpolate on x (float32)."""
    eps = torch.finfo(torch.float32).eps
    slope = 3 * 1.375  # the cubic kernel's largest sum of |w'| times its largest sum of |w| (a = -0.75)
    # 16 eps: rounding 16 weights and their sum; 2 * slope * eps * size: the sampling position, rounded
    # differently by the two libraries (up to eps * size), moves the result by at most slope per unit, per axis.
    bound = (16 + 2 * slope * max(x.shape[-2:])) * eps * x.abs().max().item()
    return float(f"{bound:.2g}")  # two significant digits: the margin is wide


def step4_super_resolution() -> None:
    print("\n== 4. Super-resolution: bicubic upsample -> Resize with the factor as an input (dynamo=False) ==")
    x = torch.rand(1, 3, 16, 16)
    factor3 = torch.tensor([1.0, 1.0, 3.0, 3.0])
    with brief_warnings(torch.jit.TracerWarning) as caught:
        torch.onnx.export(
            FunctionUpsample(),
            (x, factor3),
            "bicubic_upsample.onnx",
            dynamo=False,
            opset_version=17,
            input_names=["x", "factor"],
        )
    for f in (2.0, 3.0):
        scales = torch.tensor([1.0, 1.0, f, f])
        (actual,) = run_ort("bicubic_upsample.onnx", {"x": x.numpy(), "factor": scales.numpy()})
        expected = FunctionUpsample()(x, scales)
        compare(f"bicubic_upsample.onnx, factor {f:g}", actual, expected, rtol=0, atol=upsample_atol(x))

    show("bicubic_upsample.onnx")
    assert op_types("bicubic_upsample.onnx") == ["Constant", "Resize"], op_types("bicubic_upsample.onnx")
    assert any("Converting a tensor to a Python list" in str(w.message) for w in caught), caught

    sr = SuperResolution(FunctionUpsample()).eval()
    with brief_warnings(torch.jit.TracerWarning) as caught:
        torch.onnx.export(
            sr,
            (x, factor3),
            "super_resolution.onnx",
            dynamo=False,
            opset_version=17,
            input_names=["x", "factor"],
            output_names=["y"],
            # name y's sizes: left alone, the exporter declares y as [Convy_dim_0, 3, Convy_dim_0, ...],
            # as if height had to equal batch, which a runtime planning from shapes would believe
            dynamic_axes={"x": {0: "batch"}, "y": {0: "batch", 2: "height", 3: "width"}},
        )
    for f in (2.0, 3.0):
        scales = torch.tensor([1.0, 1.0, f, f])
        (actual,) = run_ort("super_resolution.onnx", {"x": x.numpy(), "factor": scales.numpy()})
        compare(f"super_resolution.onnx, factor {f:g}, {actual.shape}", actual, sr(x, scales), rtol=1e-5, atol=1e-6)

    model = show("super_resolution.onnx")
    assert [i.name for i in model.graph.input] == ["x", "factor"]
    declared = [d.dim_value or d.dim_param for d in model.graph.output[0].type.tensor_type.shape.dim]
    assert declared == ["batch", 3, "height", "width"], declared
    (resize,) = [node for node in model.graph.node if node.op_type == "Resize"]
    assert resize.input[2] == "factor", resize.input  # the scales come from the model input
    assert any("Converting a tensor to a Python list" in str(w.message) for w in caught), caught


# ---------------------------------------------------------------------------------------------
# 5. Does a Function need backward?
# ---------------------------------------------------------------------------------------------


def step5_backward() -> None:
    print("\n== 5. Does a Function need backward? ==")
    a = torch.randn(3, requires_grad=True)
    with expect_error("You must implement either the backward or vjp method"):
        MyAdd.apply(a, torch.randn(3)).sum().backward()

    x = torch.randn(4, 5, dtype=torch.float64)
    x = (x + 0.1 * x.sign()).requires_grad_()  # keep away from the kink at 0
    print("  torch.autograd.gradcheck(MyRelu.apply, (x,)):", torch.autograd.gradcheck(MyRelu.apply, (x,)))


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


class MyLeakyRelu(torch.autograd.Function):
    """One Function, one LeakyRelu node, under both exporters."""

    @staticmethod
    def forward(ctx, x, alpha: float):
        # dynamo=True traces forward: write the node here. dynamo=False traces forward too (and then puts
        # symbolic's nodes in its place), but torch.onnx.ops fails under its tracer: leave that branch to symbolic.
        if torch.onnx.is_in_onnx_export() and not torch.jit.is_tracing():
            return torch.onnx.ops.symbolic("LeakyRelu", (x,), {"alpha": alpha}, dtype=x.dtype, shape=x.shape)
        return F.leaky_relu(x, alpha)

    @staticmethod
    def symbolic(g, x, alpha: float):
        return g.op("LeakyRelu", x, alpha_f=alpha)


class MyLeakyReluModel(torch.nn.Module):
    def forward(self, x):
        return MyLeakyRelu.apply(x, 0.1)


class MyLeakyReluUnguarded(MyLeakyRelu):
    """The same Function without `not torch.jit.is_tracing()`: torch.onnx.ops then runs under dynamo=False too."""

    @staticmethod
    def forward(ctx, x, alpha: float):
        if torch.onnx.is_in_onnx_export():
            return torch.onnx.ops.symbolic("LeakyRelu", (x,), {"alpha": alpha}, dtype=x.dtype, shape=x.shape)
        return F.leaky_relu(x, alpha)


class MyLeakyReluUnguardedModel(torch.nn.Module):
    def forward(self, x):
        return MyLeakyReluUnguarded.apply(x, 0.1)


class MinMaxOnnxOps(torch.nn.Module):
    """The min and the max over the last axis, as ONE node with two outputs, in a domain of our own."""

    def forward(self, x):
        if torch.onnx.is_in_onnx_export():
            reduced = x.shape[:-1]
            low, high = torch.onnx.ops.symbolic_multi_out(
                "tutorial::MinMax", (x,), {"axis": -1}, dtypes=(x.dtype, x.dtype), shapes=(reduced, reduced), version=1
            )
            return low, high
        return torch.aminmax(x, dim=-1)


class MinMax(OpRun):
    """tutorial::MinMax in Python, for ONNX's reference evaluator (ONNX Runtime has no kernel for it)."""

    op_domain = "tutorial"  # the class name is the op type

    def _run(self, x, axis=None):
        return (x.min(axis=axis), x.max(axis=axis))


def step6_dynamo() -> None:
    print("\n== 6. The torch.export-based exporter (dynamo=True) ==")
    if TORCH < (2, 8):
        raise NeedsTorch(
            "2.8",
            "torch.onnx.ops, this step's way to choose the nodes under dynamo=True, came with torch 2.8;"
            " before 2.5, dynamo=True is the old torch.onnx.dynamo_export",
        )
    # Step 6 needs torch >= 2.8 (torch.onnx.ops); on torch 2.4, dynamo=True is the old torch.onnx.dynamo_export.
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    relu_model, add_model = MyReluModel().eval(), MyAddModel().eval()
    # external_data=False: the weights go inside the .onnx file, not beside it in a .onnx.data file.
    torch.onnx.export(relu_model, (a,), "my_relu_dynamo.onnx", dynamo=True, verbose=False, external_data=False)
    torch.onnx.export(add_model, (a, b), "my_add_dynamo.onnx", dynamo=True, verbose=False, external_data=False)
    print("  symbolic ignored, forward traced: my_relu_dynamo.onnx holds", op_types("my_relu_dynamo.onnx"))
    print("  symbolic ignored, forward traced: my_add_dynamo.onnx holds", op_types("my_add_dynamo.onnx"))
    (actual,) = run_ort("my_relu_dynamo.onnx", {"x": a.numpy()})
    compare("my_relu_dynamo.onnx", actual, MyReluModel()(a), rtol=0, atol=0)
    (actual,) = run_ort("my_add_dynamo.onnx", {"a": a.numpy(), "b": b.numpy()})
    compare("my_add_dynamo.onnx", actual, MyAddModel()(a, b), rtol=0, atol=0)

    show("my_relu_dynamo.onnx")
    show("my_add_dynamo.onnx")
    assert op_types("my_relu_dynamo.onnx") == ["Max"], op_types("my_relu_dynamo.onnx")
    assert op_types("my_add_dynamo.onnx") == ["Mul", "Add"], op_types("my_add_dynamo.onnx")

    if my_lib is None:  # MyAddCpp needs step 3's C++ build
        print("  MyAddCpp: not tried, step 3 could not build the C++ extension")
    else:
        with brief_warnings(UserWarning) as caught:
            with expect_error("The tensor has a non-zero number of elements, but its data is not allocated yet"):
                torch.onnx.export(
                    MyAddCppModel().eval(),
                    (a, b),
                    "failures/my_add_cpp_dynamo.onnx",
                    dynamo=True,
                    verbose=False,
                )
        assert any("Dynamo does not know how to trace the builtin" in str(w.message) for w in caught), caught

    if TORCH >= (2, 9):
        x = torch.rand(1, 3, 16, 16)
        factor3 = torch.tensor([1.0, 1.0, 3.0, 3.0])
        # On torch 2.8 this export does not fail (draft export, see below): expect_error then stops the page.
        with expect_error("argument 'scale_factors' must be tuple of floats, but found element of type SymFloat"):
            torch.onnx.export(
                SuperResolution(FunctionUpsample()).eval(),
                (x, factor3),
                "failures/super_resolution_function_dynamo.onnx",
                dynamo=True,
                verbose=False,
            )
    else:  # torch 2.8: where torch.export fails, dynamo=True falls back to draft export, which succeeds
        x = torch.rand(1, 3, 16, 16)
        factor3 = torch.tensor([1.0, 1.0, 3.0, 3.0])
        draft_export_freezes_the_factor(x, factor3)

    with expect_error("argument 'scale_factors' must be tuple of floats, but found element of type SymFloat"):
        # torch.onnx.export(..., dynamo=True) first tries exactly this; call it yourself to see its error on any torch.
        torch.export.export(SuperResolution(FunctionUpsample()).eval(), (x, factor3), strict=False)

    torch.onnx.export(
        MyAddOnnxOps().eval(),
        (a, b),
        "my_add_onnx_ops_dynamo.onnx",
        dynamo=True,
        verbose=False,
        external_data=False,
    )
    print("  torch.onnx.ops.symbolic: my_add_onnx_ops_dynamo.onnx holds", op_types("my_add_onnx_ops_dynamo.onnx"))
    (actual,) = run_ort("my_add_onnx_ops_dynamo.onnx", {"a": a.numpy(), "b": b.numpy()})
    compare("my_add_onnx_ops_dynamo.onnx", actual, MyAddOnnxOps()(a, b), rtol=0, atol=0)

    show("my_add_onnx_ops_dynamo.onnx")
    assert op_types("my_add_onnx_ops_dynamo.onnx") == ["Mul", "Add"], op_types("my_add_onnx_ops_dynamo.onnx")

    with brief_warnings(torch.jit.TracerWarning):
        with expect_error("unsupported input list type: Tensor?"):
            torch.onnx.export(MyAddOnnxOps(), (a, b), "failures/my_add_onnx_ops.onnx", dynamo=False)

    s = torch.randn(2, 4, 3)
    torch.onnx.export(
        SplitInTwo().eval(), (s,), "split_onnx_ops_dynamo.onnx", dynamo=True, verbose=False, external_data=False
    )
    print("  symbolic_multi_out: split_onnx_ops_dynamo.onnx holds", op_types("split_onnx_ops_dynamo.onnx"))
    (actual,) = run_ort("split_onnx_ops_dynamo.onnx", {"x": s.numpy()})
    compare("split_onnx_ops_dynamo.onnx", actual, SplitInTwo()(s), rtol=0, atol=0)

    show("split_onnx_ops_dynamo.onnx")
    assert op_types("split_onnx_ops_dynamo.onnx") == ["Split", "Mul"], op_types("split_onnx_ops_dynamo.onnx")

    if TORCH < (2, 9):
        print("  exporting super_resolution_dynamo.onnx: torch 2.8 takes the draft-export path for it too (10-20 s)")
    log: list[str] = []
    with captured(log):  # torch 2.8 logs its draft export of this model, and prints the graph it traced
        sr_dynamo = SuperResolution(OnnxOpsUpsample()).eval()
        torch.onnx.export(
            sr_dynamo,
            (x, factor3),
            "super_resolution_dynamo.onnx",
            dynamo=True,
            verbose=False,
            external_data=False,
            input_names=["x", "factor"],
            output_names=["y"],
        )
    drafted = "it was not able to soundly produce a graph" in log[0]
    assert drafted == (TORCH < (2, 9)), log[0][-2000:]  # draft export runs only on torch 2.8 here
    if drafted:  # torch.export printed the graph it had traced when a data-dependent check stopped it
        stopped_at = [line.split(" = ", 1)[-1] for line in log[0].splitlines() if "= torch.ops." in line][-1]
        assert stopped_at.startswith("torch.ops.aten.conv2d"), stopped_at
        print("  super_resolution_dynamo.onnx: torch.export stopped at the first conv2d; draft export wrote it")

    for f in (2.0, 3.0):
        scales = torch.tensor([1.0, 1.0, f, f])
        (actual,) = run_ort("super_resolution_dynamo.onnx", {"x": x.numpy(), "factor": scales.numpy()})
        expected = sr_dynamo(x, scales)
        compare(f"super_resolution_dynamo.onnx, factor {f:g}, {actual.shape}", actual, expected, rtol=1e-5, atol=1e-6)

    model = show("super_resolution_dynamo.onnx")
    assert [i.name for i in model.graph.input] == ["x", "factor"]
    assert [n.op_type for n in model.graph.node if n.op_type != "Conv" and n.op_type != "Relu"] == ["Resize"]
    if TORCH < (2, 9):
        differs(
            "where torch.export fails, dynamo=True falls back to draft export without an error: the Function's"
            " super-resolution model exports with its factor frozen at 3 (wrong at factor 2), and the torch.onnx.ops"
            " one goes the same way but checks out at both factors; dynamo=True's default opset is 18, not 20"
        )

    x_lr = torch.randn(2, 3, 4)
    torch.onnx.export(
        MyLeakyReluModel(), (x_lr,), "my_leaky_relu.onnx", dynamo=False, opset_version=17, input_names=["x"]
    )
    torch.onnx.export(
        MyLeakyReluModel().eval(), (x_lr,), "my_leaky_relu_dynamo.onnx", dynamo=True, verbose=False, external_data=False
    )
    nodes = []
    for path in ("my_leaky_relu.onnx", "my_leaky_relu_dynamo.onnx"):
        (node,) = onnx.load(path).graph.node
        nodes.append((node.domain or "ai.onnx", node.op_type, str(onnx.helper.get_attribute_value(node.attribute[0]))))
        print(f"  {path}: one node,", " ".join(nodes[-1][:2]), f"{node.attribute[0].name}={nodes[-1][2]}")
        (actual,) = run_ort(path, {"x": x_lr.numpy()})
        compare(path, actual, MyLeakyReluModel()(x_lr), rtol=0, atol=0)
    assert nodes[0] == nodes[1], nodes  # the same node, whichever exporter wrote it

    for path in ("my_leaky_relu.onnx", "my_leaky_relu_dynamo.onnx"):
        model = show(path)
        assert [(a.name, a.type) for a in model.graph.node[0].attribute] == [("alpha", onnx.AttributeProto.FLOAT)]
        assert [i.name for i in model.graph.input] == ["x"], [i.name for i in model.graph.input]

    with expect_error("unsupported input list type: Tensor?"):
        torch.onnx.export(MyLeakyReluUnguardedModel(), (x_lr,), "failures/my_leaky_relu_unguarded.onnx", dynamo=False)

    m = torch.randn(2, 3, 5)
    torch.onnx.export(
        MinMaxOnnxOps().eval(),
        (m,),
        "min_max_onnx_ops_dynamo.onnx",
        dynamo=True,
        verbose=False,
        external_data=False,
        output_names=["low", "high"],
    )
    model = onnx.load("min_max_onnx_ops_dynamo.onnx")
    onnx.checker.check_model(model, full_check=True)  # it checks the opset import of "tutorial", not the op
    (node,) = model.graph.node
    print(f"  symbolic_multi_out: one node, {node.domain}.{node.op_type}, outputs {list(node.output)}")
    low, high = ReferenceEvaluator(model, new_ops=[MinMax]).run(None, {"x": m.numpy()})
    expected = MinMaxOnnxOps()(m)
    np.testing.assert_array_equal(low, expected.min.numpy())
    np.testing.assert_array_equal(high, expected.max.numpy())
    print("  min_max_onnx_ops_dynamo.onnx: ONNX's reference evaluator matches PyTorch (low and high, exactly)")
    with expect_error("MinMax(-1) is not a registered function/op"):
        run_ort("min_max_onnx_ops_dynamo.onnx", {"x": m.numpy()})  # plain ONNX Runtime has no such op

    show("min_max_onnx_ops_dynamo.onnx")
    assert [(o.domain, o.version) for o in model.opset_import if o.domain] == [("tutorial", 1)], model.opset_import
    assert [o.name for o in model.graph.output] == ["low", "high"] == list(node.output)


def draft_export_freezes_the_factor(x, factor3) -> None:
    """torch 2.8 only: the export that fails in step 6 on later torch succeeds here, and the model is wrong."""
    print("  exporting with dynamo=True: torch.export fails, so torch 2.8 tries draft export (10-20 s)")
    sr = SuperResolution(FunctionUpsample()).eval()
    log: list[str] = []
    with captured(log):  # verbose left at its default: the exporter prints each capture strategy it tries
        torch.onnx.export(
            sr, (x, factor3), "failures/super_resolution_function_dynamo.onnx", dynamo=True, external_data=False
        )
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in log[0].splitlines()]
    tried = [line for line in lines if line.startswith("[torch.onnx] Obtain model graph") and line[-1] in "❌✅"]
    assert [line[-1] for line in tried] == ["❌", "❌", "✅"] and "draft_export" in tried[-1], lines
    assert "WARNING: 1 issue(s) found during export, and it was not able to soundly produce a graph." in lines, lines
    for line in tried:
        print(" ", line)
    print("  no error; the draft export report says: 1 issue(s) found, not able to soundly produce a graph")

    path = "failures/super_resolution_function_dynamo.onnx"
    resize = next(node for node in onnx.load(path).graph.node if node.op_type == "Resize")
    frozen = next(i for i in onnx.load(path).graph.initializer if i.name == resize.input[2])
    scales = onnx.numpy_helper.to_array(frozen).tolist()
    print(f"  {path}: Resize reads the constant scales {scales}, not the input")
    assert scales == [1.0, 1.0, 3.0, 3.0], scales
    (actual,) = run_ort(path, {"x": x.numpy(), "scales": factor3.numpy()})  # the input it was exported with: right
    compare(f"{path}, factor 3", actual, sr(x, factor3), rtol=1e-5, atol=1e-6)
    factor2 = torch.tensor([1.0, 1.0, 2.0, 2.0])
    (actual,) = run_ort(path, {"x": x.numpy(), "scales": factor2.numpy()})  # any other factor: wrong
    expected = sr(x, factor2)
    print(f"  {path}, factor 2: ONNX Runtime gives {actual.shape}, PyTorch {tuple(expected.shape)}")
    assert actual.shape == (1, 3, 48, 48) and tuple(expected.shape) == (1, 3, 32, 32), (actual.shape, expected.shape)


# ---------------------------------------------------------------------------------------------

# Every model this example writes, relative to --out: the ones each step keeps (each checked and run against
# PyTorch; a step skipped for the installed torch keeps none) and the failure demonstrations. main() removes
# them before a run and refuses to claim PASS while --out holds any other .onnx file.
KEPT = {
    1: ("my_relu.onnx",),
    2: ("my_add_float32.onnx", "my_add_float64.onnx", "my_relu_float64.onnx"),
    3: ("my_add_aten_direct.onnx", "my_add_cpp.onnx"),
    4: ("bicubic_upsample.onnx", "super_resolution.onnx"),
    6: (
        "my_relu_dynamo.onnx",
        "my_add_dynamo.onnx",
        "my_add_onnx_ops_dynamo.onnx",
        "split_onnx_ops_dynamo.onnx",
        "super_resolution_dynamo.onnx",
        "my_leaky_relu.onnx",
        "my_leaky_relu_dynamo.onnx",
        "min_max_onnx_ops_dynamo.onnx",
    ),
}
FAILURES = (
    "failures/clip_float32_min_float64_input.onnx",
    "failures/my_add_cpp_direct.onnx",
    "failures/my_add_cpp_dynamo.onnx",
    "failures/super_resolution_function_dynamo.onnx",  # written on torch 2.8 only: the draft-export model
    "failures/my_add_onnx_ops.onnx",
    "failures/my_leaky_relu_unguarded.onnx",
)
STEPS = (step1_my_relu, step2_my_add, step3_cpp_extension, step4_super_resolution, step5_backward, step6_dynamo)



# What ERRORS.md says of each error this example reproduces: part of expect_error's expected text ->
# (what raises it, its cause in one line[, the step that fixes it when that is a later step than the one
# that reproduces it]). recording() fails the run on an error not explained here.
CAUSES = {
    "min has inconsistent type tensor(float)": (
        "onnx.checker",
        "the `symbolic` wrote `min` as a float32 constant while the model ran on a float64 input: `Clip`'s "
        "inputs share one type; build constants in the input's dtype",
    ),
    "Type parameter (T) of Optype (Clip) bound to different types": (
        "ONNX Runtime",
        "the same model in ONNX Runtime: `Clip` got a float64 input and a float32 `min`; build constants in "
        "the input's dtype",
    ),
    "You must implement either the backward or vjp method": (
        "PyTorch",
        "`backward()` through a Function without `backward`: export never calls it, training does",
    ),
    "The tensor has a non-zero number of elements, but its data is not allocated yet": (
        "dynamo=True",
        "`torch.export` runs the Function's C++ extension call on fake tensors, which have no data: make it a "
        "`torch.library` op with a fake kernel",
    ),
    "argument 'scale_factors' must be tuple of floats, but found element of type SymFloat": (
        "dynamo=True",
        "`torch.export` (step 1 of `dynamo=True`) traces the scale factor read from a tensor as a symbolic "
        "float, which `upsample_bicubic2d` refuses",
    ),
    "unsupported input list type: Tensor?": (
        "dynamo=False",
        "`torch.onnx.ops.symbolic*` in `forward` is for `dynamo=True`: under `dynamo=False` call it only when "
        "`not torch.jit.is_tracing()` and let `symbolic` write the node",
    ),
    "MinMax(-1) is not a registered function/op": (
        "ONNX Runtime",
        "a custom-domain node (`tutorial::MinMax`) with no kernel in ONNX Runtime: register one, or check the "
        "model in `onnx.reference` with a Python op",
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
    # Every dynamo=False export warns that the TorchScript-based exporter is deprecated (and that dynamo=True
    # is the default since torch 2.9). The steps use dynamo=False on purpose: quiet that one warning.
    warnings.filterwarnings("ignore", message="You are using the legacy TorchScript-based ONNX export")
    # A CUDA toolkit without a GPU: importing torch.utils.cpp_extension logs "No CUDA runtime is found" (step 3).
    logging.getLogger("torch.utils.cpp_extension").addFilter(lambda record: "No CUDA runtime" not in record.msg)
    quiet_cpp_extension_import()  # torch 2.4 prints that message instead of logging it
    # ORT logs each model it refuses to load before raising; the raised error is what step 2 shows.
    ort.set_default_logger_severity(4)
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
    print(f"\nPASS: every model in {out} checked and matched PyTorch (ONNX Runtime or onnx.reference)")
    return 0


# =============================================================================================
# Helpers: safe to skip on a first read. The command line, the output folder, and the checks that
# run around the lesson's code: the ONNX checker, ONNX Runtime against PyTorch, captured output.
# =============================================================================================


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


def run_ort(path, feeds: dict[str, np.ndarray], options: ort.SessionOptions | None = None) -> list[np.ndarray]:
    session = ort.InferenceSession(str(path), options or ort.SessionOptions(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def compare(name: str, actual: np.ndarray, expected, rtol: float, atol: float) -> None:
    """assert_allclose, then one line that names the model (and output) and the largest difference."""
    expected = expected.detach().numpy() if isinstance(expected, torch.Tensor) else np.asarray(expected)
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=name)
    diff = float(np.max(np.abs(actual.astype(np.float64) - expected))) if expected.size else 0.0
    print(f"  {name}: ONNX Runtime matches PyTorch (max abs diff {diff:.1e}; rtol={rtol}, atol={atol})")


def op_types(path):
    return [node.op_type for node in onnx.load(path).graph.node]


@contextlib.contextmanager
def brief_warnings(category):
    """Collect the warnings the code inside raises; print the first line of each one of `category`."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught
    for warning in caught:
        if issubclass(warning.category, category):
            print(f"  {warning.category.__name__}: {str(warning.message).strip().splitlines()[0]}")


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


def quiet_cpp_extension_import() -> None:
    """Import torch.utils.cpp_extension once, its output captured: torch 2.4 prints "No CUDA runtime is found"
    to stderr at import (later torch logs it, and main()'s logging filter drops it). Show anything else."""
    log: list[str] = []
    with captured(log):
        import torch.utils.cpp_extension  # noqa: F401
    rest = [line for line in log[0].splitlines() if line.strip() and "No CUDA runtime" not in line]
    if rest:
        print("\n".join(rest))


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


def ninja_problem() -> str:
    """torch.utils.cpp_extension runs `ninja` from PATH. A venv used without activation has it only beside
    its python, where activation would have put it on PATH: look there too. '' or what to do."""
    import shutil
    import sysconfig

    scripts = sysconfig.get_path("scripts")
    if shutil.which("ninja") is None and shutil.which("ninja", path=scripts):
        os.environ["PATH"] = scripts + os.pathsep + os.environ.get("PATH", "")
    if shutil.which("ninja") is None:
        return f"ninja is not installed for {sys.executable}: run `{sys.executable} -m pip install ninja`"
    return ""


def build_problem() -> str:
    """Why the C++ extension of step 3 cannot be built here (no compiler, no Python headers, no ninja), or ''."""
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        return f"no C++ compiler: {compiler!r} is not on PATH (install g++, or set CXX)"
    if not pathlib.Path(sysconfig.get_paths()["include"], "Python.h").is_file():
        return "no Python headers (Python.h): install your Python's development package"
    return ninja_problem()


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
