"""torch.autograd.Function with a `symbolic` method: choose the ONNX your Python or C++ op becomes.

Run: python test.py [--out DIR] [-v]

Steps 1-4, dynamo=True (the default): it ignores a Function's `symbolic` and traces `forward`, where
a C++ call and a scale factor read from a tensor fail; torch.onnx.ops.symbolic inside forward
writes the nodes instead (one node each, or one custom node with two outputs). Steps 5-8,
dynamo=False: it writes what `symbolic(g, ...)` builds in place of forward: MyRelu -> Clip, MyAdd ->
Mul + Add, a C++ extension, a bicubic upsampler -> Resize with a factor input. Step 9: one Function
for both exporters; step 10: backward, which export never needs.
Every python block of README.md is in this file.
"""

import io
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # the repository's harness.py
import harness  # the runner: the command line, the steps, the checks (harness.py)
from page_helpers import *  # noqa: F403 - the page's first block: common imports, helpers

# The page's imports, then its helpers, word for word (a pasted page starts with them) ---------

# region imports
import logging
import time

import torch.nn.functional as F
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun
from onnxruntime.capi._pybind_state import get_all_opkernel_def  # ORT's kernels: semi-private
# endregion

# 1. dynamo=True exports forward, not symbolic -------------------------------------------------


# region MyRelu
class MyRelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_output):  # needed for training only (step 10), never for export
        (x,) = ctx.saved_tensors
        return grad_output * (x > 0).to(grad_output.dtype)

    @staticmethod
    def symbolic(g, x):  # dynamo=False only (step 5)
        # Clip's min must have x's dtype; x.type().dtype() reads it from the traced graph.
        zero = g.op("Constant", value_t=torch.tensor(0, dtype=x.type().dtype()))
        return g.op("Clip", x, zero)


class MyReluModel(torch.nn.Module):
    def forward(self, x):
        return MyRelu.apply(x)
# endregion


# region MyAdd
class MyAdd(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        return 2 * a + b

    @staticmethod
    def symbolic(g, a, b):  # dynamo=False only (step 6)
        two = g.op("Constant", value_t=torch.tensor([2]))  # the source's constant: int64
        return g.op("Add", g.op("Mul", two, a), b)


class MyAddModel(torch.nn.Module):
    def forward(self, a, b):
        return MyAdd.apply(a, b)
# endregion


@harness.needs_torch("2.5", "on 2.4, dynamo=True is the older torch.onnx.dynamo_export")
def step1_dynamo_traces_forward():
    """dynamo=True exports forward, not symbolic"""
    # region forward_traced
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    for model, inputs, path in [
        (MyReluModel(), (a,), "my_relu_dynamo.onnx"),
        (MyAddModel(), (a, b), "my_add_dynamo.onnx"),
    ]:
        onnx_program = torch.onnx.export(model.eval(), inputs, dynamo=True, verbose=False)
        assert_onnx_program(onnx_program, rtol=0, atol=0)  # ONNX Runtime vs PyTorch, exactly
        onnx_program.save(path)
        ops = [node.op_type for node in onnx.load(path).graph.node]
        print(f"  {path}: symbolic ignored, forward traced: {ops}; matches PyTorch")
    # endregion

    unoptimized = []
    if harness.TORCH < (2, 7):  # 2.5, 2.6: export(optimize=False) by default (torch/onnx/__init__.py)
        harness.differs("export does not optimize: a Constant and a Cast stay before the ops")
        unoptimized = ["Constant", "Cast"]
    for path, ops in [("my_relu_dynamo.onnx", ["Max"]), ("my_add_dynamo.onnx", ["Mul", "Add"])]:
        harness.show(path)
        assert harness.op_types(path) == [*unoptimized, *ops], harness.op_types(path)


# 2. dynamo=True: a C++ extension and torch.onnx.ops.symbolic ----------------------------------

# region MY_ADD_CPP
MY_ADD_CPP = r"""
// 2a + b as a hand-written kernel computes it: allocate the output (an ATen call), then fill
// it element by element through raw pointers (no ATen call: nothing a tracer could record).
torch::Tensor my_add(torch::Tensor a, torch::Tensor b) {
  TORCH_CHECK(a.sizes() == b.sizes() && a.scalar_type() == torch::kFloat, "two float tensors");
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
# endregion

my_lib = None  # the compiled extension: step 2 builds it, step 7 uses it again


def build_my_lib():
    """Compile MY_ADD_CPP into my_lib (step 2, or step 7 where step 2 did not run)."""
    global my_lib
    problem = harness.build_problem()
    if problem:
        raise harness.Skip(problem)

    with harness.quiet():  # torch 2.4 prints "No CUDA runtime is found" at the import
        # region build
        logging.getLogger("torch.utils.cpp_extension").addFilter(
            lambda record: "No CUDA runtime" not in record.msg
        )
        from torch.utils import cpp_extension  # noqa: E402 - after the filter: the import logs it

        print("building the C++ extension: about a minute the first time, cached after")
        started = time.time()
        my_lib = cpp_extension.load_inline(
            name="onnx_tutorial_autograd_my_add",
            cpp_sources=MY_ADD_CPP,
            functions=["my_add", "my_add_aten"],  # pybind11 bindings: my_lib.my_add(a, b)
            verbose=False,
        )
        if os.path.getmtime(my_lib.__file__) >= started:
            print(f"  built {my_lib.__file__} in {time.time() - started:.0f} s")
        else:
            print(f"  reused the cached build {my_lib.__file__} ({time.time() - started:.1f} s)")
        # endregion


# region MyAddCpp
class MyAddCpp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        return my_lib.my_add(a, b)  # the exporter cannot see into C++; symbolic says what it is

    @staticmethod
    def symbolic(g, a, b):  # dynamo=False only (step 7)
        two = g.op("Constant", value_t=torch.tensor(2, dtype=a.type().dtype()))
        return g.op("Add", g.op("Mul", two, a), b)


class MyAddCppModel(torch.nn.Module):
    def forward(self, a, b):
        return MyAddCpp.apply(a, b)
# endregion


# region MyAddOnnxOps
class MyAddOnnxOps(torch.nn.Module):
    def forward(self, a, b):
        if torch.onnx.is_in_onnx_export():  # torch.onnx.export is running (either exporter)
            # Each call becomes exactly one ONNX node; dtype and shape describe its output.
            two = torch.tensor(2, dtype=a.dtype)
            doubled = torch.onnx.ops.symbolic("Mul", (two, a), dtype=a.dtype, shape=a.shape)
            return torch.onnx.ops.symbolic("Add", (doubled, b), dtype=a.dtype, shape=a.shape)
        return my_lib.my_add(a, b)  # outside the export: the C++ kernel, as before
# endregion


@harness.needs_torch("2.8", "torch.onnx.ops came with torch 2.8")
def step2_cpp_dynamo():
    """dynamo=True: a C++ extension and torch.onnx.ops.symbolic"""
    build_my_lib()

    warned = "Dynamo does not know how to trace the builtin"
    with harness.quiet(warned):  # the warning comes from the second try, strict=True
        # region cpp_call_fails
        a, b = torch.randn(2, 3), torch.randn(2, 3)
        torch.testing.assert_close(my_lib.my_add(a, b), 2 * a + b)  # the kernel itself is right
        with expect_error("but its data is not allocated yet"):
            torch.onnx.export(MyAddCppModel().eval(), (a, b), dynamo=True, verbose=False)
        # endregion
    show_the_two_tries(MyAddCppModel().eval(), (a, b), warned)

    # region my_add_onnx_ops
    onnx_program = torch.onnx.export(MyAddOnnxOps().eval(), (a, b), dynamo=True, verbose=False)
    onnx_program.save("my_add_onnx_ops_dynamo.onnx")
    ops = [node.op_type for node in onnx.load("my_add_onnx_ops_dynamo.onnx").graph.node]
    print(f"  my_add_onnx_ops_dynamo.onnx: torch.onnx.ops.symbolic wrote {ops}")
    (actual,) = run_ort("my_add_onnx_ops_dynamo.onnx", {"a": a.numpy(), "b": b.numpy()})
    compare("my_add_onnx_ops_dynamo.onnx", actual, MyAddOnnxOps()(a, b), rtol=0, atol=0)
    # endregion

    written = harness.show("my_add_onnx_ops_dynamo.onnx")
    opset = 18 if harness.TORCH < (2, 9) else 20  # dynamo=True's default opset (Notes)
    assert ops == ["Mul", "Add"] and harness.opsets_of(written)[""] == opset, ops
    # Why not assert_onnx_program: in the exported program, torch.onnx.ops.symbolic gives zeros
    placeholder = onnx_program.exported_program.module()(a, b)
    assert not placeholder.any(), placeholder
    print("  the exported program computes zeros in place of each torch.onnx.ops node")


def show_the_two_tries(model, inputs, warned):
    """dynamo=True tries torch.export.export with strict=False (no Dynamo), then strict=True
    (Dynamo), and raises the first try's error: each try's error and warnings, in that order."""
    tries = []
    torch._dynamo.utils.warn_once_cache.clear()  # Dynamo warns once per process: warn again here
    for strict in (False, True):
        with harness.quiet() as held:  # what each try logs and warns
            try:
                torch.export.export(model, inputs, strict=strict)
            except Exception as error:  # noqa: BLE001 - each try's error is what is shown
                failed = error
            else:
                raise AssertionError(f"torch.export.export(strict={strict}) did not fail")
        tries.append((str(failed), held))
    (first, first_held), (second, second_held) = tries
    assert "but its data is not allocated yet" in first, first
    assert warned not in first_held[0], first_held[0]  # no Dynamo in the first try
    assert "Attempted to call function marked as skipped" in second, second
    assert warned in second_held[0], second_held[0]
    print("  1st try, strict=False (no Dynamo): ... its data is not allocated yet.")
    print(f"  2nd try, strict=True: UserWarning: {warned} `...my_add.`")
    print("    then Unsupported: Attempted to call function marked as skipped")


# 3. dynamo=True: super-resolution with a run-time scale factor --------------------------------


# region BicubicUpsample
class BicubicUpsample(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scales):
        # scales is a tensor [1, 1, s_h, s_w], a model input: interpolate wants Python floats.
        factors = scales.tolist()[-2:]
        return F.interpolate(x, scale_factor=factors, mode="bicubic", align_corners=False)

    @staticmethod
    def symbolic(g, x, scales):  # dynamo=False only (step 8)
        no_roi = g.op("prim::Constant")  # Resize's optional roi input, left empty
        no_roi.setType(torch._C.OptionalType.ofTensor())
        return g.op(
            "Resize",
            x,
            no_roi,
            scales,  # a graph input, so the factor is chosen at run time
            coordinate_transformation_mode_s="pytorch_half_pixel",  # = align_corners=False
            mode_s="cubic",  # cubic_coeff_a defaults to -0.75, PyTorch's bicubic kernel too
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
# endregion


# region OnnxOpsUpsample
class OnnxOpsUpsample(torch.nn.Module):
    def forward(self, x, scales):
        if torch.onnx.is_in_onnx_export():
            n, c, h, w = x.shape
            # The output size depends on the scales' values: .item() makes it a symbolic size.
            out_h = (scales[2] * h).floor().to(torch.int64).item()
            out_w = (scales[3] * w).floor().to(torch.int64).item()
            torch._check(out_h > 0)  # what the Conv after it asks on torch 2.11 (not 2.13 on)
            torch._check(out_w > 0)
            return torch.onnx.ops.symbolic(
                "Resize",
                (x, None, scales),  # None: the optional roi input is left empty
                {"coordinate_transformation_mode": "pytorch_half_pixel", "mode": "cubic"},
                dtype=x.dtype,
                shape=(n, c, out_h, out_w),
            )
        factors = scales.tolist()[-2:]
        return F.interpolate(x, scale_factor=factors, mode="bicubic", align_corners=False)
# endregion


@harness.needs_torch("2.8", "torch.onnx.ops came with torch 2.8")
def step3_super_resolution_dynamo():
    """dynamo=True: super-resolution with a run-time scale factor"""
    # region super_resolution_inputs
    os.makedirs("failures", exist_ok=True)  # failure demonstrations go there
    x = torch.rand(1, 3, 16, 16)
    factor3 = torch.tensor([1.0, 1.0, 3.0, 3.0])
    sr_function = SuperResolution(FunctionUpsample()).eval()  # the source material's model
    # endregion

    if harness.TORCH < (2, 9):
        harness.differs(
            "torch.export fails, and dynamo=True falls back to draft export: the Function's"
            " model exports with its factor frozen at 3; default opset 18, not 20"
        )
        drafted = "it was not able to soundly produce a graph"
        with harness.quiet(drafted):  # draft export's report, logged
            with expect_error("Expected strategy 'TorchExportNonStrictStrategy'"):
                export_the_function_model(sr_function, x, factor3)
        # the model draft export wrote reads a constant factor and ignores its input
        path = "failures/super_resolution_function_dynamo.onnx"
        model = onnx.load(path)
        resize = next(node for node in model.graph.node if node.op_type == "Resize")
        frozen = next(i for i in model.graph.initializer if i.name == resize.input[2])
        scales = onnx.numpy_helper.to_array(frozen).tolist()
        print(f"  {path}: Resize reads the constant scales {scales}, not the input")
        assert scales == [1.0, 1.0, 3.0, 3.0], scales
        factor2 = torch.tensor([1.0, 1.0, 2.0, 2.0])
        (actual,) = run_ort(path, {"x": x.numpy(), "scales": factor2.numpy()})
        expected = sr_function(x, factor2)
        print(f"  at factor 2: ONNX Runtime gives {actual.shape}, PyTorch {tuple(expected.shape)}")
        assert actual.shape == (1, 3, 48, 48) and expected.shape == (1, 3, 32, 32), actual.shape
        sr_strategy = "TorchExportDraftExportStrategy"
    else:
        export_the_function_model(sr_function, x, factor3)
        sr_strategy = "TorchExportNonStrictStrategy"

    # region torch_export_fails
    with expect_error("must be tuple of floats, but found element of type SymFloat"):
        # what dynamo=True tries first, called yourself: its own error, on any torch
        torch.export.export(sr_function, (x, factor3), strict=False)
    # endregion

    if (2, 9) <= harness.TORCH < (2, 12):  # 2.8 gets there by draft export
        # fake_impls.py's conv() picks a backend when the batch size is known, and guards on the
        # data-dependent height and width there (2.12 on first check that every size is known)
        raise harness.NeedsTorch("2.12", "a Conv after a size read by .item() fails to export")

    with harness.quiet() as held:  # torch 2.8 logs its draft export, prints the graph it traced
        # region super_resolution_onnx_ops
        sr_dynamo = SuperResolution(OnnxOpsUpsample()).eval()
        onnx_program = torch.onnx.export(
            sr_dynamo, (x, factor3), dynamo=True, verbose=False, input_names=["x", "factor"],
            output_names=["y"],
        )
        onnx_program.save("super_resolution_dynamo.onnx")
        # endregion
    assert onnx_program._capture_strategy == sr_strategy, onnx_program._capture_strategy
    if sr_strategy.endswith("DraftExportStrategy"):  # where torch.export stopped: a conv2d
        traced = [ln.split(" = ", 1)[-1] for ln in held[0].splitlines() if " = torch.ops." in ln]
        assert traced[-1].startswith("torch.ops.aten.conv2d"), traced[-3:]

    # region super_resolution_onnx_ops_run
    for f in (2.0, 3.0):
        scales = torch.tensor([1.0, 1.0, f, f])
        feeds = {"x": x.numpy(), "factor": scales.numpy()}
        (actual,) = run_ort("super_resolution_dynamo.onnx", feeds)
        name = f"super_resolution_dynamo.onnx, factor {f:g}, {actual.shape}"
        compare(name, actual, sr_dynamo(x, scales), rtol=1e-5, atol=1e-6)
    # endregion

    model = harness.show("super_resolution_dynamo.onnx")
    assert [i.name for i in model.graph.input] == ["x", "factor"]
    assert [n.op_type for n in model.graph.node if n.op_type not in ("Conv", "Relu")] == ["Resize"]


def export_the_function_model(sr_function, x, factor3):
    # region function_model_fails
    with expect_error("must be tuple of floats, but found element of type SymFloat"):
        program = torch.onnx.export(sr_function, (x, factor3), dynamo=True, verbose=False)
        program.save("failures/super_resolution_function_dynamo.onnx")  # torch 2.8 only
        assert_onnx_program(program, rtol=1e-5, atol=1e-6)  # torch 2.8: see Notes
    # endregion


# 4. dynamo=True: two outputs as one custom node -----------------------------------------------


# region MinMaxOnnxOps
class MinMaxOnnxOps(torch.nn.Module):
    """The min and the max over the last axis as ONE node with two outputs, in our domain."""

    def forward(self, x):
        if torch.onnx.is_in_onnx_export():
            reduced = x.shape[:-1]
            low, high = torch.onnx.ops.symbolic_multi_out(
                "tutorial::MinMax",
                (x,),
                {"axis": -1},
                dtypes=(x.dtype, x.dtype),
                shapes=(reduced, reduced),
                version=1,  # the opset version the file imports for "tutorial"
            )
            return low, high
        return torch.aminmax(x, dim=-1)
# endregion


# region MinMax
class MinMax(OpRun):
    """tutorial::MinMax in Python, for ONNX's reference evaluator."""

    op_domain = "tutorial"  # the class name is the op type

    def _run(self, x, axis=None):
        return (x.min(axis=axis), x.max(axis=axis))
# endregion


@harness.needs_torch("2.8", "torch.onnx.ops came with torch 2.8")
def step4_two_outputs():
    """dynamo=True: two outputs as one custom node"""
    # region min_max_node
    m = torch.randn(2, 3, 5)
    onnx_program = torch.onnx.export(
        MinMaxOnnxOps().eval(), (m,), dynamo=True, verbose=False, output_names=["low", "high"]
    )
    onnx_program.save("min_max_onnx_ops_dynamo.onnx")
    model = onnx.load("min_max_onnx_ops_dynamo.onnx")
    onnx.checker.check_model(model, full_check=True)  # checks the import of "tutorial", not the op
    (node,) = model.graph.node
    print(f"  one node, {node.domain}.{node.op_type}, outputs {list(node.output)}")
    low, high = ReferenceEvaluator(model, new_ops=[MinMax]).run(None, {"x": m.numpy()})
    expected = MinMaxOnnxOps()(m)
    np.testing.assert_array_equal(low, expected.min.numpy())
    np.testing.assert_array_equal(high, expected.max.numpy())
    print("  min_max_onnx_ops_dynamo.onnx: ONNX's reference evaluator matches PyTorch exactly")
    with expect_error("MinMax(-1) is not a registered function/op"):
        run_ort("min_max_onnx_ops_dynamo.onnx", {"x": m.numpy()})  # no kernel in ONNX Runtime
    # endregion

    harness.show("min_max_onnx_ops_dynamo.onnx")
    assert [(o.domain, o.version) for o in model.opset_import if o.domain] == [("tutorial", 1)]
    assert [o.name for o in model.graph.output] == ["low", "high"] == list(node.output)


# 5. dynamo=False: MyRelu -> Clip from symbolic ------------------------------------------------


# region NoSymbolic
class NoSymbolic(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clamp(min=0)


class NoSymbolicModel(torch.nn.Module):
    def forward(self, x):
        return NoSymbolic.apply(x)
# endregion


def step5_my_relu():
    """dynamo=False: MyRelu -> Clip from symbolic"""
    # region my_relu_clip
    x = torch.randn(2, 3, 4)
    torch.onnx.export(
        MyReluModel(), (x,), "my_relu.onnx", dynamo=False, opset_version=17, input_names=["x"]
    )
    (actual,) = run_ort("my_relu.onnx", {"x": x.numpy()})
    compare("my_relu.onnx", actual, MyReluModel()(x), rtol=0, atol=0)
    # endregion

    harness.show("my_relu.onnx")
    assert harness.op_types("my_relu.onnx") == ["Constant", "Clip"]

    with harness.quiet():  # torch 2.15 also prints the graphs it had built when the export failed
        # region no_symbolic_fails
        # autograd_inlining=False (deprecated) keeps each Function as one prim::PythonOp node
        with expect_error("Couldn't export Python operator NoSymbolic"):
            torch.onnx.export(
                NoSymbolicModel(), (x,), "failures/no_symbolic.onnx", dynamo=False,
                opset_version=17, autograd_inlining=False,
            )
        # endregion
    kept = io.BytesIO()  # the fix: MyRelu, with its symbolic, exports the same way as Clip
    torch.onnx.export(MyReluModel(), (x,), kept, dynamo=False, autograd_inlining=False)
    ops = [n.op_type for n in onnx.load_from_string(kept.getvalue()).graph.node]
    assert ops == ["Constant", "Clip"], ops
    print(f"  MyRelu with autograd_inlining=False: {ops} (its symbolic)")


# 6. dynamo=False: MyAdd (2a + b) and the dtype of constants -----------------------------------


# region ClipFloat32Min
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
# endregion


def step6_my_add():
    """dynamo=False: MyAdd (2a + b) and the dtype of constants"""
    # region my_add_constant_dtype
    for path, dtype in [
        ("my_add_float32.onnx", torch.float32),
        ("my_add_float64.onnx", torch.float64),
    ]:
        a, b = torch.randn(2, 3, dtype=dtype), torch.randn(2, 3, dtype=dtype)
        torch.onnx.export(
            MyAddModel(), (a, b), path, dynamo=False, opset_version=17, input_names=["a", "b"]
        )
        (actual,) = run_ort(path, {"a": a.numpy(), "b": b.numpy()})
        compare(path, actual, MyAddModel()(a, b), rtol=0, atol=0)
        two = onnx.numpy_helper.to_array(onnx.load(path).graph.node[0].attribute[0].t)
        print(f"  {path}: the exporter stored the constant as {two.dtype}, not int64")
    # endregion

    for path, dtype in [("my_add_float32.onnx", np.float32), ("my_add_float64.onnx", np.float64)]:
        model = harness.show(path)
        assert harness.op_types(path) == ["Constant", "Mul", "Add"], harness.op_types(path)
        two = onnx.numpy_helper.to_array(model.graph.node[0].attribute[0].t)
        assert two.dtype == dtype and two.tolist() == [2], two

    with harness.quiet() as held:  # torch 2.4's exporter warns about this model
        # region clip_float32_min_export
        x64 = torch.randn(2, 3, dtype=torch.float64)
        torch.onnx.export(
            ClipFloat32MinModel(), (x64,), "failures/clip_float32_min_float64_input.onnx",
            dynamo=False, opset_version=17, input_names=["x"],
        )
        # endregion
    warning = "The exported ONNX model failed ONNX shape inference"
    if (2, 0) <= harness.TORCH < (2, 5):  # the export checks what it wrote; 2.5 dropped that, and
        # 1.13's check (torch/onnx/utils.py, _check_onnx_proto) passes this model without a word
        assert warning in held[0], held[0]
        harness.differs(f"the export itself warns: {warning}")
    else:
        assert warning not in held[0], held[0]  # the exporter writes the model without a word

    # region clip_float32_min_fails
    failed = "failures/clip_float32_min_float64_input.onnx"
    with expect_error("min has inconsistent type tensor(float)"):
        onnx.checker.check_model(onnx.load(failed), full_check=True)
    with expect_error("Type parameter (T) of Optype (Clip) bound to different types"):
        run_ort(failed, {"x": x64.numpy()})
    # endregion

    # region my_relu_float64
    torch.onnx.export(
        MyReluModel(), (x64,), "my_relu_float64.onnx", dynamo=False, opset_version=17,
        input_names=["x"],
    )
    (actual,) = run_ort("my_relu_float64.onnx", {"x": x64.numpy()})
    compare("my_relu_float64.onnx", actual, MyReluModel()(x64), rtol=0, atol=0)
    # endregion

    model = harness.show("my_relu_float64.onnx")
    zero = onnx.numpy_helper.to_array(model.graph.node[0].attribute[0].t)
    assert zero.dtype == np.float64, zero.dtype  # MyRelu's symbolic: the constant takes x's dtype


# 7. dynamo=False: a C++ extension wrapped in a Function ---------------------------------------


# region DirectCall
class DirectCall(torch.nn.Module):
    def __init__(self, kernel) -> None:
        super().__init__()
        self.kernel = kernel  # a C++ function, called as it is: no Function around it

    def forward(self, a, b):
        return self.kernel(a, b)
# endregion


def step7_cpp_function():
    """dynamo=False: a C++ extension wrapped in a Function"""
    if my_lib is None:  # step 2 did not run (torch < 2.8): build the extension here
        build_my_lib()

    # region cpp_direct_call
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    torch.onnx.export(
        DirectCall(my_lib.my_add), (a, b), "failures/my_add_cpp_direct.onnx", dynamo=False,
        opset_version=17, input_names=["a", "b"],
    )
    direct = onnx.load("failures/my_add_cpp_direct.onnx")
    constant = onnx.numpy_helper.to_array(direct.graph.node[0].attribute[0].t)
    inputs = [i.name for i in direct.graph.input]
    print(f"  my_add_cpp_direct.onnx: inputs {inputs}, output Constant {constant.tolist()}")
    # endregion

    harness.show("failures/my_add_cpp_direct.onnx")
    assert not inputs and harness.op_types("failures/my_add_cpp_direct.onnx") == ["Constant"]
    assert not constant.any(), f"expected zeros (empty_like exported as zeros), got {constant}"

    traced_as = "does not match the corresponding output of the Python function"
    with harness.quiet(traced_as):  # torch.jit.trace runs its graph again, to check it
        # region cpp_traced
        # What dynamo=False's tracer records: each ATen op that runs, also those C++ code calls
        for name in ("my_add", "my_add_aten"):
            graph = torch.jit.trace(getattr(my_lib, name), (a, b)).graph
            kinds = [node.kind() for node in graph.nodes() if node.kind() != "prim::Constant"]
            print(f"  my_lib.{name} traced as {kinds}")
        # endregion
    print(f"  torch.jit.trace warned: Output nr 1. of the traced function {traced_as}")

    # region aten_direct_call
    torch.onnx.export(
        DirectCall(my_lib.my_add_aten), (a, b), "my_add_aten_direct.onnx", dynamo=False,
        opset_version=17, input_names=["a", "b"],
    )
    (actual,) = run_ort("my_add_aten_direct.onnx", {"a": a.numpy(), "b": b.numpy()})
    compare("my_add_aten_direct.onnx", actual, 2 * a + b, rtol=0, atol=0)
    # endregion

    harness.show("my_add_aten_direct.onnx")
    assert harness.op_types("my_add_aten_direct.onnx")[-2:] == ["Mul", "Add"]

    # region my_add_cpp_function
    torch.onnx.export(
        MyAddCppModel(), (a, b), "my_add_cpp.onnx", dynamo=False, opset_version=17,
        input_names=["a", "b"],
    )
    (actual,) = run_ort("my_add_cpp.onnx", {"a": a.numpy(), "b": b.numpy()})
    compare("my_add_cpp.onnx", actual, MyAddCppModel()(a, b), rtol=0, atol=0)
    # endregion

    harness.show("my_add_cpp.onnx")  # standard ops only: plain ONNX Runtime runs it
    assert harness.op_types("my_add_cpp.onnx") == ["Constant", "Mul", "Add"]


# 8. dynamo=False: super-resolution, Resize with the factor as an input ------------------------


# region upsample_atol
def upsample_atol(x):
    """How far ONNX Runtime's cubic Resize may be from torch's bicubic interpolate on x
    (float32). The derivation: Notes, Tolerances."""
    eps = torch.finfo(torch.float32).eps
    slope = 3 * 1.375  # the cubic kernel's largest sum of |w'| times its largest sum of |w|
    # 16 eps: rounding 16 weights and their sum; 2 * slope * eps * size: the sampling position,
    # rounded differently (up to eps * size), moves the result by at most slope, per axis
    bound = (16 + 2 * slope * max(x.shape[-2:])) * eps * x.abs().max().item()
    return float(f"{bound:.2g}")  # two significant digits: the margin is wide
# endregion


def step8_super_resolution():
    """dynamo=False: super-resolution, Resize with the factor as an input"""
    with harness.quiet("Converting a tensor to a Python list"):  # TracerWarning: tolist()
        # region bicubic_upsample_resize
        x = torch.rand(1, 3, 16, 16)
        factor3 = torch.tensor([1.0, 1.0, 3.0, 3.0])
        torch.onnx.export(
            FunctionUpsample(), (x, factor3), "bicubic_upsample.onnx", dynamo=False,
            opset_version=17, input_names=["x", "factor"], output_names=["y"],
        )
        for f in (2.0, 3.0):
            scales = torch.tensor([1.0, 1.0, f, f])
            feeds = {"x": x.numpy(), "factor": scales.numpy()}
            (actual,) = run_ort("bicubic_upsample.onnx", feeds)
            name, expected = f"bicubic_upsample.onnx, factor {f:g}", FunctionUpsample()(x, scales)
            compare(name, actual, expected, rtol=0, atol=upsample_atol(x))
        # endregion

    harness.show("bicubic_upsample.onnx")
    assert harness.op_types("bicubic_upsample.onnx") == ["Resize"]

    with harness.quiet("Converting a tensor to a Python list"):
        # region super_resolution_export
        sr = SuperResolution(FunctionUpsample()).eval()
        torch.onnx.export(
            sr,
            (x, factor3),
            "super_resolution.onnx",
            dynamo=False,
            opset_version=17,
            input_names=["x", "factor"],
            output_names=["y"],
            # name y's sizes: left alone, the exporter declares y as [Convy_dim_0, 3,
            # Convy_dim_0, ...], as if height had to equal batch
            dynamic_axes={"x": {0: "batch"}, "y": {0: "batch", 2: "height", 3: "width"}},
        )
        # endregion
    # region super_resolution_run
    for f in (2.0, 3.0):
        scales = torch.tensor([1.0, 1.0, f, f])
        (actual,) = run_ort("super_resolution.onnx", {"x": x.numpy(), "factor": scales.numpy()})
        name = f"super_resolution.onnx, factor {f:g}, {actual.shape}"
        compare(name, actual, sr(x, scales), rtol=1e-5, atol=1e-6)
    # endregion

    model = harness.show("super_resolution.onnx")
    assert [i.name for i in model.graph.input] == ["x", "factor"]
    assert harness.output_dims(model) == ["batch", 3, "height", "width"]
    (resize,) = [node for node in model.graph.node if node.op_type == "Resize"]
    assert resize.input[2] == "factor", resize.input  # the scales come from the model input


# 9. One Function for both exporters -----------------------------------------------------------


# region MyLeakyRelu
class MyLeakyRelu(torch.autograd.Function):
    """One Function, one LeakyRelu node, under both exporters."""

    @staticmethod
    def forward(ctx, x, alpha: float):
        # dynamo=True traces forward: write the node here. dynamo=False traces forward too
        # (then puts symbolic's nodes in its place), and torch.onnx.ops fails under its tracer.
        if torch.onnx.is_in_onnx_export() and not torch.jit.is_tracing():
            attributes = {"alpha": alpha}
            return torch.onnx.ops.symbolic(
                "LeakyRelu", (x,), attributes, dtype=x.dtype, shape=x.shape
            )
        return F.leaky_relu(x, alpha)

    @staticmethod
    def symbolic(g, x, alpha: float):
        return g.op("LeakyRelu", x, alpha_f=alpha)


class MyLeakyReluModel(torch.nn.Module):
    def forward(self, x):
        return MyLeakyRelu.apply(x, 0.1)
# endregion


# region MyLeakyReluUnguarded
class MyLeakyReluUnguarded(MyLeakyRelu):
    """The same Function without `not torch.jit.is_tracing()`."""

    @staticmethod
    def forward(ctx, x, alpha: float):
        if torch.onnx.is_in_onnx_export():
            attributes = {"alpha": alpha}
            return torch.onnx.ops.symbolic(
                "LeakyRelu", (x,), attributes, dtype=x.dtype, shape=x.shape
            )
        return F.leaky_relu(x, alpha)


class MyLeakyReluUnguardedModel(torch.nn.Module):
    def forward(self, x):
        return MyLeakyReluUnguarded.apply(x, 0.1)
# endregion


@harness.needs_torch("2.8", "torch.onnx.ops came with torch 2.8")
def step9_both_exporters():
    """One Function for both exporters"""
    # region leaky_relu_both_exporters
    x = torch.randn(2, 3, 4)
    torch.onnx.export(
        MyLeakyReluModel(), (x,), "my_leaky_relu.onnx", dynamo=False, input_names=["x"]
    )
    onnx_program = torch.onnx.export(MyLeakyReluModel().eval(), (x,), dynamo=True, verbose=False)
    onnx_program.save("my_leaky_relu_dynamo.onnx")
    nodes = []
    for path in ("my_leaky_relu.onnx", "my_leaky_relu_dynamo.onnx"):
        (node,) = onnx.load(path).graph.node
        (alpha,) = node.attribute
        value = onnx.helper.get_attribute_value(alpha)
        nodes.append((node.domain, node.op_type, alpha.name, alpha.type, value))
        print(f"  {path}: one node, {node.op_type} {alpha.name}={value}")
        (actual,) = run_ort(path, {"x": x.numpy()})
        compare(path, actual, MyLeakyReluModel()(x), rtol=0, atol=0)
    assert nodes[0] == nodes[1], nodes  # the same node, whichever exporter wrote it
    # endregion
    assert nodes[0][3] == onnx.AttributeProto.FLOAT, nodes  # alpha is a float attribute
    for path in ("my_leaky_relu.onnx", "my_leaky_relu_dynamo.onnx"):
        model = harness.show(path)
        assert [i.name for i in model.graph.input] == ["x"], model.graph.input

    # region leaky_relu_unguarded_fails
    with expect_error("unsupported input list type: Tensor?"):
        path = "failures/my_leaky_relu_unguarded.onnx"
        torch.onnx.export(MyLeakyReluUnguardedModel(), (x,), path, dynamo=False)
    # endregion


# 10. Does a Function need backward? -----------------------------------------------------------


def step10_backward():
    """Does a Function need backward?"""
    # region backward_needed
    a = torch.randn(3, requires_grad=True)
    with expect_error("You must implement either the backward or vjp method"):
        MyAdd.apply(a, torch.randn(3)).sum().backward()

    x = torch.randn(4, 5, dtype=torch.float64)
    x = (x + 0.1 * x.sign()).requires_grad_()  # keep away from the kink at 0
    print("  gradcheck(MyRelu.apply, (x,)):", torch.autograd.gradcheck(MyRelu.apply, (x,)))
    # endregion


# 11. A float16 or bfloat16 model: LeakyRelu between Casts -----------------------------------


# region check_cpu_kernels
def check_cpu_kernels(path, op_type):
    """Right after the export: the dtype each op_type node reads against the types ONNX
    Runtime's CPU kernels for it take. (ONNX's schema, which the full checker asks, may list
    a type no kernel takes.)"""
    takes = {t for k in get_all_opkernel_def() if k.provider == "CPUExecutionProvider"
             and (k.domain, k.op_name) == ("", op_type) for ts in k.type_constraints.values()
             for t in ts}
    model = onnx.shape_inference.infer_shapes(onnx.load(path), strict_mode=True)
    declared = {v.name: v.type for v in [*model.graph.input, *model.graph.value_info]}
    for node in model.graph.node:
        if node.op_type != op_type:
            continue
        elem = declared[node.input[0]].tensor_type.elem_type
        dtype = f"tensor({onnx.TensorProto.DataType.Name(elem).lower()})"
        if dtype not in takes:
            raise TypeError(f"{op_type} reads {dtype}: no CPU kernel for it {sorted(takes)}")
# endregion


# region MyLeakyReluCast
class MyLeakyReluCast(MyLeakyRelu):
    """MyLeakyRelu with its node in float32, between Casts, whatever the model's dtype."""

    @staticmethod
    def forward(ctx, x, alpha: float):
        if torch.onnx.is_in_onnx_export() and not torch.jit.is_tracing():
            y = torch.onnx.ops.symbolic(
                "LeakyRelu", (x.float(),), {"alpha": alpha}, dtype=torch.float32, shape=x.shape
            )
            return y.to(x.dtype)  # x.float() and .to() are exported as Casts
        return F.leaky_relu(x, alpha)

    @staticmethod
    def symbolic(g, x, alpha: float):
        x32 = g.op("Cast", x, to_i=onnx.TensorProto.FLOAT)
        y = g.op("LeakyRelu", x32, alpha_f=alpha)
        y.setType(x.type().with_dtype(torch.float32))
        return g.op("CastLike", y, x)  # back to x's dtype (CastLike: opset 15 or later)


class MyLeakyReluCastModel(torch.nn.Module):
    def forward(self, x):
        return MyLeakyReluCast.apply(x, 0.1)
# endregion


@harness.needs_torch("2.8", "torch.onnx.ops came with torch 2.8")
def step11_half_precision():
    """A float16 or bfloat16 model: LeakyRelu between Casts"""
    # region leaky_relu_bfloat16_fails
    x = torch.randn(2, 3, 4).to(torch.bfloat16)
    onnx_program = torch.onnx.export(MyLeakyReluModel().eval(), (x,), dynamo=True, verbose=False)
    path = "failures/my_leaky_relu_bfloat16_dynamo.onnx"
    onnx_program.save(path)
    onnx.checker.check_model(path, full_check=True)  # ONNX's LeakyRelu takes bfloat16
    print(f"  {path}: LeakyRelu on bfloat16, full check passed")
    with expect_error("Could not find an implementation for"):  # LeakyRelu(16); 2.8: Less(13)
        run_ort_torch(path, [x])
    with expect_error("LeakyRelu reads tensor(bfloat16): no CPU kernel"):
        check_cpu_kernels(path, "LeakyRelu")  # right after the export: caught there
    # endregion

    # region leaky_relu_between_casts
    model = MyLeakyReluCastModel().eval()
    for dtype in (torch.float16, torch.bfloat16):
        x = torch.randn(2, 3, 4).to(dtype)
        name = str(dtype).removeprefix("torch.")
        paths = [f"my_leaky_relu_{name}{exporter}.onnx" for exporter in ("", "_dynamo")]
        torch.onnx.export(model, (x,), paths[0], dynamo=False, input_names=["x"])
        onnx_program = torch.onnx.export(model, (x,), dynamo=True, verbose=False)
        onnx_program.save(paths[1])
        for path in paths:
            onnx.checker.check_model(path, full_check=True)
            check_cpu_kernels(path, "LeakyRelu")
            (actual,) = run_ort_torch(path, [x])  # DLPack: bfloat16 in and out
            assert actual.dtype == dtype and torch.equal(actual, model(x))  # exact: see below
            ops = [node.op_type for node in onnx.load(path).graph.node]
            print(f"  {path}: {ops}, equal to PyTorch's {name}")
    # endregion

    for name in ("float16", "bfloat16"):
        for path in [f"my_leaky_relu_{name}{exporter}.onnx" for exporter in ("", "_dynamo")]:
            harness.show(path)
            ops = harness.op_types(path)
            assert ops == ["Cast", "LeakyRelu", "Cast" if "dynamo" in path else "CastLike"], ops
            graph = onnx.load(path).graph
            dtypes = {v.type.tensor_type.elem_type for v in [*graph.input, *graph.output]}
            assert dtypes == {getattr(onnx.TensorProto, name.upper())}, dtypes  # in and out
    x = torch.randn(2, 3, 4)  # a float32 model keeps its one node: the Casts are no-ops, gone
    program = torch.onnx.export(model, (x,), dynamo=True, verbose=False)
    assert [n.op_type for n in program.model_proto.graph.node] == ["LeakyRelu"]


# ---------------------------------------------------------------------------------------------

KEPT = {  # what each step writes and claims valid; failure demonstrations below
    1: ("my_relu_dynamo.onnx", "my_add_dynamo.onnx"),
    2: ("my_add_onnx_ops_dynamo.onnx",),
    3: ("super_resolution_dynamo.onnx",),
    4: ("min_max_onnx_ops_dynamo.onnx",),
    5: ("my_relu.onnx",),
    6: ("my_add_float32.onnx", "my_add_float64.onnx", "my_relu_float64.onnx"),
    7: ("my_add_aten_direct.onnx", "my_add_cpp.onnx"),
    8: ("bicubic_upsample.onnx", "super_resolution.onnx"),
    9: ("my_leaky_relu.onnx", "my_leaky_relu_dynamo.onnx"),
    11: (
        "my_leaky_relu_float16.onnx", "my_leaky_relu_float16_dynamo.onnx",
        "my_leaky_relu_bfloat16.onnx", "my_leaky_relu_bfloat16_dynamo.onnx",
    ),
}
FAILURES = (
    "failures/super_resolution_function_dynamo.onnx",  # written on torch 2.8 only: draft export
    "failures/no_symbolic.onnx",
    "failures/clip_float32_min_float64_input.onnx",
    "failures/my_add_cpp_direct.onnx",
    "failures/my_leaky_relu_unguarded.onnx",
    "failures/my_leaky_relu_bfloat16_dynamo.onnx",
)
PASSED = "every model in {out} checked and matched PyTorch (ONNX Runtime or onnx.reference)"
# For ERRORS.md: part of each reproduced error -> (what raises it, its cause[, fixing step])
CAUSES = {
    "but its data is not allocated yet": (
        "dynamo=True",
        "`torch.export` runs the Function's C++ call on fake tensors, which have no data: write "
        "the nodes with `torch.onnx.ops.symbolic`, or make it a custom op with a fake kernel",
    ),
    "must be tuple of floats, but found element of type SymFloat": (
        "dynamo=True",
        "`torch.export` traces a scale factor read from a tensor as a symbolic float, which "
        "`upsample_bicubic2d` refuses: write the `Resize` with `torch.onnx.ops.symbolic`",
    ),
    "Expected strategy 'TorchExportNonStrictStrategy'": (
        "assert_onnx_program",
        "torch 2.8: `torch.export` failed and `dynamo=True` fell back to draft export, which "
        "froze the factor; the default `strategy` check refuses the program",
    ),
    "MinMax(-1) is not a registered function/op": (
        "ONNX Runtime",
        "a custom-domain node (`tutorial::MinMax`) with no kernel in ONNX Runtime: register one, "
        "or check the model in `onnx.reference` with a Python op",
    ),
    "Couldn't export Python operator NoSymbolic": (
        "dynamo=False",
        "a Function kept as one `prim::PythonOp` node (`autograd_inlining=False`) has no "
        "`symbolic`: give it a static `symbolic(g, ...)`",
    ),
    "min has inconsistent type tensor(float)": (
        "onnx.checker",
        "`symbolic` wrote `Clip`'s `min` as float32 for a float64 input: build constants in the "
        "input's dtype",
    ),
    "Type parameter (T) of Optype (Clip) bound to different types": (
        "ONNX Runtime",
        "`Clip` got a float64 input and a float32 `min`: build constants in the input's dtype",
    ),
    "unsupported input list type: Tensor?": (
        "dynamo=False",
        "`torch.onnx.ops.symbolic` ran under the TorchScript tracer: call it only when `not "
        "torch.jit.is_tracing()` and let `symbolic` write the node",
    ),
    "Could not find an implementation for LeakyRelu(16)": (
        "ONNX Runtime",
        "its CPU `LeakyRelu` takes float32 only (float16 it casts around by itself, bfloat16 not): "
        "write the node on float32 between Casts",
    ),
    "Could not find an implementation for Less(13)": (
        "ONNX Runtime",
        "the same on torch 2.8 (opset 18): the bfloat16 node ONNX Runtime names is a `Less` it "
        "made itself from the `LeakyRelu` (the node has no name); no CPU kernel for it either",
    ),
    "LeakyRelu reads tensor(bfloat16): no CPU kernel": (
        "ONNX Runtime",
        "the page's `check_cpu_kernels`, from ONNX Runtime's kernel list, right after the export: "
        "a `LeakyRelu` on bfloat16, which the full checker passes (ONNX's schema lists it)",
    ),
    "You must implement either the backward or vjp method": (
        "PyTorch",
        "`backward()` through a Function without `backward`: export never calls it, training does",
    ),
}


def main(argv: list[str] | None = None) -> int:
    return harness.run(
        __file__, globals(), kept=KEPT, failures=FAILURES, causes=CAUSES, argv=argv, passed=PASSED
    )


if __name__ == "__main__":
    sys.exit(main())
