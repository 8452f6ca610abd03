"""The helpers the pages paste and every test.py imports: written once, here.

A page's first block is region `imports` here (what every page imports), then the folder's own;
a page shows the helpers through `include(..., source="page_helpers.py")` (see pages.py), so a
pasted page defines them itself. A test.py takes all of it with `from page_helpers import *`.
"""

# region imports
import contextlib
import os
import re

import numpy as np
import onnx
import onnxruntime as ort
import torch
from torch.onnx import register_custom_op_symbolic
from torch.onnx.symbolic_helper import parse_args

try:  # public from torch 2.10; torch 2.6 to 2.9 have it under a private name
    from torch.onnx.testing import assert_onnx_program
except ImportError:
    try:
        from torch.onnx._internal.exporter._testing import assert_onnx_program
    except ImportError:  # torch < 2.6: no dynamo=True step runs
        assert_onnx_program = None

try:  # custom nodes run in ONNX Runtime with Python kernels from it
    from onnxruntime_extensions import PyCustomOpDef, get_library_path, onnx_op
except ImportError:  # pip install onnxruntime-extensions
    onnx_op = None
# endregion


# region expect_error
@contextlib.contextmanager
def expect_error(expected):
    """The code inside must fail with `expected` in its message: print the error and go on."""
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
            print("  reproduced, further down:", [x for x in lines if expected in x][0])
    else:
        raise AssertionError(f"expected an error containing {expected!r}, but the code ran")
# endregion


# region run_ort
def run_ort(path, feeds, options=None):
    """Run a model file in ONNX Runtime on the CPU; `options` registers custom-op libraries."""
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)
# endregion


# region ortx
def ortx_options():
    """SessionOptions that load onnxruntime-extensions' library (the @onnx_op kernels)."""
    options = ort.SessionOptions()
    options.register_custom_ops_library(get_library_path())
    return options


def ortx_session(model):
    """An ONNX Runtime session with those kernels: `initialize_inference_session(ortx_session)`
    lets assert_onnx_program run an exported program that has custom nodes."""
    return ort.InferenceSession(model, ortx_options(), providers=["CPUExecutionProvider"])
# endregion


# region rknn_cst_kernels
# ONNX Runtime has no kernel for the rknn_cst nodes; your runtime brings its own. Here Python
# functions stand in for them, registered with onnxruntime-extensions (if installed). Register
# an op_type once per process: after a second @onnx_op for it, every session that loads the
# library fails ("Conflicting with a registered kernel").
if onnx_op is not None:

    @onnx_op(
        op_type="rknn_cst::cstThreshold",
        inputs=[PyCustomOpDef.dt_float],
        outputs=[PyCustomOpDef.dt_float],
        attrs={"threshold": PyCustomOpDef.dt_float, "value": PyCustomOpDef.dt_float},
    )
    def cst_threshold_kernel(x, threshold, value):  # float32 in and out, as declared above
        # torch's rule, NaN included: x <= threshold gives value, else x (NaN stays NaN)
        return np.where(x <= np.float32(threshold), np.float32(value), x).astype(np.float32)

    @onnx_op(
        op_type="rknn_cst::cstDualResidual",
        inputs=[PyCustomOpDef.dt_float, PyCustomOpDef.dt_float],
        outputs=[PyCustomOpDef.dt_float, PyCustomOpDef.dt_float],
        attrs={"alpha": PyCustomOpDef.dt_float},
    )
    def cst_dual_residual_kernel(x, y, alpha):
        alpha = np.float32(alpha)
        return x * alpha - y, y * alpha - x
# endregion


# region compare
def compare(name, actual, expected, rtol, atol):
    """assert_allclose against PyTorch's result, then one line naming the model and the largest
    difference. (For a dynamo=False file no library call does this; torch.onnx.testing checks a
    dynamo=True program.)"""
    expected = expected.detach().numpy() if isinstance(expected, torch.Tensor) else expected
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=name)
    diff = float(np.max(np.abs(actual.astype(np.float64) - expected), initial=0.0))
    print(f"  {name}: matches PyTorch (max abs diff {diff:.1e}; rtol={rtol}, atol={atol})")
# endregion


# region check_with_schemas
def check_with_schemas(path, *schemas):
    """The full checker with SCHEMAS registered for the call: a node of a type its schema
    does not list fails here, before a runtime sees the file. The exporter does not check."""
    for schema in schemas:
        onnx.defs.register_schema(schema)
    try:
        onnx.checker.check_model(path, full_check=True)
    finally:
        for schema in schemas:
            onnx.defs.deregister_schema(schema.name, schema.since_version, schema.domain)
# endregion


# region run_ort_torch
def run_ort_torch(path, inputs, options=None):
    """ONNX Runtime with torch tensors in and out, bfloat16 included (numpy has no bfloat16):
    DLPack hands each tensor over as it is, through an IO binding."""
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    binding = session.io_binding()
    for arg, x in zip(session.get_inputs(), inputs, strict=True):
        binding.bind_ortvalue_input(arg.name, ort.OrtValue.from_dlpack(x.contiguous()))
    for arg in session.get_outputs():
        binding.bind_output(arg.name, "cpu")
    session.run_with_iobinding(binding)
    return [torch.from_dlpack(value).clone() for value in binding.get_outputs()]
# endregion
