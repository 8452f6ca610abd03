"""What deploy_openvino/test.py writes and builds, its kernels on f16 and bf16 (their own code paths, called directly:
on any CPU), its tolerance, and its Notes' facts."""

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
KINDS = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}  # kernel_host's TYPE -> torch's
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


def raw(tensors) -> bytes:
    """TENSORS' bytes, one after another, as a kernel reads them (f16, bf16: 16-bit patterns)."""
    return b"".join(t.contiguous().view(torch.uint8).numpy().tobytes() for t in tensors)


def unraw(data: bytes, dtype, shapes) -> list:
    """The tensors of DTYPE and SHAPES that DATA's bytes hold, one after another."""
    values = torch.frombuffer(bytearray(data), dtype=dtype)
    sizes = [int(np.prod(shape)) for shape in shapes]
    assert values.numel() == sum(sizes), (values.numel(), sizes)
    return [part.reshape(shape) for part, shape in zip(values.split(sizes), shapes, strict=True)]


@pytest.fixture(scope="module")
def kernel_host(run, tmp_path_factory):
    """tests/kernel_host.cpp, compiled as test_the_cpp_rounding_is_numpys compiles its program: it calls a C++ op's
    has_evaluate() and evaluate() on tensors of one element type, no plugin in between."""
    folder = tmp_path_factory.mktemp("kernel_host")
    (library,) = PACKAGE.glob("libs/libopenvino.so.*")
    compile_ = [os.environ.get("CXX", "c++"), "-std=c++17", "-O2", f"-I{PACKAGE / 'include'}",
                str(ROOT / "tests" / "kernel_host.cpp"), "-o", "kernel_host", str(library),
                f"-Wl,-rpath,{PACKAGE / 'libs'}"]
    subprocess.run(compile_, cwd=folder, check=True, capture_output=True)

    def evaluate(library, model, kind, inputs, shapes):
        """LIBRARY's op in MODEL, on INPUTS of KIND: has_evaluate(), evaluate(), the outputs (of SHAPES)."""
        (folder / "in.bin").write_bytes(raw(inputs))
        (folder / "out.bin").unlink(missing_ok=True)
        command = [str(folder / "kernel_host"), str(library), str(model), kind, "in.bin", "out.bin"]
        result = subprocess.run(command, cwd=folder, capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr
        has, evaluated = (bool(int(flag)) for flag in result.stdout.split()[1::2])
        outputs = unraw((folder / "out.bin").read_bytes(), KINDS[kind], shapes) if evaluated else None
        return has, evaluated, outputs

    return evaluate


def python_evaluate(core, model, kind, inputs, shapes):
    """The same for a Python op (step 4's openvino.Op): its own has_evaluate() and evaluate(), called directly."""
    (node,) = [op for op in core.read_model(str(model)).get_ops() if op.get_type_name() in OV_TYPES]
    element_type = {"f32": openvino.Type.f32, "f16": openvino.Type.f16, "bf16": openvino.Type.bf16}[kind]
    parameters = [openvino.op.Parameter(element_type, openvino.Shape(list(t.shape))).output(0) for t in inputs]
    typed = node.clone_with_new_inputs(parameters)  # the Python op again (its class), on KIND's inputs
    feeds = [openvino.Tensor(element_type, list(t.shape)) for t in inputs]
    for feed, value in zip(feeds, inputs, strict=True):  # the bits (.data shows bf16 as float16)
        feed.data.view(np.uint8).reshape(-1)[:] = np.frombuffer(raw([value]), dtype=np.uint8)
    outputs = [openvino.Tensor(typed.get_output_element_type(i), list(typed.get_output_shape(i)))
               for i in range(typed.get_output_size())]
    has, evaluated = typed.has_evaluate(), typed.evaluate(outputs, feeds)
    if not evaluated:
        return has, evaluated, None
    return has, evaluated, unraw(b"".join(t.data.view(np.uint8).tobytes() for t in outputs), KINDS[kind], shapes)


def bits_differ(actual, wanted):
    """Where ACTUAL and WANTED differ bit for bit (-0.0 is not 0.0); NaN matches NaN, whatever its payload."""
    bits = {2: torch.int16, 4: torch.int32}[wanted.element_size()]
    nan = torch.isnan(wanted)
    return (torch.isnan(actual) != nan) | (~nan & (actual.view(bits) != wanted.view(bits)))


def kernel_inputs(name, dtype, shapes):
    """Random inputs held exactly by DTYPE; for threshold also NaN, +-inf, 0.1 and its neighbours in DTYPE."""
    torch.manual_seed(1)
    inputs = [torch.randn(shape).to(dtype) for shape in shapes]
    if name == "threshold":
        near = torch.tensor(0.1).to(dtype)  # 0.1 in DTYPE: above float32's 0.1 in bf16, below it in f16
        info = torch.finfo(dtype)
        edges = torch.tensor([float("nan"), -float("inf"), float("inf"), 0.0, -0.0, 20.0, -20.0, info.max, -info.max,
                              info.smallest_normal, info.smallest_normal / 2, 1.0, -1.0], dtype=dtype)
        edges = torch.cat([edges, near.reshape(1), torch.nextafter(near, torch.tensor(1.0, dtype=dtype)).reshape(1),
                           torch.nextafter(near, torch.tensor(0.0, dtype=dtype)).reshape(1)])
        inputs[0].view(-1)[: 3 * len(edges)] = edges.repeat(3)  # three times, first
    return inputs


@pytest.mark.parametrize("kind", ["f16", "bf16"])
@pytest.mark.parametrize("name", ["threshold", "dual_residual", "foo"])
def test_the_kernels_compute_f16_and_bf16(run, cores, kernel_host, name, kind):
    """Step 7 on any CPU: each op's own f16 and bf16 code, called directly, matches PyTorch in that type, and step
    5's f32-only library fails the same test.

    On a CPU without f16 or bf16 hardware, where the plugin hands the ops f32 only, tests/kernel_host.cpp still
    calls each C++ op's has_evaluate() and evaluate() on f16 and bf16 tensors, as the CPU plugin calls them on a
    CPU with the hardware: libcst_ops.so accepts both types and matches PyTorch, failures/libcst_ops_f32_only.so
    refuses both (and computes f32). The host loads a library with add_extension, reads the f32 model, clones its
    rknn_cst node onto f16 or bf16 Parameters and calls the clone, no plugin and no Model.evaluate in between.
    Step 4's Python ops (openvino.Op) are cloned and their has_evaluate() and evaluate() called the same way."""
    _, dtype, ulp = LOW[kind]
    model = run.out / f"{name}.onnx"
    shapes = [[d.dim_value for d in x.type.tensor_type.shape.dim] for x in run.model(f"{name}.onnx").graph.input]
    inputs = kernel_inputs(name, dtype, shapes)
    op = {"threshold": torch.nn.Threshold(0.1, 20), "dual_residual": example.DualResidual(), "foo": example.Foo()}[name]
    with torch.no_grad():
        if name == "threshold":  # PyTorch's own kernel in DTYPE: it compares in float32, x <= 0.1 -> 20
            expected = list(example.pytorch_outputs(op, inputs))
        else:  # the kernels compute in float32 and round once: PyTorch's float32 result rounded to DTYPE
            expected = [t.to(dtype) for t in example.pytorch_outputs(op, [t.float() for t in inputs])]
    out_shapes = [list(t.shape) for t in expected]
    results = {
        "C++": kernel_host(run.out / "libcst_ops.so", model, kind, inputs, out_shapes),
        "Python": python_evaluate(cores["Python"], model, kind, inputs, out_shapes),
    }
    for label, (has, evaluated, outputs) in results.items():
        assert (has, evaluated) == (True, True), f"{label} {name} in {kind}: has_evaluate {has}, evaluate {evaluated}"
        for number, (actual, wanted) in enumerate(zip(outputs, expected, strict=True)):
            message = f"{label} {name}[{number}] in {kind}"
            if name == "threshold":  # the kernel picks x or 20: bit for bit, NaN kept
                wrong = bits_differ(actual, wanted)
                shown = [t[wrong].tolist()[:5] for t in (inputs[0], actual, wanted)]
                assert not wrong.any(), f"{message}: x {shown[0]}, kernel {shown[1]}, PyTorch {shown[2]}"
            else:  # within one ulp (a compiler may fuse x * alpha - y; Foo sums in another order)
                np.testing.assert_allclose(actual.float(), wanted.float(), rtol=ulp, atol=0, err_msg=message)
    for cpp, python in zip(results["C++"][2], results["Python"][2], strict=True):
        np.testing.assert_allclose(cpp.float(), python.float(), rtol=ulp if name == "foo" else 0, atol=0)

    # The mistake step 7 teaches, in the same test: an f32-only kernel refuses DTYPE, and computes f32 (the control)
    f32_only = run.out / "failures" / "libcst_ops_f32_only.so"
    has, evaluated, _ = kernel_host(f32_only, model, kind, inputs, out_shapes)
    assert (has, evaluated) == (False, False), f"f32-only {name} in {kind}: has_evaluate {has}, evaluate {evaluated}"
    floats = [t.float() for t in inputs]
    has, evaluated, outputs = kernel_host(f32_only, model, "f32", floats, out_shapes)
    assert (has, evaluated) == (True, True), f"f32-only {name} in f32: has_evaluate {has}, evaluate {evaluated}"
    with torch.no_grad():
        for actual, wanted in zip(outputs, example.pytorch_outputs(op, floats), strict=True):
            np.testing.assert_allclose(actual, wanted, rtol=RTOL, atol=ATOL, err_msg=f"f32-only {name} in f32")


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


AVX512_CORE = {"avx512f", "avx512bw", "avx512vl", "avx512dq"}
CPU_KINDS = {  # the CPUs this repository has run on: (machine, flags, OPTIMIZATION_CAPABILITIES) -> what step 7
    # printed there (the default precision, each hint's, the type handed to each model's node). The first four are
    # runs (the second's capabilities as reported, in part); the Arm row pins plugin_rule's reading of the source.
    "EPYC, AVX512_BF16": (("x86_64", AVX512_CORE | {"avx512_bf16"}, "BF16 WINOGRAD FP32 INT8 BIN EXPORT_IMPORT"),
                          ("bf16", {"bf16": "bf16", "f16": "bf16"}, "bf16", "f32")),
    "Xeon, AVX512_FP16 and AMX": (("x86_64", AVX512_CORE | {"avx512_bf16", "avx512_fp16", "amx_tile"},
                                   "WINOGRAD FP32 FP16 BF16 INT8 BIN EXPORT_IMPORT"),
                                  ("bf16", {"bf16": "bf16", "f16": "f16"}, "bf16", "f16")),
    "Xeon, AVX-512 only": (("x86_64", AVX512_CORE | {"avx512_vnni"}, "WINOGRAD FP32 INT8 BIN EXPORT_IMPORT"),
                           ("f32", {"bf16": "bf16", "f16": "f32"}, "bf16", "f32")),
    "EPYC, AVX2 only": (("x86_64", {"avx", "avx2", "fma"}, "FP32 INT8 BIN EXPORT_IMPORT"),
                        ("f32", {"bf16": "f32", "f16": "f32"}, "f32", "f32")),
    "Arm with f16 arithmetic": (("aarch64", set(), "FP32 FP16 INT8 BIN EXPORT_IMPORT"),
                                ("f16", {"bf16": "f16", "f16": "f16"}, "f32", "f16")),
}


@pytest.mark.parametrize("kind", CPU_KINDS)
def test_the_plugin_rule_gives_what_each_kind_of_cpu_did(kind):
    """Step 7 checks this CPU's lines against plugin_rule; here the rule gives what the other kinds of CPU printed,
    and the capabilities it expects (FP16, WINOGRAD) are those they listed."""
    (machine, flags, capabilities), (default, honoured, bf16_node, f16_node) = CPU_KINDS[kind]
    rule = example.plugin_rule(capabilities.split(), flags, machine)
    assert rule["capabilities"] == set(capabilities.split()) & {"FP16", "WINOGRAD"}, kind
    assert {key: rule[key] for key in ("default", "honoured", "handed")} == {
        "default": default, "honoured": honoured,
        "handed": {"threshold_bf16.onnx": bf16_node, "threshold_f16.onnx": f16_node}}, kind


def test_the_element_type_the_plugin_hands_the_kernel(run, cores, tmp_path):
    """Step 7 and its Notes, from OpenVINO's source (precision_support.cpp): which element type reaches the kernel."""
    source = run.out / "threshold.onnx"
    handed = {kind: example.kernel_type(cores["C++"], str(retyped(source, elem_type, tmp_path / f"{kind}.onnx")), {})
              for kind, (elem_type, _, _) in LOW.items()}
    rule = example.plugin_rule(openvino.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    assert handed["bf16"] == rule["handed"]["threshold_bf16.onnx"], (handed, rule)  # no hint, as step 7
    assert handed["f16"] == ("f16" if rule["default"] == "f16" else "f32"), (handed, rule)  # no hint here
    bf16 = cores["C++"].compile_model(str(run.out / "threshold_net.onnx"), "CPU", {"INFERENCE_PRECISION_HINT": "bf16"})
    kinds = {op.get_rt_info()["layerType"].astype(str): op.get_rt_info()["runtimePrecision"].astype(str)
             for op in bf16.get_runtime_model().get_ordered_ops()}
    precision = bf16.get_property("INFERENCE_PRECISION_HINT").get_type_name()  # f16 where the hint kept it
    assert kinds["Reference"] == ("f16" if precision == "f16" else "f32"), kinds  # an f32 model: f32 under bf16
    if precision == "bf16":
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


@pytest.mark.parametrize("threshold", [0.1, -0.1])
@pytest.mark.parametrize("kind", ["f32", "f16", "bf16"])
def test_the_opset_threshold_compares_in_float32_as_pytorch(symbolics, tmp_path, kind, threshold):
    """Step 3: threshold_from_ops compares in f32, as PyTorch's CPU kernel does for f16 and bf16 inputs. A threshold
    rounded to the input's type moves the boundary: at x = 0.10009765625 in bf16 (0.1 rounded to nearest),
    Threshold(0.1, 20) keeps x; at x = -0.099609375 (-0.1 truncated, as OpenVINO's Convert to bf16 does here),
    Threshold(-0.1, 20) keeps x; in f16, -0.1 rounds to -0.0999755859375. NaN stays NaN. Both
    Model.evaluate (the model's own type, on any CPU) and the CPU plugin (at each hint this CPU honours) agree."""
    dtype = KINDS[kind]
    core = openvino.Core()
    core.add_extension(example.ConversionExtension("cstThreshold", "rknn_cst", example.threshold_from_ops))
    model = torch.nn.Threshold(threshold, 20).eval()
    export(model, (torch.randn(1, 1, 1, 16),), tmp_path / "threshold.onnx")
    path = tmp_path / "threshold.onnx"
    if kind != "f32":
        path = retyped(path, LOW[kind][0], tmp_path / f"threshold_{kind}.onnx")
    near = torch.tensor(threshold, dtype=dtype)  # the threshold rounded to DTYPE, and its neighbours
    up = torch.nextafter(near, torch.tensor(1.0, dtype=dtype))
    down = torch.nextafter(near, torch.tensor(-1.0, dtype=dtype))
    x = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 20.0, 1.0, -1.0, -0.099609375, -0.1,
                      -0.10009765625, 0.1, 0, 0, 0, 0], dtype=dtype)
    x[-3:] = torch.stack([near, up, down])
    x = x.reshape(1, 1, 1, 16)
    wanted = model(x).float().numpy()
    assert np.isnan(wanted[0, 0, 0, 0])
    above = near if near.float() > threshold else up  # the value of KIND just above the threshold: PyTorch keeps it
    assert wanted[0, 0, 0, 13 if above is near else 14] == above.float(), (above, wanted)
    network = core.read_model(str(path))
    feed = openvino.Tensor(network.input(0).get_element_type(), list(x.shape))
    example.store(feed, x.float().numpy())
    result = openvino.Tensor(network.output(0).get_element_type(), list(x.shape))
    assert network.evaluate([result], [feed])
    np.testing.assert_array_equal(example.as_float32(result), wanted, err_msg=f"Model.evaluate, {kind}")
    rule = example.plugin_rule(core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    for hint in sorted({"f32", *(h for h, got in rule["honoured"].items() if got == h)}):
        (actual,) = example.run_typed(core, str(path), [x], {"INFERENCE_PRECISION_HINT": hint})
        np.testing.assert_array_equal(actual, wanted, err_msg=f"the CPU plugin, a {kind} model, {hint} hint")


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
