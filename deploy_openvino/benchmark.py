"""How long the mid-graph models take in OpenVINO on the CPU, with the custom node as the C++
kernel, as the Python op, and in standard ONNX ops. A measurement to read, not a test.

Run: python benchmark.py [--out DIR] [--sizes N ...] [--runs N]

It takes test.py's ops, models and extensions (test.py runs nothing at import) and exports the
three mid-graph models at 1x3xNxN (64 and 512) with dynamo=True (torch >= 2.6): once with the
rknn_cst nodes, once with each op translated into standard ONNX ops. It builds (or reuses)
test.py's C++ library in DIR, compiles every model for the CPU in f32 and, where the CPU's default
precision is another (bf16 or f16), in that too, and prints the median time of an inference as a
Markdown table with the precision each row ran in (README.md shows one, under Notes), with the
machine's load average, since other work on a shared machine slows every column.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import platform
import statistics
import sys
import time

import numpy as np
import onnx
import openvino as ov
import torch
from onnxscript import opset18 as op

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import test as lesson  # noqa: E402 - this folder's test.py: the ops, models and extensions


# The ops in standard ONNX ops, for the third column: what the custom node would cost if the
# runtime needed no kernel of its own (aten::threshold needs no entry: torch's own translation
# writes it as LessOrEqual and Where).
def dual_residual_standard(x, y, alpha: float):
    return op.Sub(op.Mul(x, alpha), y), op.Sub(op.Mul(y, alpha), x)


def foo_standard(x, y, alpha: float, beta: int, mode: str, scales, dims):
    y_beta = op.Mul(y, float(beta))
    z = op.Sub(op.Mul(x, alpha), y_beta) if mode == "sub" else op.Add(op.Mul(x, alpha), y_beta)
    per_channel = np.asarray(scales, dtype=np.float32).reshape(1, -1, 1, 1)
    z = op.Mul(z, op.Constant(value=onnx.numpy_helper.from_array(per_channel)))
    return op.ReduceSum(z, op.Constant(value_ints=list(dims)), keepdims=1)


STANDARD = {
    torch.ops.cst_py.dual_residual.default: dual_residual_standard,
    torch.ops.cst_py.foo_forward.default: foo_standard,
}


def median_ms(compiled_models, feeds, runs: int) -> list[float]:
    """The median time of one inference of each compiled model, in ms. The models take turns, so
    that other work on the machine slows each of them alike."""
    requests = [compiled.create_infer_request() for compiled in compiled_models]
    for request in requests:
        for _ in range(3):  # warm-up
            request.infer(feeds)
    times: list[list[float]] = [[] for _ in requests]
    for _ in range(runs):
        for request, kept in zip(requests, times, strict=True):
            started = time.perf_counter()
            request.infer(feeds)
            kept.append((time.perf_counter() - started) * 1000)
    return [statistics.median(kept) for kept in times]


def precision_of(compiled) -> str:
    """The precision the CPU plugin compiled for: f32, bf16 or f16."""
    return compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()


def layer_types(compiled) -> list[str]:
    """What the CPU plugin made of the model: the type of each of its layers, in order."""
    ops = compiled.get_runtime_model().get_ordered_ops()
    return [op.get_rt_info()["layerType"].astype(str) for op in ops]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=HERE / "output", metavar="DIR",
                        help="where test.py's libcst_ops.so is, or is built (default: output/)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 512], metavar="N",
                        help="input heights and widths (default: 64 512)")
    parser.add_argument("--runs", type=int, default=30, help="timed inferences per model")
    args = parser.parse_args(argv)
    if lesson.harness.TORCH < (2, 6):
        print("SKIP: the exports use custom_translation_table, which needs torch >= 2.6")
        return 77

    out = args.out.resolve()
    (out / "benchmark").mkdir(parents=True, exist_ok=True)
    os.chdir(out)
    try:
        lesson.step5_build_cpp()  # ninja: rebuilt only if the source changed
    except lesson.harness.Skip as reason:
        print(f"SKIP: {reason}")
        return 77

    cpp_ops = ov.Core()
    cpp_ops.add_extension(str(out / "libcst_ops.so"))
    python_ops = ov.Core()
    for name, domain, convert in [
        ("cstThreshold", "rknn_cst", lesson.convert_threshold),
        ("cstDualResidual", "rknn_cst", lesson.convert_dual_residual),
        ("Foo", "rknn_cst", lesson.convert_foo),
    ]:
        python_ops.add_extension(lesson.ConversionExtension(name, domain, convert))
    standard = ov.Core()
    configs = [lesson.F32]  # f32, and the CPU's own default where that is bf16 or f16
    if precision_of(standard.compile_model(ov.Model([], [], "empty"), "CPU")) != "f32":
        configs.append({})

    models = {
        "threshold_net": lesson.MidGraph(torch.nn.Threshold(0.1, 20), 1, 1).eval(),
        "dual_residual_net": lesson.MidGraph(lesson.DualResidual(), 2, 2).eval(),
        "foo_net": lesson.MidGraph(lesson.Foo(), 2, 1).eval(),
    }
    rows, notes = [], []
    for size in args.sizes:
        torch.manual_seed(0)
        x = torch.randn(1, 3, size, size)
        print(f"exporting the three mid-graph models at 1x3x{size}x{size}, twice each")
        for name, model in models.items():
            custom_path = f"benchmark/{name}_{size}.onnx"
            standard_path = f"benchmark/{name}_{size}_standard.onnx"
            for path, table in [(custom_path, lesson.TRANSLATIONS), (standard_path, STANDARD)]:
                program = torch.onnx.export(
                    model, (x,), dynamo=True, verbose=False, custom_translation_table=table
                )
                program.save(path)
            ops = [n.op_type for n in onnx.load(standard_path).graph.node]
            assert not {"cstThreshold", "cstDualResidual", "Foo"} & set(ops), ops
            expected = model(x).detach().numpy()
            feeds = [x.numpy()]
            for config in configs:
                compiled_models = []
                for core, path in [
                    (cpp_ops, custom_path), (python_ops, custom_path), (standard, standard_path)
                ]:
                    compiled = core.compile_model(path, "CPU", config)
                    (actual,) = compiled(feeds).values()
                    if config == lesson.F32:  # bf16 and f16 drift: step 7 of README.md
                        np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-4)
                    compiled_models.append(compiled)
                precision = precision_of(compiled_models[0])
                assert {precision_of(c) for c in compiled_models} == {precision}
                times = median_ms(compiled_models, feeds, args.runs)
                if size == args.sizes[-1] and config == lesson.F32:
                    kinds = [layer_types(compiled) for compiled in compiled_models]
                    standard_kinds = sorted(set(kinds[2]) - {"Input", "Output", "Const"})
                    notes.append(
                        f"{name}: the C++ kernel runs as {kinds[0].count('Reference')} Reference"
                        f" layer(s) among {kinds[0].count('Reorder')} Reorders; the standard ops"
                        f" compile to {', '.join(standard_kinds)}"
                    )
                rows.append(
                    [name, f"{size}x{size}", precision, *(f"{t:.2f} ms" for t in times)]
                )

    cores = os.cpu_count()
    cpu = cpp_ops.get_property("CPU", "FULL_DEVICE_NAME")
    load = os.getloadavg()[0]  # other work on the machine: the times are worth what it leaves
    print(f"\n{cpu}, {cores} logical cores, {platform.machine()}; openvino {ov.__version__};")
    print(f"load average {load:.1f} at the end (1 = one core busy);")
    print(f"the median of {args.runs} inferences (taking turns), input 1x3xHxW:\n")
    print("| model | H x W | precision | C++ kernel | Python op | standard ops |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print()
    for note in notes:
        print(note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
