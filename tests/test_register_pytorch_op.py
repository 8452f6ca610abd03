"""What register_pytorch_op/test.py writes: one custom node with two outputs, every attribute kind; and how it
skips: without a compiler, without onnxruntime-extensions, with ninja only beside the interpreter, and on torch 2.4
(its version gates, run on the pinned torch)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap

import pytest
from conftest import ROOT
from onnx import AttributeProto, TensorProto

NAME = "register_pytorch_op"
SEEDS = 20


@pytest.fixture(scope="module")
def run(example_run):
    result = example_run(NAME)  # skips the module when the example skipped itself (no compiler)
    assert result.returncode == 0, result.output[-4000:]
    return result


def opsets(model):
    return {o.domain: o.version for o in model.opset_import}


def output_shapes(model):
    return [
        (
            o.type.tensor_type.elem_type,
            [
                d.dim_value if d.HasField("dim_value") else d.dim_param
                for d in o.type.tensor_type.shape.dim
            ],
        )
        for o in model.graph.output
    ]


def python(script: str, cwd, env=None, timeout=900) -> subprocess.CompletedProcess:
    """Run a short script with this interpreter, able to `import test` from the example's folder."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT / NAME), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    "filename", ["dual_residual_untyped.onnx", "dual_residual.onnx", "dual_residual_dynamo.onnx"]
)
def test_one_custom_node_with_two_named_outputs(run, filename):
    model = run.model(filename)
    (node,) = model.graph.node
    assert (node.domain, node.op_type) == ("rknn_cst", "cstDualResidual")
    assert list(node.input) == [i.name for i in model.graph.input] == ["x", "y"]
    # output_names: without it the TorchScript exporter names the outputs "2" and "3"
    assert [o.name for o in model.graph.output] == list(node.output) == ["x_res", "y_res"]
    (alpha,) = node.attribute
    assert alpha.name == "alpha" and alpha.type == AttributeProto.FLOAT and alpha.f == 0.5
    assert opsets(model)["rknn_cst"] == 1


def test_typed_shaped_outputs(run):
    assert output_shapes(run.model("dual_residual.onnx")) == [(TensorProto.FLOAT, [2, 3, 4])] * 2
    assert (
        output_shapes(run.model("dual_residual_dynamo.onnx"))
        == [(TensorProto.FLOAT, [2, 3, 4])] * 2
    )
    untyped = output_shapes(run.model("dual_residual_untyped.onnx"))
    assert [len(dims) for _, dims in untyped] == [3, 3]
    assert all(isinstance(d, str) for _, dims in untyped for d in dims)


def test_torchscript_opsets(run):
    assert opsets(run.model("dual_residual.onnx")) == {"": 12, "rknn_cst": 1}


def test_every_attribute_kind(run):
    model = run.model("failures/foo_all_attributes.onnx")
    (node,) = model.graph.node
    assert (node.domain, node.op_type) == ("rknn_cst", "Foo")
    a = {attr.name: attr for attr in node.attribute}
    assert a["alpha"].type == AttributeProto.FLOAT and a["alpha"].f == 0.5
    assert a["beta"].type == AttributeProto.INT and a["beta"].i == 2
    assert a["mode"].type == AttributeProto.STRING and a["mode"].s == b"sub"
    assert a["scales"].type == AttributeProto.FLOATS and list(a["scales"].floats) == [1.0, 2.0, 3.0]
    assert a["dims"].type == AttributeProto.INTS and list(a["dims"].ints) == [2, 3]
    assert output_shapes(model) == [(TensorProto.FLOAT, [2, 3, 1, 1])]


def test_dynamo_traces_through_the_registeroperators_op(run):
    model = run.model("failures/dual_residual_traced_through.onnx")
    assert [n.op_type for n in model.graph.node] == ["Mul", "Sub", "Mul", "Sub"]
    assert "rknn_cst" not in opsets(model)


def test_build_is_announced_and_no_cuda_warning(run):
    assert "building the C++ extension: about a minute the first time, cached after" in run.output
    assert "  built " in run.output or "  reused the cached build " in run.output
    assert "No CUDA runtime" not in run.output
    assert (
        "Torch IR graph at exception" not in run.output
    )  # the exporter's dump is captured and checked


def test_tolerances_hold_over_seeds(run):
    """README step 4: ORT with the Python kernel matches the C++ op exactly; step 5: the reference Foo is within
    rtol=atol=1e-5 of foo_forward. Both over SEEDS inputs, on the models the run wrote."""
    proc = python(
        f"""
        import contextlib, io
        import numpy as np, onnx, torch
        from onnx.reference import ReferenceEvaluator
        import test as example

        with contextlib.redirect_stdout(io.StringIO()):
            example.step1_build()
            example.step4_run()  # registers the Python kernel
        foo = ReferenceEvaluator(onnx.load("failures/foo_all_attributes.onnx"), new_ops=[example.Foo])
        models = {{
            "dual_residual.onnx": example.DualResidualModel().eval(),
            "dual_residual_untyped.onnx": example.DualResidualModel().eval(),
            "dual_residual_dynamo.onnx": example.DualResidualLibModel().eval(),
        }}
        worst_foo = 0.0
        for seed in range({SEEDS}):
            torch.manual_seed(seed)
            inputs = (torch.randn(2, 3, 4), torch.randn(2, 3, 4))
            with contextlib.redirect_stdout(io.StringIO()) as printed:
                for path, model in models.items():
                    example.compare_in_ort(path, model, inputs, rtol=0, atol=0)  # exact
            assert printed.getvalue().count("max abs diff 0.0e+00") == 6, printed.getvalue()
            x, y = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5)
            (got,) = foo.run(None, {{"x": x.numpy(), "y": y.numpy()}})
            want = example.FooModel()(x, y).numpy()
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"seed {{seed}}")
            worst_foo = max(worst_foo, float((np.abs(got - want) / (1e-5 + 1e-5 * np.abs(want))).max()))
        print(f"worst share of the Foo tolerance: {{worst_foo:.2f}}")
        """,
        cwd=run.out,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "worst share of the Foo tolerance" in proc.stdout


def test_ninja_beside_the_interpreter_is_found(tmp_path):
    """A venv used without activation (python called by path) has ninja only in its bin/: not a SKIP."""
    scripts = sysconfig.get_path("scripts")
    if not os.path.isfile(os.path.join(scripts, "ninja")):
        pytest.skip(f"no ninja in {scripts}")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "c++").symlink_to("/usr/bin/c++")  # a compiler on PATH, but no ninja
    proc = python(
        """
        import shutil
        assert shutil.which("ninja") is None
        import test as example
        print("problem:", repr(example.build_problem()))
        print("ninja:", shutil.which("ninja"))
        """,
        cwd=tmp_path,
        env={"PATH": str(bin_dir)},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "problem: ''" in proc.stdout
    assert f"ninja: {os.path.join(scripts, 'ninja')}" in proc.stdout


def test_without_a_compiler_it_skips_with_the_reason(tmp_path):
    env = {**os.environ, "CXX": "no-such-compiler"}
    proc = subprocess.run(
        [sys.executable, "test.py", "--out", str(tmp_path)],
        cwd=ROOT / NAME,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 77, proc.stdout + proc.stderr
    assert "SKIP step 1: no C++ compiler: 'no-such-compiler' is not on PATH" in proc.stdout
    for step in range(2, 7):
        assert f"SKIP step {step}: needs the C++ ops of step 1" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not list(tmp_path.glob("*.onnx"))


def test_without_onnxruntime_extensions_only_steps_4_and_6_skip(run, tmp_path):
    """A missing optional package: the other steps still run and check their models; exit 77 names 4 and 6."""
    shadow = tmp_path / "shadow" / "onnxruntime_extensions"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        'raise ImportError("onnxruntime_extensions hidden by the test")\n'
    )
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "test.py", "--out", str(out)],
        cwd=ROOT / NAME,
        env={**os.environ, "PYTHONPATH": str(shadow.parent)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 77, proc.stdout[-3000:] + proc.stderr[-3000:]
    skips = [line for line in proc.stdout.splitlines() if line.startswith("SKIP step")]
    reason = "onnxruntime-extensions cannot be imported (ImportError: onnxruntime_extensions hidden by the test)"
    reason += ": pip install onnxruntime-extensions"
    assert skips == [f"SKIP step 4: {reason}", f"SKIP step 6: {reason}"]
    for model in [
        "dual_residual.onnx",
        "dual_residual_dynamo.onnx",
        "failures/foo_all_attributes.onnx",
    ]:
        assert (out / model).is_file(), model
    assert "== 7. Deploying a model with a custom-domain node ==" in proc.stdout
    assert "dual_residual_dynamo.onnx needs rknn_cst::cstDualResidual" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


def test_torch_2_4_gates_steps_6_and_7(run, tmp_path):
    """On the pinned torch, with TORCH set to torch 2.4's (2, 4): steps 6 and 7 print `SKIP step N: needs torch >= 2.6`
    before any dynamo=True export, the example still passes, and steps.json records it. (The real 2.4 stack runs in
    run_stacks.py, not here.)"""
    out = tmp_path / "out"
    proc = python(
        f"""
        import sys
        import test as example
        example.TORCH = (2, 4)
        sys.exit(example.main(["--out", {str(out)!r}]))
        """,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    skips = [line for line in proc.stdout.splitlines() if line.startswith("SKIP step")]
    assert skips == [
        "SKIP step 6: needs torch >= 2.6 (custom_translation_table came with 2.6; on 2.4, dynamo=True is the old"
        " torch.onnx.dynamo_export)",
        "SKIP step 7: needs torch >= 2.6 (the second model, dual_residual_dynamo.onnx, comes from step 6)",
    ]
    assert "exporting with dynamo=True" not in proc.stdout
    assert (
        "dual_residual.onnx needs rknn_cst::cstDualResidual" in proc.stdout
    )  # step 7 lists what it has
    summary = json.loads((out / "steps.json").read_text(encoding="utf-8"))
    statuses = {number: step["status"] for number, step in summary["steps"].items()}
    assert statuses == {
        **{str(n): "runs" for n in range(1, 6)},
        "6": "needs torch >= 2.6",
        "7": "needs torch >= 2.6",
    }
    assert sorted(p.name for p in out.glob("*.onnx")) == [
        "dual_residual.onnx",
        "dual_residual_untyped.onnx",
    ]
    assert not list(tmp_path.rglob("*.sarif"))
    assert "Traceback" not in proc.stdout + proc.stderr
