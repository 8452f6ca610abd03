"""What deploy_openvino/test.py writes and builds, its kernels on f16 and bf16, its tolerance, and its Notes' facts."""

from __future__ import annotations

import ctypes
import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys
import warnings

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from conftest import ROOT, load_example, passed

NAME = "deploy_openvino"
SEEDS = range(20)
RTOL, ATOL = 1e-5, 1e-5  # README, Notes: every model against PyTorch, in f32
NODES = {  # model (and model_net) -> its rknn_cst node: op_type, outputs, attributes
    "threshold": ("cstThreshold", 1, {"threshold": np.float32(0.1), "value": 20.0}),
    "dual_residual": ("cstDualResidual", 2, {"alpha": 0.5}),
    "foo": ("Foo", 1, {"alpha": 0.5, "beta": 2, "mode": b"sub", "scales": [1.0, 2.0, 3.0], "dims": [2, 3]}),
}

openvino = pytest.importorskip("openvino")
example = load_example(NAME)
PACKAGE = pathlib.Path(openvino.__file__).parent  # the wheel: include/, libs/
NINJA = pathlib.Path(example.ninja.BIN_DIR) / "ninja"
LOW = {  # element type -> (ONNX's, torch's, one unit in the last place at 1)
    "f16": (onnx.TensorProto.FLOAT16, torch.float16, 2.0**-10),
    "bf16": (onnx.TensorProto.BFLOAT16, torch.bfloat16, 2.0**-7),
}
OV_TYPES = ("CstThreshold", "CstDualResidual", "Foo", "FooOv")  # the ops as OpenVINO names them


@pytest.fixture(scope="module")
def run(example_run):
    return passed(example_run(NAME))  # skips the module when the example skipped itself (no compiler)


@pytest.fixture(scope="module")
def cores(run):
    """The C++ library test.py built, and the Python ops, each in its own Core."""
    cpp, python = openvino.Core(), openvino.Core()
    cpp.add_extension(str(run.out / "libcst_ops.so"))
    for name, convert in [("cstThreshold", example.convert_threshold),
                          ("cstDualResidual", example.convert_dual_residual), ("Foo", example.convert_foo)]:
        python.add_extension(example.ConversionExtension(name, "rknn_cst", convert))
    return {"C++": cpp, "Python": python}


def test_each_model_holds_its_node_with_its_attributes(run):
    prefixes = ("", "dynamo_") if example.harness.TORCH >= (2, 6) else ("",)  # dynamo=True: torch 2.6
    for filename in [f"{prefix}{name}{net}.onnx" for prefix in prefixes for name in NODES for net in ("", "_net")]:
        model = run.model(filename)
        onnx.checker.check_model(model, full_check=True)
        (node,) = [n for n in model.graph.node if n.domain == "rknn_cst"]
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        name = filename.removeprefix("dynamo_").removesuffix(".onnx")
        assert (node.op_type, len(node.output), attributes) == NODES[name.removesuffix("_net")], filename
        if name.endswith("_net"):  # the node between Convs
            ops = [n.op_type for n in model.graph.node]
            assert "Conv" in ops[: ops.index(node.op_type)] and ops[-1] == "Conv", (filename, ops)


def test_the_build_left_in_out_is_what_the_readme_shows(run):
    """README, step 8: the library (an OpenVINO extension) and program in --out, as its commands build them."""
    for name in ("cst_ops.cpp", "cst_host", "cst_host.cpp"):
        assert (run.out / name).is_file(), name
    assert hasattr(ctypes.CDLL(str(run.out / "libcst_ops.so")), "create_extensions")  # OPENVINO_CREATE_EXTENSIONS
    twin = (run.out / "failures" / "cst_ops_float_list.cpp").read_text().splitlines()
    changed = [(a, b) for a, b in zip((run.out / "cst_ops.cpp").read_text().splitlines(), twin, strict=True) if a != b]
    assert changed == [("using FloatList = std::vector<double>;", "using FloatList = std::vector<float>;")]
    # the two compiler commands, OV the wheel's folder (with one libopenvino.so.NNNN), are ninja's, cached
    assert (PACKAGE / "include/openvino/frontend/onnx/extension/op.hpp").is_file()
    (libopenvino,) = PACKAGE.glob("libs/libopenvino.so.*")
    assert not (PACKAGE / "libs/libopenvino.so").exists()  # hence the versioned name in build.ninja
    assert libopenvino.name == "libopenvino.so.2641", "README names libopenvino.so.2641"
    readme = (ROOT / NAME / "README.md").read_text(encoding="utf-8")
    (block,) = [b for b in re.findall(r"^```bash\n(.*?)^```", readme, re.S | re.M) if "OV=" in b]
    commands = block.replace("\\\n", " ").splitlines()[1:]
    for target, command in zip(("libcst_ops.so", "cst_host"), commands, strict=True):
        ninja = [str(NINJA), "-t", "commands", target]
        ran = subprocess.run(ninja, cwd=run.out, capture_output=True, text=True, check=True).stdout.splitlines()[-1]
        shown = " ".join(command.replace("$OV", str(PACKAGE)).split())
        assert ran == shown.replace("c++", os.environ.get("CXX", "c++"), 1), (ran, shown)
    again = subprocess.run([str(NINJA)], cwd=run.out, capture_output=True, text=True, check=True)
    assert "no work to do" in again.stdout, again.stdout
    if shutil.which("readelf") is None:  # last: every check above has run
        pytest.skip("no readelf, to read which libopenvino.so.NNNN the library asks for")
    readelf = ["readelf", "-d", str(run.out / "libcst_ops.so")]
    dynamic = subprocess.run(readelf, capture_output=True, text=True, check=True).stdout
    assert f"[{libopenvino.name}]" in dynamic, dynamic  # by that name


def test_the_program_runs_from_a_folder_of_the_shipped_libraries(run, tmp_path):
    """README, step 8: cst_host, libcst_ops.so and the seven libraries it names, in one folder, run from there."""
    if platform.machine() != "x86_64":
        pytest.skip("the list in README.md is the x86_64 wheel's")
    shipped = ["libopenvino.so.2641", "libopenvino_onnx_frontend.so.2641", "libopenvino_intel_cpu_plugin.so",
               "libtbb.so.12", "libtbbmalloc.so.2", "libtbbbind_2_5.so.3", "libhwloc.so.15"]
    for path in [*(PACKAGE / "libs" / name for name in shipped), run.out / "cst_host", run.out / "libcst_ops.so",
                 run.out / "foo_net.onnx"]:
        shutil.copy(path, tmp_path)
    env = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path), LD_DEBUG="libs")
    command = ["./cst_host", "./libcst_ops.so", "foo_net.onnx"]
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    loaded = [line.split()[-1] for line in result.stderr.splitlines() if "calling init:" in line]
    ours = [path for path in loaded if "openvino" in path or "tbb" in path or "hwloc" in path]
    assert ours and all(path.startswith(str(tmp_path)) for path in ours), ours
    assert sorted(pathlib.Path(p).name for p in ours) == sorted(shipped), ours
    command = [str(run.out / "cst_host"), str(run.out / "libcst_ops.so"), "foo_net.onnx"]
    assert result.stdout == subprocess.run(command, cwd=run.out, capture_output=True, text=True, check=True).stdout


def retyped(source: pathlib.Path, elem_type: int, path: pathlib.Path) -> pathlib.Path:
    """SOURCE with every input and output of type ELEM_TYPE: the custom node then takes it."""
    model = onnx.load(source)
    for value in [*model.graph.input, *model.graph.output]:
        value.type.tensor_type.elem_type = elem_type
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("kind", ["f16", "bf16"])
@pytest.mark.parametrize("name", ["threshold", "dual_residual", "foo"])
def test_the_kernels_compute_f16_and_bf16(run, cores, tmp_path, name, kind):
    """Step 7: each op, C++ and Python, evaluated on f16 and bf16 tensors (Model.evaluate: on every CPU)."""
    elem_type, dtype, ulp = LOW[kind]
    path = retyped(run.out / f"{name}.onnx", elem_type, tmp_path / f"{name}_{kind}.onnx")
    torch.manual_seed(1)
    model = {"threshold": torch.nn.Threshold(0.1, 20), "dual_residual": example.DualResidual(),
             "foo": example.Foo()}[name]
    shapes = [(1, 3, 16, 16)] * (1 if name == "threshold" else 2)
    inputs = [torch.randn(shape).to(dtype).float() for shape in shapes]  # held exactly by dtype
    # PyTorch's float32 result rounded to the type (both round to nearest even: NumPy's, ml_dtypes', rounded<T>)
    expected = [t.to(dtype).float().numpy() for t in example.pytorch_outputs(model, inputs)]
    results = {}
    for label, core in cores.items():
        network = core.read_model(str(path))
        (node,) = [op for op in network.get_ops() if op.get_type_name() in OV_TYPES]
        element_type = node.get_input_element_type(0)
        assert element_type.get_type_name() == kind, node
        feeds = [openvino.Tensor(element_type, list(value.shape)) for value in inputs]
        for tensor, value in zip(feeds, inputs, strict=True):
            example.store(tensor, value.numpy())
        outputs = [openvino.Tensor(element_type, [1]) for _ in network.outputs]
        assert network.evaluate(outputs, feeds), (label, name, kind)
        results[label] = [example.as_float32(t) for t in outputs]
        # within one ulp (a compiler may fuse x * alpha - y; Foo sums in another order); threshold picks: exactly
        for actual, wanted in zip(results[label], expected, strict=True):
            np.testing.assert_allclose(actual, wanted, rtol=0 if name == "threshold" else ulp, atol=0, err_msg=label)
    for cpp, python in zip(results["C++"], results["Python"], strict=True):
        np.testing.assert_allclose(cpp, python, rtol=ulp if name == "foo" else 0, atol=0)


def test_the_cpp_rounding_is_numpys(run, tmp_path):
    """rounded<T> rounds float32 to f16 and bf16 bit for bit as NumPy, ml_dtypes do; ov::bfloat16(float) does not."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(0)
    edges = [0.0, -0.0, np.inf, -np.inf, np.nan, 65504, 65519.99, 65520, 6.1035156e-05, 6.1e-05, 2.98e-08, 2.99e-08,
             1e-10, 3.4e38, 1.0058594, 1.9071250e-06]
    values = np.concatenate([np.array(edges, dtype=np.float32), rng.standard_normal(20000).astype(np.float32) * 10,
                             rng.standard_normal(20000).astype(np.float32) * 1e-5,
                             rng.integers(0, 2**32, 40000, dtype=np.uint64).astype(np.uint32).view(np.float32)])
    (tmp_path / "in.bin").write_bytes(values.tobytes())
    (tmp_path / "rounding.cpp").write_text(example.CPP_HEADER + """
#include <cstdio>
int main() {
    FILE *in = std::fopen("in.bin", "rb"), *out = std::fopen("out.bin", "wb");
    float v;
    while (std::fread(&v, 4, 1, in) == 1) {
        const uint16_t bits[4] = {rounded<ov::float16>(v).to_bits(), rounded<ov::bfloat16>(v).to_bits(),
                                  ov::float16(v).to_bits(), ov::bfloat16(v).to_bits()};
        std::fwrite(bits, 2, 4, out);
    }
}
""")
    (library,) = PACKAGE.glob("libs/libopenvino.so.*")
    compile_ = [os.environ.get("CXX", "c++"), "-std=c++17", "-O2", f"-I{PACKAGE / 'include'}", "rounding.cpp", "-o",
                "rounding", str(library), f"-Wl,-rpath,{PACKAGE / 'libs'}"]
    subprocess.run(compile_, cwd=tmp_path, check=True, capture_output=True)
    subprocess.run([str(tmp_path / "rounding")], cwd=tmp_path, check=True)
    bits = np.frombuffer((tmp_path / "out.bin").read_bytes(), dtype=np.uint16).reshape(-1, 4)
    with np.errstate(over="ignore", invalid="ignore"):  # NaN and the overflow, on purpose
        wanted = [values.astype(np.float16).view(np.uint16), values.astype(ml_dtypes.bfloat16).view(np.uint16)]
    nan = np.isnan(values)
    for column, (low_type, want) in enumerate(zip((np.float16, ml_dtypes.bfloat16), wanted, strict=True)):
        got = bits[:, column]
        assert np.array_equal(got[~nan], want[~nan]), low_type
        assert np.isnan(got[nan].view(low_type).astype(np.float32)).all(), low_type
    assert not np.array_equal(bits[:, 3], wanted[1]), "ov::bfloat16(float) rounds as NumPy now"


def test_the_element_type_the_plugin_hands_the_kernel(run, cores, tmp_path):
    """Step 7 and its Notes, from OpenVINO's source (precision_support.cpp): which element type reaches the kernel."""
    source = run.out / "threshold.onnx"
    handed = {kind: example.kernel_type(cores["C++"], str(retyped(source, elem_type, tmp_path / f"{kind}.onnx")), {})
              for kind, (elem_type, _, _) in LOW.items()}
    precision = cores["C++"].compile_model(str(source), "CPU").get_property("INFERENCE_PRECISION_HINT").get_type_name()
    assert handed["f16"] == ("f16" if precision == "f16" else "f32"), handed  # f32 unless the plugin infers in f16
    flags = set(pathlib.Path("/proc/cpuinfo").read_text().split())
    if platform.machine() == "x86_64" and {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        assert handed["bf16"] == "bf16", handed  # avx512_core keeps a bf16 model's bf16
    elif platform.machine() != "x86_64":
        assert handed["bf16"] == "f32", handed  # no bf16 path on Arm
    bf16 = cores["C++"].compile_model(str(run.out / "threshold_net.onnx"), "CPU", {"INFERENCE_PRECISION_HINT": "bf16"})
    kinds = {op.get_rt_info()["layerType"].astype(str): op.get_rt_info()["runtimePrecision"].astype(str)
             for op in bf16.get_runtime_model().get_ordered_ops()}
    assert kinds["Reference"] == "f32", kinds  # an f32 model reaches the kernel in f32 under the bf16 precision
    if bf16.get_property("INFERENCE_PRECISION_HINT").get_type_name() == "bf16":
        assert kinds["Convolution"] == "bf16", kinds  # the Reorders convert on each side
    # README, Notes (Speed): in f32 too, the op runs through evaluate(), in the plain layout, between reorders
    compiled = cores["C++"].compile_model(str(run.out / "threshold_net.onnx"), "CPU", example.F32)
    layers = [(op.get_friendly_name(), op.get_rt_info()["layerType"].astype(str))
              for op in compiled.get_runtime_model().get_ordered_ops()]
    (index,) = [i for i, (_, kind) in enumerate(layers) if kind == "Reference"]
    assert layers[index][0].endswith("cstThreshold"), layers
    assert [kind for _, kind in layers[index - 1 : index + 2] if kind != "Const"] == ["Reorder", "Reference", "Reorder"]


@pytest.fixture(scope="module")
def symbolics():
    """test.py's dynamo=False symbolics, registered for this module's exports only."""
    from torch.onnx import register_custom_op_symbolic, unregister_custom_op_symbolic

    ops = [("aten::threshold", example.threshold_symbolic), ("cst_py::dual_residual", example.dual_residual_symbolic),
           ("cst_py::foo_forward", example.foo_symbolic)]
    for name, symbolic in ops:
        register_custom_op_symbolic(name, symbolic, 12)
    yield
    for name, _ in ops:
        unregister_custom_op_symbolic(name, 12)


def export(model, inputs, path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript-based exporter's DeprecationWarning
        torch.onnx.export(model, inputs, str(path), dynamo=False, opset_version=12, custom_opsets={"rknn_cst": 1})


def test_tolerance_holds_over_seeds_and_at_the_threshold(cores, symbolics, tmp_path):
    """README, Notes: rtol=1e-5, atol=1e-5 against PyTorch; C++ against Python within rtol=1e-6."""
    used = {}
    for seed in SEEDS:
        torch.manual_seed(seed)
        x, y = torch.randn(1, 3, 16, 16), torch.randn(1, 3, 16, 16)
        models = {}  # step 1's and 9's, in their order (the Convs draw from the seed)
        for name, op, inputs, outs in [("threshold", torch.nn.Threshold(0.1, 20), (x,), 1),
                                       ("dual_residual", example.DualResidual(), (x, y), 2),
                                       ("foo", example.Foo(), (x, y), 1)]:
            models.update({name: (op, inputs), f"{name}_net": (example.MidGraph(op, len(inputs), outs), (x,))})
        for name, (model, inputs) in models.items():
            model.eval()
            export(model, inputs, path := str(tmp_path / f"{name}.onnx"))
            expected = [t.detach().numpy() for t in example.pytorch_outputs(model, inputs)]
            results = {kind: example.run_openvino(core, path, inputs) for kind, core in cores.items()}
            for kind, outputs in results.items():
                for actual, wanted in zip(outputs, expected, strict=True):
                    np.testing.assert_allclose(actual, wanted, rtol=RTOL, atol=ATOL, err_msg=f"{name} {kind}")
                    fraction = np.max(np.abs(actual - wanted) / (ATOL + RTOL * np.abs(wanted)))
                    used[name] = max(used.get(name, 0.0), float(fraction))
            rtol = 1e-6 if name.startswith("foo") else 0  # foo: both ops sum in double, in other orders
            for cpp, python in zip(results["C++"], results["Python"], strict=True):  # else the same float32 numbers
                np.testing.assert_allclose(cpp, python, rtol=rtol, atol=0, err_msg=name)
    # The README's figures: alone, threshold and dual_residual are exact; nothing near the limit
    assert used["threshold"] == 0.0 and used["dual_residual"] == 0.0, used
    assert max(used.values()) < 0.6, used
    # torch's rule at the edges, NaN included: x <= 0.1 gives 20, else x; NaN stays NaN; exact in both ops
    threshold = np.float32(0.1)
    values = [np.nan, -np.inf, np.inf, 0.0, -0.0, threshold, 20.0, -20.0]
    values += [np.nextafter(threshold, np.float32(1)), np.nextafter(threshold, np.float32(0))]
    x = torch.tensor(values * 3, dtype=torch.float32).reshape(1, 3, 1, len(values))
    model = torch.nn.Threshold(0.1, 20).eval()
    export(model, (x,), tmp_path / "edges.onnx")
    for kind, core in cores.items():
        (actual,) = example.run_openvino(core, str(tmp_path / "edges.onnx"), (x,))
        np.testing.assert_array_equal(actual, model(x).numpy(), err_msg=kind)


def test_the_opset_ops_hold_over_seeds_and_at_the_threshold(symbolics, tmp_path):
    """README, step 3 and Notes: the nodes rebuilt from OpenVINO's ops, rtol=1e-5, atol=1e-5, no kernel of ours."""
    core = openvino.Core()
    for name, convert in [("cstThreshold", example.threshold_from_ops),
                          ("cstDualResidual", example.dual_residual_from_ops), ("Foo", example.foo_from_ops)]:
        core.add_extension(example.ConversionExtension(name, "rknn_cst", convert))
    for seed in SEEDS:
        torch.manual_seed(seed)
        x, y = torch.randn(1, 3, 16, 16), torch.randn(1, 3, 16, 16)
        for name, op, inputs, outs in [("threshold", torch.nn.Threshold(0.1, 20), (x,), 1),
                                       ("dual_residual", example.DualResidual(), (x, y), 2),
                                       ("foo", example.Foo(), (x, y), 1)]:
            for net, model, feeds in [("", op, inputs), ("_net", example.MidGraph(op, len(inputs), outs), (x,))]:
                model.eval()
                export(model, feeds, path := str(tmp_path / f"{name}{net}.onnx"))
                expected = [t.detach().numpy() for t in example.pytorch_outputs(model, feeds)]
                for actual, wanted in zip(example.run_openvino(core, path, feeds), expected, strict=True):
                    np.testing.assert_allclose(actual, wanted, rtol=RTOL, atol=ATOL, err_msg=f"{name}{net} {seed}")
    compiled = core.compile_model(str(tmp_path / "foo_net.onnx"), "CPU", example.F32)
    layers = [op.get_rt_info()["layerType"].astype(str) for op in compiled.get_runtime_model().get_ordered_ops()]
    assert "Reference" not in layers, layers
    threshold = np.float32(0.1)  # torch's rule at the edges, NaN included, exactly
    values = [np.nan, -np.inf, np.inf, 0.0, -0.0, threshold, 20.0, -20.0]
    values += [np.nextafter(threshold, np.float32(1)), np.nextafter(threshold, np.float32(0))]
    x = torch.tensor(values * 3, dtype=torch.float32).reshape(1, 3, 1, len(values))
    model = torch.nn.Threshold(0.1, 20).eval()
    export(model, (x,), tmp_path / "edges.onnx")
    (actual,) = example.run_openvino(core, str(tmp_path / "edges.onnx"), (x,))
    np.testing.assert_array_equal(actual, model(x).numpy())


def test_the_onnxruntime_wheel_ships_its_library_but_no_headers():
    """README, Notes: why an ONNX Runtime custom-op library is not built from the package index."""
    package = pathlib.Path(onnxruntime.__file__).parent
    assert list(package.glob("capi/libonnxruntime.so*")), "the wheel's library is gone"
    headers = [*package.rglob("*.h"), *package.rglob("*.hpp")]
    assert not headers, f"the onnxruntime wheel now ships headers: {headers[:3]}"


def test_the_benchmark_runs(run, tmp_path):
    """benchmark.py is a measurement, not a test: only that it runs and prints its table."""
    if example.harness.TORCH < (2, 6):
        pytest.skip("benchmark.py exports with custom_translation_table (torch >= 2.6)")
    shutil.copytree(run.out, tmp_path, dirs_exist_ok=True)  # reuse the example's build
    command = [sys.executable, str(ROOT / NAME / "benchmark.py"), "--out", str(tmp_path), "--sizes", "8", "--runs", "2"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "| model | H x W | precision | C++ kernel | Python op | standard ops |" in result.stdout
    precisions = [line.split("|")[3].strip() for line in result.stdout.splitlines() if "| 8x8 |" in line]
    default = openvino.Core().compile_model(openvino.Model([], [], "empty"), "CPU")
    own = default.get_property("INFERENCE_PRECISION_HINT").get_type_name()  # bf16 or f16 rows too
    assert sorted(precisions) == sorted(["f32"] * 3 + ([own] * 3 if own != "f32" else [])), precisions
