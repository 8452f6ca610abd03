"""What register_pytorch_op/test.py writes: one custom node with two outputs from both exporters
(the dynamo=True one through a local schema), every attribute kind; and how it skips: without a
compiler, without onnxruntime-extensions, with ninja only beside the interpreter, and on torch 2.4
(its version gates, run on the pinned torch)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap

import pytest
from conftest import ROOT, passed
from onnx import AttributeProto, TensorProto

NAME = "register_pytorch_op"
SEEDS = 20


@pytest.fixture(scope="module")
def run(example_run):
    return passed(example_run(NAME))  # skips the module when the example skipped itself (no compiler)


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
    "filename",
    [
        "dual_residual_untyped.onnx",
        "dual_residual.onnx",
        "dual_residual_dynamo.onnx",
        "dual_residual_legacy_dynamo.onnx",
    ],
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
    for dynamo_model in ["dual_residual_dynamo.onnx", "dual_residual_legacy_dynamo.onnx"]:
        assert output_shapes(run.model(dynamo_model)) == [(TensorProto.FLOAT, [2, 3, 4])] * 2
    untyped = output_shapes(run.model("dual_residual_untyped.onnx"))
    assert [len(dims) for _, dims in untyped] == [3, 3]
    assert all(isinstance(d, str) for _, dims in untyped for d in dims)


def test_without_output_names_the_outputs_are_numbered(run, tmp_path):
    """README step 3: without output_names the TorchScript exporter names the two outputs 2 and 3
    (the inputs take the names of forward's parameters)."""
    proc = python(
        """
        import contextlib, io
        import onnx, torch
        import test as example

        with contextlib.redirect_stdout(io.StringIO()):
            example.step1_build()
        symbolic = example.dual_residual_symbolic
        torch.onnx.register_custom_op_symbolic("cst::dual_residual", symbolic, 12)
        inputs = (torch.randn(2, 3, 4), torch.randn(2, 3, 4))
        model = example.DualResidualModel().eval()
        torch.onnx.export(model, inputs, "unnamed.onnx", dynamo=False, opset_version=12)
        graph = onnx.load("unnamed.onnx").graph
        print("names:", [i.name for i in graph.input], [o.name for o in graph.output])
        """,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "names: ['x', 'y'] ['2', '3']" in proc.stdout


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
    # README step 6: a translation keyed on the legacy op keeps it as one node, no fake kernel
    assert "  one node again: ['cstDualResidual']" in run.output
    assert "dual_residual_legacy_dynamo.onnx: ONNX Runtime matches PyTorch" in run.output


def test_build_is_announced_and_no_cuda_warning(run):
    assert "building the C++ extension: about a minute the first time, cached after" in run.output
    assert "  built " in run.output or "  reused the cached build " in run.output
    assert "No CUDA runtime" not in run.output
    # the exporter's graph dumps are held back, and said so; the dumps themselves are not printed
    held_back = "  held back (shown with -v): the exporter's dump 'Torch IR graph at exception:'"
    assert run.output.count(held_back) == 2  # steps 2 and 5
    assert "Torch IR graph at exception: graph(" not in run.output
    assert "graph(%x : Float(" not in run.output


def test_dynamo_model_needs_no_global_schema(run):
    """Step 6 writes the custom node with a local OpSchema: the file passes the full checker in a
    process where no schema for rknn_cst::cstDualResidual is registered, and the fake kernel passed
    every opcheck test."""
    import onnx

    assert not onnx.defs.has("cstDualResidual", "rknn_cst")
    onnx.checker.check_model(run.model("dual_residual_dynamo.onnx"), full_check=True)
    (line,) = [line for line in run.output.splitlines() if line.startswith("  opcheck: ")]
    results = dict(item.split(": ") for item in line.removeprefix("  opcheck: ").split(", "))
    assert "test_faketensor" in results and set(results.values()) == {"SUCCESS"}, line
    assert "dual_residual_dynamo.onnx: ONNX Runtime matches PyTorch (assert_onnx_program)" in (
        run.output
    )


def test_a_translation_op_needs_a_schema(run, tmp_path):
    """README step 6: the exporter needs a schema for the op a translation calls; an
    onnxscript.values.Op built without one fails with `OpSchema not found`."""
    proc = python(
        """
        import contextlib, io
        import onnxscript, torch
        import test as example

        with contextlib.redirect_stdout(io.StringIO()):
            example.step1_build()

        @torch.library.register_fake("cst::dual_residual")
        def _(x, y, alpha):
            return torch.empty_like(x), torch.empty_like(y)

        no_schema = onnxscript.values.Op(example.rknn_cst, "cstDualResidual")

        def translation(x, y, alpha: float):
            return no_schema(x, y, alpha=alpha)

        table = {torch.ops.cst.dual_residual.default: translation}
        inputs = (torch.randn(2, 3, 4), torch.randn(2, 3, 4))
        model = example.DualResidualModel().eval()
        try:
            torch.onnx.export(model, inputs, dynamo=True, custom_translation_table=table)
        except Exception as error:
            while error is not None:  # the error and its causes, one a line
                print(f"{type(error).__name__}: {error}")
                error = error.__cause__
        """,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "ValueError: OpSchema not found for op 'cstDualResidual'." in proc.stdout, proc.stdout


def test_tolerances_hold_over_seeds(run):
    """README step 4 and 6: ONNX Runtime with the Python kernel matches the C++ op exactly, for the
    four models; step 5: the reference Foo is within rtol=atol=1e-5 of foo_forward. Both over SEEDS
    inputs, on the models the run wrote."""
    proc = python(
        f"""
        import contextlib, io
        import numpy as np, onnx, torch
        from onnx.reference import ReferenceEvaluator
        import test as example

        with contextlib.redirect_stdout(io.StringIO()):
            example.step1_build()
            example.step4_run()  # registers the Python kernel
        foo_onnx = onnx.load("failures/foo_all_attributes.onnx")
        foo = ReferenceEvaluator(foo_onnx, new_ops=[example.Foo])
        model = example.DualResidualModel().eval()
        paths = [
            "dual_residual.onnx",
            "dual_residual_untyped.onnx",
            "dual_residual_dynamo.onnx",
            "dual_residual_legacy_dynamo.onnx",
        ]
        sessions = {{path: example.ortx_session(path) for path in paths}}
        worst_foo = 0.0
        for seed in range({SEEDS}):
            torch.manual_seed(seed)
            x, y = torch.randn(2, 3, 4), torch.randn(2, 3, 4)
            expected = [tensor.numpy() for tensor in model(x, y)]
            for path, session in sessions.items():
                actual = session.run(None, {{"x": x.numpy(), "y": y.numpy()}})
                assert len(actual) == 2, path
                for got, want in zip(actual, expected, strict=True):
                    np.testing.assert_array_equal(got, want, err_msg=f"{{path}} seed {{seed}}")
            x, y = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5)
            (got,) = foo.run(None, {{"x": x.numpy(), "y": y.numpy()}})
            want = example.FooModel()(x, y).numpy()
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"seed {{seed}}")
            share = np.abs(got - want) / (1e-5 + 1e-5 * np.abs(want))
            worst_foo = max(worst_foo, float(share.max()))
        print(f"worst share of the Foo tolerance: {{worst_foo:.2f}}")
        """,
        cwd=run.out,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "worst share of the Foo tolerance" in proc.stdout


def test_ninja_beside_the_interpreter_is_found(tmp_path):
    """A venv used without activation (python called by path) has ninja only in its bin/: not a
    SKIP."""
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
        print("problem:", repr(example.harness.build_problem()))
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
    """A missing optional package: the other steps still run and check their models; exit 77 names
    4 and 6."""
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
    reason = "onnxruntime-extensions cannot be imported (ImportError: onnxruntime_extensions "
    reason += "hidden by the test): pip install onnxruntime-extensions"
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
    """On the pinned torch, with harness.TORCH set to torch 2.4's (2, 4): steps 6 and 7 print
    `SKIP step N: needs torch >= 2.6` before any dynamo=True export, the example still passes, and
    steps.json records it. (The real 2.4 stack runs in run_stacks.py, not here.)"""
    out = tmp_path / "out"
    proc = python(
        f"""
        import sys
        import test as example
        example.harness.TORCH = (2, 4)
        sys.exit(example.main(["--out", {str(out)!r}]))
        """,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    skips = [line for line in proc.stdout.splitlines() if line.startswith("SKIP step")]
    assert skips == [
        "SKIP step 6: needs torch >= 2.6 (custom_translation_table came with 2.6; on 2.4, "
        "dynamo=True is the old torch.onnx.dynamo_export)",
        "SKIP step 7: needs torch >= 2.6 (the second model, dual_residual_dynamo.onnx, comes from "
        "step 6)",
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
