"""What deploy_openvino/test.py writes: one rknn_cst node per model, alone and between Convs, from
both exporters; the C++ library and program it leaves in --out (cached by ninja), built with the
commands README.md shows, and a folder of the libraries step 8 names to ship; the tolerance of its
OpenVINO comparisons over other seeds, NaN and the threshold's float32 neighbours; and the facts
its Notes state (float32 reaches the kernels, the onnxruntime wheel ships no C API headers)."""

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
import pytest
import torch
from conftest import ROOT, load_example, passed

NAME = "deploy_openvino"
SEEDS = range(20)
RTOL, ATOL = 1e-5, 1e-5  # README, Notes: every model against PyTorch, in f32
NAMES = ("threshold", "threshold_net", "dual_residual", "dual_residual_net", "foo", "foo_net")

openvino = pytest.importorskip("openvino")


example = load_example(NAME)


@pytest.fixture(scope="module")
def run(example_run):
    return passed(example_run(NAME))  # skips the module when the example skipped itself (no compiler)


def exported(run) -> list[str]:
    """The models the run wrote: the dynamo=True ones need torch 2.6."""
    prefixes = ("", "dynamo_") if example.harness.TORCH >= (2, 6) else ("",)
    return [f"{prefix}{name}.onnx" for prefix in prefixes for name in NAMES]


def custom_node(model):
    (node,) = [n for n in model.graph.node if n.domain == "rknn_cst"]
    return node, {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def test_each_model_holds_its_node_with_its_attributes(run):
    for filename in exported(run):
        model = run.model(filename)
        node, attributes = custom_node(model)
        onnx.checker.check_model(model, full_check=True)
        if filename.removeprefix("dynamo_").startswith("threshold"):
            assert node.op_type == "cstThreshold"
            assert attributes == {"threshold": np.float32(0.1), "value": 20.0}, attributes
        elif filename.removeprefix("dynamo_").startswith("dual_residual"):
            assert node.op_type == "cstDualResidual" and attributes == {"alpha": 0.5}
            assert len(node.output) == 2
        else:
            assert node.op_type == "Foo"
            assert attributes["scales"] == [1.0, 2.0, 3.0] and attributes["dims"] == [2, 3]
            assert (attributes["alpha"], attributes["beta"], attributes["mode"]) == (0.5, 2, b"sub")


def test_mid_graph_models_put_the_node_between_convs(run):
    for filename in exported(run):
        if "_net" not in filename:
            continue
        ops = [n.op_type for n in run.model(filename).graph.node]
        custom = next(
            i for i, op in enumerate(ops) if op in ("cstThreshold", "cstDualResidual", "Foo")
        )
        assert "Conv" in ops[:custom] and ops[-1] == "Conv", (filename, ops)


def test_dynamo_models_leave_the_schema_registry_alone(run):
    if example.harness.TORCH < (2, 6):
        pytest.skip("no dynamo=True models before torch 2.6")
    for name in NAMES:
        node, _ = custom_node(run.model(f"dynamo_{name}.onnx"))
        assert not onnx.defs.has(node.op_type, "rknn_cst")


def test_the_library_is_left_in_out_and_is_an_openvino_extension(run):
    library = run.out / "libcst_ops.so"
    assert library.is_file() and (run.out / "cst_ops.cpp").is_file()
    assert (run.out / "cst_host").is_file() and (run.out / "cst_host.cpp").is_file()
    assert hasattr(ctypes.CDLL(str(library)), "create_extensions")  # OPENVINO_CREATE_EXTENSIONS
    twin = (run.out / "failures" / "cst_ops_float_list.cpp").read_text().splitlines()
    source = (run.out / "cst_ops.cpp").read_text().splitlines()
    changed = [(a, b) for a, b in zip(source, twin, strict=True) if a != b]
    assert changed == [
        ("using FloatList = std::vector<double>;", "using FloatList = std::vector<float>;")
    ]


def test_readme_build_commands_are_what_ninja_runs(run):
    """README, step 8: the two compiler commands, with OV the wheel's folder, are build.ninja's."""
    readme = (ROOT / NAME / "README.md").read_text(encoding="utf-8")
    (block,) = [b for b in re.findall(r"^```bash\n(.*?)^```", readme, re.S | re.M) if "OV=" in b]
    commands = block.replace("\\\n", " ").splitlines()[1:]
    openvino_dir = str(pathlib.Path(openvino.__file__).parent)
    ninja = pathlib.Path(example.ninja.BIN_DIR) / "ninja"
    for target, command in zip(("libcst_ops.so", "cst_host"), commands, strict=True):
        ran = subprocess.run(
            [str(ninja), "-t", "commands", target], cwd=run.out, capture_output=True, text=True,
            check=True,
        ).stdout.splitlines()[-1]
        shown = " ".join(command.replace("$OV", openvino_dir).split())
        compiler = os.environ.get("CXX", "c++")
        assert ran == shown.replace("c++", compiler, 1), (ran, shown)


def test_the_library_needs_this_releases_libopenvino(run):
    """README, step 8: the library asks for the wheel's libopenvino.so.NNNN by that name."""
    if shutil.which("readelf") is None:
        pytest.skip("no readelf")
    dynamic = subprocess.run(
        ["readelf", "-d", str(run.out / "libcst_ops.so")], capture_output=True, text=True,
        check=True,
    ).stdout
    (libopenvino,) = pathlib.Path(openvino.__file__).parent.glob("libs/libopenvino.so.*")
    assert f"[{libopenvino.name}]" in dynamic, dynamic
    assert libopenvino.name == "libopenvino.so.2641", "README names libopenvino.so.2641"


def test_the_program_runs_from_a_folder_of_the_shipped_libraries(run, tmp_path):
    """README, step 8: cst_host, libcst_ops.so and the seven libraries it names, in one folder,
    run with LD_LIBRARY_PATH set to it: every OpenVINO library comes from there."""
    if platform.machine() != "x86_64":
        pytest.skip("the list in README.md is the x86_64 wheel's")
    libs = pathlib.Path(openvino.__file__).parent / "libs"
    shipped = [
        "libopenvino.so.2641", "libopenvino_onnx_frontend.so.2641",
        "libopenvino_intel_cpu_plugin.so", "libtbb.so.12", "libtbbmalloc.so.2",
        "libtbbbind_2_5.so.3", "libhwloc.so.15",
    ]
    for name in shipped:
        shutil.copy(libs / name, tmp_path)
    for name in ("cst_host", "libcst_ops.so", "foo_net.onnx"):
        shutil.copy(run.out / name, tmp_path)
    env = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path), LD_DEBUG="libs")
    result = subprocess.run(
        ["./cst_host", "./libcst_ops.so", "foo_net.onnx"], cwd=tmp_path, env=env,
        capture_output=True, text=True, check=True,
    )
    loaded = [line.split()[-1] for line in result.stderr.splitlines() if "calling init:" in line]
    ours = [path for path in loaded if "openvino" in path or "tbb" in path or "hwloc" in path]
    assert ours and all(path.startswith(str(tmp_path)) for path in ours), ours
    assert sorted(pathlib.Path(p).name for p in ours) == sorted(shipped), ours
    again = subprocess.run(
        [str(run.out / "cst_host"), str(run.out / "libcst_ops.so"), "foo_net.onnx"],
        cwd=run.out, capture_output=True, text=True, check=True,
    )
    assert result.stdout == again.stdout


LOW = {  # element type -> (ONNX's, torch's, one unit in the last place at 1)
    "f16": (onnx.TensorProto.FLOAT16, torch.float16, 2.0**-10),
    "bf16": (onnx.TensorProto.BFLOAT16, torch.bfloat16, 2.0**-7),
}

OV_TYPES = ("CstThreshold", "CstDualResidual", "Foo", "FooOv")  # the ops as OpenVINO names them


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
    """Step 7: each op, C++ and Python, evaluated directly on f16 and bf16 tensors (Model.evaluate,
    no plugin, so on every CPU, whatever precision it computes in): each output is PyTorch's
    float32 result on the same values, rounded to the type, within one unit in the last place (a
    compiler may fuse x * alpha - y into one rounding; Foo sums in another order); threshold only
    picks x or value, so exactly. Both libraries round to nearest even (NumPy's, ml_dtypes'
    rounding; the C++ ops' rounded<T>), so the C++ and Python ops agree but for those sums."""
    elem_type, dtype, ulp = LOW[kind]
    path = retyped(run.out / f"{name}.onnx", elem_type, tmp_path / f"{name}_{kind}.onnx")
    torch.manual_seed(1)
    model = {
        "threshold": torch.nn.Threshold(0.1, 20), "dual_residual": example.DualResidual(),
        "foo": example.Foo(),
    }[name]
    shapes = [(1, 3, 16, 16)] * (1 if name == "threshold" else 2)
    inputs = [torch.randn(shape).to(dtype).float() for shape in shapes]  # held exactly by dtype
    expected = [t.to(dtype).float().numpy() for t in example.pytorch_outputs(model, inputs)]
    results = {}
    for label, core in cores.items():
        network = core.read_model(str(path))
        (node,) = [op for op in network.get_ops() if op.get_type_name() in OV_TYPES]
        assert node.get_input_element_type(0).get_type_name() == kind, node
        feeds = []
        for value in inputs:
            tensor = openvino.Tensor(node.get_input_element_type(0), list(value.shape))
            example.store(tensor, value.numpy())
            feeds.append(tensor)
        outputs = [openvino.Tensor(node.get_input_element_type(0), [1]) for _ in network.outputs]
        assert network.evaluate(outputs, feeds), (label, name, kind)
        results[label] = [example.as_float32(t) for t in outputs]
        rtol = 0 if name == "threshold" else ulp
        for actual, wanted in zip(results[label], expected, strict=True):
            np.testing.assert_allclose(actual, wanted, rtol=rtol, atol=0, err_msg=label)
    for cpp, python in zip(results["C++"], results["Python"], strict=True):
        np.testing.assert_allclose(cpp, python, rtol=ulp if name == "foo" else 0, atol=0)


def test_the_cpp_rounding_is_numpys(run, tmp_path):
    """rounded<T> (CPP_HEADER) rounds float32 to f16 and bf16 as NumPy and ml_dtypes do, bit for
    bit, NaN, infinities, subnormals and the overflow to infinity included; ov::float16(float) and
    ov::bfloat16(float), which it replaces, do not (step 5's comment)."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(0)
    edges = [0.0, -0.0, np.inf, -np.inf, np.nan, 65504, 65519.99, 65520, 6.1035156e-05, 6.1e-05,
             2.98e-08, 2.99e-08, 1e-10, 3.4e38, 1.0058594, 1.9071250e-06]
    values = np.concatenate([
        np.array(edges, dtype=np.float32), rng.standard_normal(20000).astype(np.float32) * 10,
        rng.standard_normal(20000).astype(np.float32) * 1e-5,
        rng.integers(0, 2**32, 40000, dtype=np.uint64).astype(np.uint32).view(np.float32),
    ])
    (tmp_path / "in.bin").write_bytes(values.tobytes())
    program = example.CPP_HEADER + """
#include <cstdio>
int main() {
    FILE* in = std::fopen("in.bin", "rb");
    FILE* out = std::fopen("out.bin", "wb");
    float v;
    while (std::fread(&v, 4, 1, in) == 1) {
        const uint16_t bits[4] = {rounded<ov::float16>(v).to_bits(),
                                  rounded<ov::bfloat16>(v).to_bits(),
                                  ov::float16(v).to_bits(), ov::bfloat16(v).to_bits()};
        std::fwrite(bits, 2, 4, out);
    }
}
"""
    (tmp_path / "rounding.cpp").write_text(program)
    package = pathlib.Path(openvino.__file__).parent
    (library,) = package.glob("libs/libopenvino.so.*")
    compiler = os.environ.get("CXX", "c++")
    subprocess.run(
        [compiler, "-std=c++17", "-O2", f"-I{package / 'include'}", "rounding.cpp", "-o", "rounding",
         str(library), f"-Wl,-rpath,{package / 'libs'}"],
        cwd=tmp_path, check=True, capture_output=True,
    )
    subprocess.run([str(tmp_path / "rounding")], cwd=tmp_path, check=True)
    bits = np.frombuffer((tmp_path / "out.bin").read_bytes(), dtype=np.uint16).reshape(-1, 4)
    with np.errstate(over="ignore", invalid="ignore"):  # NaN and the overflow, on purpose
        wanted = [values.astype(np.float16).view(np.uint16),
                  values.astype(ml_dtypes.bfloat16).view(np.uint16)]
    nan = np.isnan(values)
    for column, (kind, want) in enumerate(zip(("f16", "bf16"), wanted, strict=True)):
        got = bits[:, column]
        assert np.array_equal(got[~nan], want[~nan]), kind
        low = got[nan].view(np.float16) if kind == "f16" else got[nan].view(ml_dtypes.bfloat16)
        assert np.isnan(low.astype(np.float32)).all(), kind
    assert not np.array_equal(bits[:, 3], wanted[1]), "ov::bfloat16(float) rounds as NumPy now"



def test_the_plugin_hands_a_bf16_model_bf16_where_x86_has_avx512(run, cores, tmp_path):
    """Step 7 and its Notes, from OpenVINO's source: the CPU plugin keeps a bf16 model's bf16 on an
    x86 CPU with AVX-512 (precision_support.cpp: avx512_core), converts it to f32 elsewhere; an f16
    model becomes f32 unless the plugin infers in f16; an f32 model reaches the kernel in f32 under
    the bf16 precision (the Reorders around the Reference layer convert)."""
    source = run.out / "threshold.onnx"
    handed = {}
    for kind, (elem_type, _, _) in LOW.items():
        path = retyped(source, elem_type, tmp_path / f"{kind}.onnx")
        handed[kind] = example.kernel_type(cores["C++"], str(path), {})
    default = cores["C++"].compile_model(str(source), "CPU")
    precision = default.get_property("INFERENCE_PRECISION_HINT").get_type_name()
    assert handed["f16"] == ("f16" if precision == "f16" else "f32"), handed
    flags = set(pathlib.Path("/proc/cpuinfo").read_text().split())
    if platform.machine() == "x86_64" and {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        assert handed["bf16"] == "bf16", handed
    elif platform.machine() != "x86_64":
        assert handed["bf16"] == "f32", handed  # no bf16 path on Arm (precision_support.cpp)
    bf16 = cores["C++"].compile_model(
        str(run.out / "threshold_net.onnx"), "CPU", {"INFERENCE_PRECISION_HINT": "bf16"}
    )
    kinds = {
        op.get_rt_info()["layerType"].astype(str): op.get_rt_info()["runtimePrecision"].astype(str)
        for op in bf16.get_runtime_model().get_ordered_ops()
    }
    assert kinds["Reference"] == "f32", kinds
    if bf16.get_property("INFERENCE_PRECISION_HINT").get_type_name() == "bf16":
        assert kinds["Convolution"] == "bf16", kinds  # the Reorders convert on each side


def test_the_build_is_cached(run):
    """A second ninja run in the same folder builds nothing (what test.py prints on a rerun)."""
    ninja = pathlib.Path(example.ninja.BIN_DIR) / "ninja"
    again = subprocess.run([str(ninja)], cwd=run.out, capture_output=True, text=True, check=True)
    assert "no work to do" in again.stdout, again.stdout


@pytest.fixture(scope="module")
def cores(run):
    """The C++ library test.py built, and the Python ops, each in its own Core."""
    cpp = openvino.Core()
    cpp.add_extension(str(run.out / "libcst_ops.so"))
    python = openvino.Core()
    for name, convert in [
        ("cstThreshold", example.convert_threshold),
        ("cstDualResidual", example.convert_dual_residual),
        ("Foo", example.convert_foo),
    ]:
        python.add_extension(example.ConversionExtension(name, "rknn_cst", convert))
    return {"C++": cpp, "Python": python}


@pytest.fixture(scope="module")
def symbolics():
    """test.py's dynamo=False symbolics, registered for this module's exports only."""
    from torch.onnx import register_custom_op_symbolic, unregister_custom_op_symbolic

    ops = [
        ("aten::threshold", example.threshold_symbolic),
        ("cst_py::dual_residual", example.dual_residual_symbolic),
        ("cst_py::foo_forward", example.foo_symbolic),
    ]
    for name, symbolic in ops:
        register_custom_op_symbolic(name, symbolic, 12)
    yield
    for name, _ in ops:
        unregister_custom_op_symbolic(name, 12)


def export(model, inputs, path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript-based exporter's DeprecationWarning
        torch.onnx.export(
            model, inputs, str(path), dynamo=False, opset_version=12, custom_opsets={"rknn_cst": 1}
        )


def test_tolerance_holds_over_seeds(cores, symbolics, tmp_path):
    """README, Notes: rtol=1e-5, atol=1e-5 against PyTorch; C++ against Python within rtol=1e-6."""
    used = {}
    for seed in SEEDS:
        torch.manual_seed(seed)
        x, y = torch.randn(1, 3, 16, 16), torch.randn(1, 3, 16, 16)
        models = {
            "threshold": (torch.nn.Threshold(0.1, 20).eval(), (x,)),
            "threshold_net": (example.MidGraph(torch.nn.Threshold(0.1, 20), 1, 1).eval(), (x,)),
            "dual_residual": (example.DualResidual().eval(), (x, y)),
            "dual_residual_net": (example.MidGraph(example.DualResidual(), 2, 2).eval(), (x,)),
            "foo": (example.Foo().eval(), (x, y)),
            "foo_net": (example.MidGraph(example.Foo(), 2, 1).eval(), (x,)),
        }
        for name, (model, inputs) in models.items():
            path = tmp_path / f"{name}.onnx"
            export(model, inputs, path)
            expected = [t.detach().numpy() for t in example.pytorch_outputs(model, inputs)]
            results = {
                kind: example.run_openvino(core, str(path), inputs) for kind, core in cores.items()
            }
            for kind, outputs in results.items():
                for actual, wanted in zip(outputs, expected, strict=True):
                    np.testing.assert_allclose(
                        actual, wanted, rtol=RTOL, atol=ATOL, err_msg=f"{name} {kind}"
                    )
                    fraction = np.max(np.abs(actual - wanted) / (ATOL + RTOL * np.abs(wanted)))
                    used[name] = max(used.get(name, 0.0), float(fraction))
            for cpp, python in zip(results["C++"], results["Python"], strict=True):
                if name.startswith("foo"):  # both sum in double, in other orders
                    np.testing.assert_allclose(cpp, python, rtol=1e-6, atol=0, err_msg=name)
                else:  # the same float32 arithmetic: the same numbers
                    np.testing.assert_array_equal(cpp, python, err_msg=name)
    # The README's figures: alone, threshold and dual_residual are exact; nothing near the limit
    assert used["threshold"] == 0.0 and used["dual_residual"] == 0.0, used
    assert max(used.values()) < 0.6, used


def test_threshold_edges_and_nan(cores, symbolics, tmp_path):
    """torch's rule, NaN included: x <= 0.1 gives 20, else x; NaN stays NaN; exact in both ops."""
    threshold = np.float32(0.1)
    values = [np.nan, -np.inf, np.inf, 0.0, -0.0, threshold, 20.0, -20.0]
    values += [np.nextafter(threshold, np.float32(1)), np.nextafter(threshold, np.float32(0))]
    x = torch.tensor(values * 3, dtype=torch.float32).reshape(1, 3, 1, len(values))
    model = torch.nn.Threshold(0.1, 20).eval()
    export(model, (x,), tmp_path / "threshold.onnx")
    for kind, core in cores.items():
        (actual,) = example.run_openvino(core, str(tmp_path / "threshold.onnx"), (x,))
        np.testing.assert_array_equal(actual, model(x).numpy(), err_msg=kind)


def test_the_onnxruntime_wheel_ships_its_library_but_no_headers():
    """README, Notes: why an ONNX Runtime custom-op library is not built from the package index."""
    import onnxruntime

    package = pathlib.Path(onnxruntime.__file__).parent
    assert list(package.glob("capi/libonnxruntime.so*")), "the wheel's library is gone"
    headers = [p for p in package.rglob("*.h")] + [p for p in package.rglob("*.hpp")]
    assert not headers, f"the onnxruntime wheel now ships headers: {headers[:3]}"


def test_the_openvino_wheel_ships_what_the_build_uses():
    package = pathlib.Path(openvino.__file__).parent
    assert (package / "include/openvino/frontend/onnx/extension/op.hpp").is_file()
    assert len(list(package.glob("libs/libopenvino.so.*"))) == 1
    assert not (package / "libs/libopenvino.so").exists()  # hence the versioned name in build.ninja


def test_the_custom_node_runs_as_a_reference_layer_between_reorders(run, cores):
    """README, Notes (Speed): the CPU plugin runs the custom op through its evaluate() fallback, in
    the plain layout, with a reorder before and after it."""
    compiled = cores["C++"].compile_model(str(run.out / "threshold_net.onnx"), "CPU", example.F32)
    layers = [
        (op.get_friendly_name(), op.get_rt_info()["layerType"].astype(str))
        for op in compiled.get_runtime_model().get_ordered_ops()
    ]
    (index,) = [i for i, (_, kind) in enumerate(layers) if kind == "Reference"]
    assert layers[index][0].endswith("cstThreshold"), layers
    around = [kind for _, kind in layers[index - 1 : index + 2] if kind != "Const"]
    assert around == ["Reorder", "Reference", "Reorder"], layers


def test_the_benchmark_runs(run, tmp_path):
    """benchmark.py is a measurement, not a test: only that it runs and prints its table."""
    if example.harness.TORCH < (2, 6):
        pytest.skip("benchmark.py exports with custom_translation_table (torch >= 2.6)")
    for name in ("libcst_ops.so", "cst_ops.cpp", "build.ninja"):  # reuse the example's build
        (tmp_path / name).write_bytes((run.out / name).read_bytes())
    (tmp_path / "failures").mkdir()
    for name in ("libcst_ops_float_list.so", "cst_ops_float_list.cpp",
                 "libcst_ops_f32_only.so", "cst_ops_f32_only.cpp"):
        (tmp_path / "failures" / name).write_bytes((run.out / "failures" / name).read_bytes())
    result = subprocess.run(
        [sys.executable, str(ROOT / NAME / "benchmark.py"), "--out", str(tmp_path),
         "--sizes", "8", "--runs", "2"],
        capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "| model | H x W | precision | C++ kernel | Python op | standard ops |" in result.stdout
    precisions = [line.split("|")[3].strip() for line in result.stdout.splitlines() if "| 8x8 |" in line]
    default = openvino.Core().compile_model(openvino.Model([], [], "empty"), "CPU")
    own = default.get_property("INFERENCE_PRECISION_HINT").get_type_name()  # bf16 or f16 rows too
    assert sorted(precisions) == sorted(["f32"] * 3 + ([own] * 3 if own != "f32" else [])), precisions
