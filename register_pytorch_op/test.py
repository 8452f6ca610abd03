"""A C++ PyTorch op exported as one custom ONNX node with two outputs.

Run: python test.py [--out DIR]

Builds `cst::dual_residual(x, y, alpha) -> (x*alpha - y, y*alpha - x)` with
torch.utils.cpp_extension, exports it as one `rknn_cst::cstDualResidual` node with the
TorchScript-based exporter (dynamo=False), runs it in ONNX Runtime with a Python kernel, records
attributes of every kind from a second op, and then keeps the single node under the
torch.export-based exporter (dynamo=True) with TORCH_LIBRARY, a fake kernel and
custom_translation_table. Needs a C++ compiler; without one it exits 77 (SKIP).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import shutil
import sys
import sysconfig
import tempfile
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import onnxscript
import torch
import torch.utils.cpp_extension
from onnxruntime_extensions import PyCustomOpDef, get_library_path, onnx_op

HERE = pathlib.Path(__file__).resolve().parent
SKIP = 77  # exit status for "cannot run here"

try:  # the TorchScript-based exporter's API; a future torch may drop it
    from torch.onnx import register_custom_op_symbolic
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
    """The full ONNX checker (with shape inference), then the graph as text."""
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    print(onnx.printer.to_text(model.graph))
    return model


def run_ort(path: pathlib.Path, feeds: dict[str, np.ndarray], custom_ops: bool = False) -> list[np.ndarray]:
    options = ort.SessionOptions()
    if custom_ops:
        # The Python kernels declared with @onnx_op live in onnxruntime-extensions' library.
        options.register_custom_ops_library(get_library_path())
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def compare(actual: np.ndarray, expected: torch.Tensor, rtol: float, atol: float) -> None:
    np.testing.assert_allclose(actual, expected.detach().numpy(), rtol=rtol, atol=atol)
    print(f"  ONNX Runtime matches PyTorch (rtol={rtol}, atol={atol})")


@contextlib.contextmanager
def captured_stderr(sink: list[str]):
    """Capture file descriptor 2: the exporter's C++ warnings bypass Python's warnings module."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            sink.append(tmp.read().decode(errors="replace"))


def input_feeds(path: pathlib.Path, tensors) -> dict[str, np.ndarray]:
    names = [i.name for i in onnx.load(str(path)).graph.input]
    return {name: t.numpy() for name, t in zip(names, tensors, strict=True)}


def output_dims(output: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in output.type.tensor_type.shape.dim]


# ---------------------------------------------------------------------------------------------
# The C++ source. load_inline joins these strings into one file and prepends torch/extension.h.
# ---------------------------------------------------------------------------------------------

# A name no other example's build uses: builds are cached per name in ~/.cache/torch_extensions.
EXTENSION_NAME = "onnx_tutorial_register_pytorch_op"

DUAL_RESIDUAL_CPP = r"""
#include <torch/script.h>

// Two outputs from two tensors and a float.
std::tuple<torch::Tensor, torch::Tensor> dual_residual(torch::Tensor x, torch::Tensor y, double alpha) {
  return {x * alpha - y, y * alpha - x};
}

// The source's registration: the schema is inferred from the C++ signature, and the function
// becomes a catch-all kernel, which PyTorch files under CompositeImplicitAutograd.
static auto registry = torch::RegisterOperators().op("cst::dual_residual", &dual_residual);
"""

FOO_CPP = r"""
#include <string>
#include <vector>

// One argument of each attribute kind: float, int, string, float list, int list.
torch::Tensor foo_forward(torch::Tensor x, torch::Tensor y, double alpha, int64_t beta, std::string mode,
                          std::vector<double> scales, std::vector<int64_t> dims) {
  auto z = mode == "sub" ? x * alpha - y * beta : x * alpha + y * beta;
  auto per_channel = torch::tensor(scales, z.options()).view({1, -1, 1, 1});
  return (z * per_channel).sum(dims, /*keepdim=*/true);
}

static auto foo_registry = torch::RegisterOperators().op("cst::foo_forward", &foo_forward);
"""

TORCH_LIBRARY_CPP = r"""
// The modern registration: an explicit schema, and the kernel under a real dispatch key (CPU).
TORCH_LIBRARY(cst_lib, m) {
  m.def("dual_residual(Tensor x, Tensor y, float alpha) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(cst_lib, CPU, m) {
  m.impl("dual_residual", &dual_residual);
}
"""


def missing_build_requirement() -> str:
    """Why the C++ ops cannot be built here, or "" when they can."""
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        return f"no C++ compiler: {compiler!r} is not on PATH (install g++, or set CXX)"
    if not pathlib.Path(sysconfig.get_paths()["include"], "Python.h").is_file():
        return "no Python headers (Python.h): install your Python's development package"
    if not torch.utils.cpp_extension.is_ninja_available():
        return "ninja is not installed: pip install ninja"
    return ""


# ---------------------------------------------------------------------------------------------
# 1. Build the op
# ---------------------------------------------------------------------------------------------


def step1_build() -> None:
    print("\n== 1. Build cst::dual_residual with torch.utils.cpp_extension.load_inline ==")
    # Why is_python_module=False: the ops register themselves when the library loads, so there is
    # nothing to bind with pybind11 (the source's functions="dual_residual" is not needed).
    torch.utils.cpp_extension.load_inline(
        name=EXTENSION_NAME,
        cpp_sources=[DUAL_RESIDUAL_CPP, FOO_CPP, TORCH_LIBRARY_CPP],
        is_python_module=False,
        verbose=False,
    )
    x, y = torch.randn(2, 3, 4), torch.randn(2, 3, 4)
    r1, r2 = torch.ops.cst.dual_residual(x, y, 0.5)
    torch.testing.assert_close(r1, x * 0.5 - y)
    torch.testing.assert_close(r2, y * 0.5 - x)
    print(f"  torch.ops.cst.dual_residual: {torch.ops.cst.dual_residual.default._schema}")


class DualResidualModel(torch.nn.Module):
    def __init__(self, alpha: float = 0.5) -> None:
        super().__init__()
        self.alpha = alpha

    def forward(self, x, y):
        return torch.ops.cst.dual_residual(x, y, self.alpha)


def dual_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(2, 3, 4), torch.randn(2, 3, 4)


# ---------------------------------------------------------------------------------------------
# 2. Reproduce the failure
# ---------------------------------------------------------------------------------------------


def step2_reproduce(out: pathlib.Path) -> None:
    print("\n== 2. Export with no symbolic (dynamo=False) ==")
    model, inputs = DualResidualModel().eval(), dual_inputs()
    reproduce(
        "cst::dual_residual has no symbolic",
        lambda: torch.onnx.export(model, inputs, out / "failures/dual_residual.onnx", dynamo=False, opset_version=12),
        "unrecognized namespace cst::dual_residual",
    )


# ---------------------------------------------------------------------------------------------
# 3. Export it as one node
# ---------------------------------------------------------------------------------------------


@parse_args("v", "v", "f")
def dual_residual_untyped(g, x, y, alpha):
    return g.op("rknn_cst::cstDualResidual", x, y, alpha_f=alpha, outputs=2)


@parse_args("v", "v", "f")
def dual_residual_symbolic(g, x, y, alpha):
    # outputs=2 makes g.op return one Value per output; each needs its type, as ONNX cannot infer it.
    out_x, out_y = g.op("rknn_cst::cstDualResidual", x, y, alpha_f=alpha, outputs=2)
    out_x.setType(x.type())
    out_y.setType(y.type())
    return out_x, out_y


def step3_export_one_node(out: pathlib.Path) -> None:
    print("\n== 3. One rknn_cst::cstDualResidual node (dynamo=False) ==")
    model, inputs = DualResidualModel().eval(), dual_inputs()
    names = {"input_names": ["x", "y"], "output_names": ["x_res", "y_res"]}
    for symbolic, filename, typed in [
        (dual_residual_untyped, "dual_residual_untyped.onnx", False),
        (dual_residual_symbolic, "dual_residual.onnx", True),
    ]:
        print(f"\n-- {symbolic.__name__} -> {filename}")
        register_custom_op_symbolic("cst::dual_residual", symbolic, 12)
        stderr: list[str] = []
        with captured_stderr(stderr):
            torch.onnx.export(
                model, inputs, out / filename, dynamo=False, opset_version=12, custom_opsets={"rknn_cst": 1}, **names
            )
        exported = check_and_show(out / filename)
        dims = [output_dims(o) for o in exported.graph.output]
        warned = "shape inference of rknn_cst::cstDualResidual type is missing" in stderr[0]
        # Why both: without setType the exporter warns and both outputs lose their shapes.
        if typed:
            assert not warned and dims == [[2, 3, 4], [2, 3, 4]], (stderr[0], dims)
            print(f"  with setType: no warning; outputs {dims}")
        else:
            symbolic_dims = [len(d) == 3 and all(isinstance(s, str) for s in d) for d in dims]  # rank 3, sizes unknown
            assert warned and symbolic_dims == [True, True], (stderr[0], dims)
            print(f"  exporter warned: shape inference ... is missing; outputs {dims}")


# ---------------------------------------------------------------------------------------------
# 4. Run it
# ---------------------------------------------------------------------------------------------


def register_dual_residual_kernel() -> None:
    # A test double for the target runtime's kernel: one Python function, two outputs.
    @onnx_op(
        op_type="rknn_cst::cstDualResidual",
        inputs=[PyCustomOpDef.dt_float, PyCustomOpDef.dt_float],
        outputs=[PyCustomOpDef.dt_float, PyCustomOpDef.dt_float],
        attrs={"alpha": PyCustomOpDef.dt_float},
    )
    def cst_dual_residual(x, y, alpha):
        alpha = np.float32(alpha)
        return x * alpha - y, y * alpha - x


def step4_run(out: pathlib.Path) -> None:
    print("\n== 4. Run it in ONNX Runtime with a Python kernel ==")
    model, inputs = DualResidualModel().eval(), dual_inputs()
    path = out / "dual_residual.onnx"
    reproduce(
        "ORT without a kernel",
        lambda: run_ort(path, input_feeds(path, inputs)),
        "rknn_cst:cstDualResidual(-1) is not a registered function/op",
    )
    register_dual_residual_kernel()
    for filename in ["dual_residual_untyped.onnx", "dual_residual.onnx"]:
        actual = run_ort(out / filename, input_feeds(out / filename, inputs), custom_ops=True)
        for got, expected in zip(actual, model(*inputs), strict=True):
            compare(got, expected, rtol=1e-6, atol=1e-6)  # the same float32 mul and sub on both sides


# ---------------------------------------------------------------------------------------------
# 5. Attributes of every kind
# ---------------------------------------------------------------------------------------------


class FooModel(torch.nn.Module):
    def forward(self, x, y):
        return torch.ops.cst.foo_forward(x, y, 0.5, 2, "sub", [1.0, 2.0, 3.0], [2, 3])


# The obvious version: "fs" for the float list. It fails on a traced model, where the list arrives
# as a prim::ListConstruct of constants, which parse_args unpacks only for "is".
@parse_args("v", "v", "f", "i", "s", "fs", "is")
def foo_forward_with_fs(g, x, y, alpha, beta, mode, scales, dims):
    return g.op("rknn_cst::Foo", x, y, alpha_f=alpha, beta_i=beta, mode_s=mode, scales_f=scales, dims_i=dims)


@parse_args("v", "v", "f", "i", "s", "v", "is")
def foo_forward_symbolic(g, x, y, alpha, beta, mode, scales, dims):
    # Take the float list as "v" and read each element's constant.
    scales = [element.node().t("value").item() for element in scales.node().inputs()]
    # The parse_args descriptor says what Python value you get; the g.op suffix says what ONNX stores.
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


def step5_attributes(out: pathlib.Path) -> None:
    print("\n== 5. Attributes of every kind: cst::foo_forward (dynamo=False) ==")
    model = FooModel().eval()
    inputs = (torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5))
    print(f"  schema: {torch.ops.cst.foo_forward.default._schema}")
    register_custom_op_symbolic("cst::foo_forward", foo_forward_with_fs, 12)
    reproduce(
        'parse_args "fs" on a traced float list',
        lambda: torch.onnx.export(model, inputs, out / "failures/foo.onnx", dynamo=False, opset_version=12),
        "ONNX symbolic does not know how to unpack the ListConstruct node that is not a list of integers",
    )
    register_custom_op_symbolic("cst::foo_forward", foo_forward_symbolic, 12)
    # Why under failures/: the model is valid, but onnxruntime-extensions' Python kernels can only
    # declare scalar int, float and string attributes (PyCustomOpDef has no list type), so this test
    # double cannot run a node with FLOATS and INTS attributes. A C++ kernel could.
    path = out / "failures/foo_all_attributes.onnx"
    torch.onnx.export(
        model, inputs, path, dynamo=False, opset_version=12, custom_opsets={"rknn_cst": 1}, input_names=["x", "y"]
    )
    exported = check_and_show(path)
    (node,) = exported.graph.node
    kinds = {a.name: onnx.AttributeProto.AttributeType.Name(a.type) for a in node.attribute}
    expected_kinds = {"alpha": "FLOAT", "beta": "INT", "mode": "STRING", "scales": "FLOATS", "dims": "INTS"}
    assert kinds == expected_kinds, kinds
    print(f"  attribute types: {kinds}")
    assert output_dims(exported.graph.output[0]) == [2, 3, 1, 1]

    # What the node means is still checked: the ONNX reference evaluator reads every attribute kind.
    from onnx.reference import ReferenceEvaluator
    from onnx.reference.op_run import OpRun

    class Foo(OpRun):
        op_domain = "rknn_cst"

        def _run(self, x, y, alpha=None, beta=None, mode=None, scales=None, dims=None):
            z = x * np.float32(alpha) + (-1 if mode == "sub" else 1) * y * np.float32(beta)
            z = z * np.asarray(scales, dtype=x.dtype).reshape(1, -1, 1, 1)
            return (z.sum(axis=tuple(dims), keepdims=True),)

    (actual,) = ReferenceEvaluator(exported, new_ops=[Foo]).run(None, input_feeds(path, inputs))
    np.testing.assert_allclose(actual, model(*inputs).numpy(), rtol=1e-5, atol=1e-5)  # 20-term float32 sums
    print("  matches PyTorch in onnx.reference.ReferenceEvaluator (not ORT)")


# ---------------------------------------------------------------------------------------------
# 6. The torch.export-based exporter (dynamo=True)
# ---------------------------------------------------------------------------------------------


class DualResidualLibModel(torch.nn.Module):
    def __init__(self, alpha: float = 0.5) -> None:
        super().__init__()
        self.alpha = alpha

    def forward(self, x, y):
        return torch.ops.cst_lib.dual_residual(x, y, self.alpha)


def register_dual_residual_fake() -> None:
    # Why: torch.export runs the model on fake tensors (shapes and dtypes, no data); a CPU kernel
    # cannot run on them, so say what comes out.
    @torch.library.register_fake("cst_lib::dual_residual")
    def _(x, y, alpha):
        return torch.empty_like(x), torch.empty_like(y)


def register_dual_residual_schema() -> None:
    # Why: onnxscript builds custom-domain nodes from ONNX's schema registry, which also tells it
    # that the op has two outputs.
    float_tensors = [("T", ["tensor(float)"], "float32 tensors")]
    schema = onnx.defs.OpSchema(
        "cstDualResidual",
        "rknn_cst",
        1,
        inputs=[onnx.defs.OpSchema.FormalParameter("X", "T"), onnx.defs.OpSchema.FormalParameter("Y", "T")],
        outputs=[onnx.defs.OpSchema.FormalParameter("X_res", "T"), onnx.defs.OpSchema.FormalParameter("Y_res", "T")],
        type_constraints=float_tensors,
        attributes=[onnx.defs.OpSchema.Attribute("alpha", onnx.defs.OpSchema.AttrType.FLOAT, "the scale")],
    )
    onnx.defs.register_schema(schema)


rknn_cst = onnxscript.values.Opset("rknn_cst", 1)


def dual_residual_translation(x, y, alpha: float):
    return rknn_cst.cstDualResidual(x, y, alpha=alpha)


def step6_dynamo(out: pathlib.Path) -> None:
    print("\n== 6. The torch.export-based exporter (dynamo=True) ==")
    inputs = dual_inputs()

    # Why the legacy op is lost: RegisterOperators files a function pointer as a catch-all kernel,
    # i.e. under CompositeImplicitAutograd, and torch.export decomposes such ops into what they call.
    print("\n-- cst::dual_residual (RegisterOperators)")
    dispatch = torch._C._dispatch_dump("cst::dual_residual")
    print("  " + next(line for line in dispatch.splitlines() if "CompositeImplicitAutograd" in line))
    assert "CompositeImplicitAutograd" in dispatch
    model = DualResidualModel().eval()
    path = out / "failures/dual_residual_traced_through.onnx"
    torch.onnx.export(model, inputs, dynamo=True, verbose=False).save(path)
    exported = check_and_show(path)
    ops = [n.op_type for n in exported.graph.node]
    assert ops == ["Mul", "Sub", "Mul", "Sub"], ops
    print(f"  the custom node is gone: {ops} (it still computes the right thing)")
    for got, expected in zip(run_ort(path, input_feeds(path, inputs)), model(*inputs), strict=True):
        compare(got, expected, rtol=1e-6, atol=1e-6)

    # The modern registration: cst_lib::dual_residual has a schema and a CPU kernel (TORCH_LIBRARY).
    print("\n-- cst_lib::dual_residual (TORCH_LIBRARY + register_fake + custom_translation_table)")
    print("  " + torch._C._dispatch_dump("cst_lib::dual_residual").splitlines()[-1].split(" :: ")[0])
    model = DualResidualLibModel().eval()
    table = {torch.ops.cst_lib.dual_residual.default: dual_residual_translation}
    reproduce(
        "no fake kernel",
        lambda: torch.onnx.export(model, inputs, dynamo=True, verbose=False),
        "UnsupportedOperatorException'>: cst_lib.dual_residual.default",
    )
    register_dual_residual_fake()
    reproduce(
        "no translation",
        lambda: torch.onnx.export(model, inputs, dynamo=True, verbose=False),
        "No ONNX function found for <OpOverload(op='cst_lib.dual_residual', overload='default')>",
    )
    reproduce(
        "a translation, but no ONNX schema",
        lambda: torch.onnx.export(model, inputs, dynamo=True, verbose=False, custom_translation_table=table),
        "No schema registered for 'cstDualResidual' version '1' and domain 'rknn_cst'",
    )
    register_dual_residual_schema()
    onnx_program = torch.onnx.export(
        model,
        inputs,
        dynamo=True,
        verbose=False,
        input_names=["x", "y"],
        output_names=["x_res", "y_res"],
        custom_translation_table={torch.ops.cst_lib.dual_residual.default: dual_residual_translation},
    )
    path = out / "dual_residual_dynamo.onnx"
    onnx_program.save(path)
    check_and_show(path)
    for got, expected in zip(run_ort(path, input_feeds(path, inputs), custom_ops=True), model(*inputs), strict=True):
        compare(got, expected, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=HERE / "output", help="where models are written")
    args = parser.parse_args(argv)
    reason = missing_build_requirement()
    if reason:
        print(f"SKIP: {reason}")
        return SKIP
    if TORCHSCRIPT_EXPORTER_MISSING:
        print(f"SKIP: this torch has no TorchScript-based ONNX exporter ({TORCHSCRIPT_EXPORTER_MISSING})")
        return SKIP
    out = args.out.resolve()
    (out / "failures").mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    # ORT logs each failed session to stderr before raising; the exceptions are printed anyway.
    ort.set_default_logger_severity(4)
    # Each dynamo=False export and registration warns that the TorchScript exporter is deprecated.
    # That is known and stated in the README; keep the output readable.
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.onnx")
    warnings.filterwarnings("ignore", message=".*legacy TorchScript-based ONNX export.*")
    warnings.filterwarnings("ignore", message="The feature will be removed.*")
    try:
        step1_build()
        step2_reproduce(out)
        step3_export_one_node(out)
        step4_run(out)
        step5_attributes(out)
        step6_dynamo(out)
    except AssertionError as exc:
        print(f"\nFAIL: {exc}")
        return 1
    print(f"\nPASS: every model in {out} checked and matched PyTorch in ONNX Runtime")
    return 0


if __name__ == "__main__":
    sys.exit(main())
