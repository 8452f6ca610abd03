"""The command line every test.py shares (issue 12), checked on the fastest real example.

`python test.py [--out DIR] [-v]`: an empty DIR is an argparse error (exit 2); a DIR that is an existing
non-directory or cannot be created gives one line `FAIL: cannot write models under DIR: <reason>` and exit 1;
before writing, the example removes the models it owns from an earlier run in DIR and DIR/failures, and it
refuses to claim PASS while DIR holds .onnx files it did not write, which it names and never deletes.

The bad-argument cases stop before any export (a few seconds: the imports), so they run for every example.
The stale-files and write-error cases are whole runs of the fastest example, one run for all of each's
assertions.
"""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys

import onnx
import pytest
from conftest import EXAMPLES, ROOT

# The fastest example, measured on the 2-core machine (wall / user seconds of `python test.py --out DIR`):
# onnxscript_function 10.1 / 8.8, pythonop_symbolic 11.0 / 10.5; the others build C++ or export more.
FASTEST = "onnxscript_function"
FAIL_PREFIX = "FAIL: cannot write models under"


def owned_models(name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """KEPT (flattened: it maps each step to its models) and FAILURES as NAME/test.py declares them, read from its
    source: importing it imports torch."""
    tree = ast.parse((ROOT / name / "test.py").read_text(encoding="utf-8"))
    found = {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id in ("KEPT", "FAILURES")
    }
    assert set(found) == {"KEPT", "FAILURES"}, (
        f"{name}/test.py does not declare KEPT and FAILURES at top level"
    )
    kept = found["KEPT"]
    if isinstance(kept, dict):
        kept = tuple(model for models in kept.values() for model in models)
    return kept, found["FAILURES"]


def run_example(name: str, *args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / name / "test.py"), *args],
        cwd=cwd or ROOT / name,
        capture_output=True,
        text=True,
        timeout=900,
    )


NAMES = list(EXAMPLES)


@pytest.mark.parametrize("name", NAMES)
def test_empty_out_is_an_argparse_error(tmp_path, name):
    proc = run_example(name, "--out", "", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--out" in proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written into the current directory


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("kind", ["regular file", "under /proc", "read-only directory"])
def test_out_that_cannot_hold_models_is_one_fail_line(tmp_path, kind, name):
    if kind == "regular file":
        out = tmp_path / "models"
        out.write_text("not a directory\n")
    elif kind == "under /proc":
        out = pathlib.Path("/proc/no-such-process/models")  # /proc holds no folders but its own
    else:
        if os.geteuid() == 0:
            pytest.skip("root can write into a read-only directory")
        out = tmp_path / "models"
        out.mkdir()
        out.chmod(0o500)
    proc = run_example(name, "--out", str(out))
    if kind == "read-only directory":
        out.chmod(0o700)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output
    assert "Traceback" not in output
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line, got:\n{proc.stdout}"
    assert lines[0].startswith(f"{FAIL_PREFIX} {out.resolve()}: "), lines[0]
    if kind == "regular file":
        assert out.read_text() == "not a directory\n"  # left as it was


def test_stale_files_are_named_never_deleted_and_own_models_replaced(tmp_path):
    kept, failures = owned_models(FASTEST)
    out = tmp_path / "models"
    (out / "failures").mkdir(parents=True)
    garbage = b"not an ONNX model, left by someone else\n"
    foreign = {
        "junk.onnx": garbage,
        "failures/old.onnx": garbage,
        "notes.txt": b"not a model at all\n",
    }
    stale_own = {kept[0]: garbage, **({failures[0]: garbage} if failures else {})}
    for relative, content in {**foreign, **stale_own}.items():
        (out / relative).write_bytes(content)

    fail_lines = one_fail_line(run_example(FASTEST, "--out", str(out)))
    assert "junk.onnx" in fail_lines[0] and "failures/old.onnx" in fail_lines[0], fail_lines[0]
    assert "notes.txt" not in fail_lines[0]  # only .onnx files count as models
    for relative, content in foreign.items():  # never deleted, never touched
        assert (out / relative).read_bytes() == content, f"{relative} was changed or removed"
    # the stale copies of its own models were removed before the run and written afresh
    for relative in kept:
        assert (out / relative).is_file(), f"{relative} was not written"
        onnx.checker.check_model(onnx.load(str(out / relative)), full_check=True)
    for relative in stale_own:
        path = out / relative
        assert not path.exists() or path.read_bytes() != garbage, (
            f"the stale {relative} was not replaced"
        )


def test_a_write_error_during_the_run_is_one_fail_line(tmp_path):
    """An OSError while the run writes (here: steps.json cannot be written, a directory holds its name) is the
    same one FAIL line, never a traceback."""
    out = tmp_path / "models"
    (out / "steps.json").mkdir(parents=True)
    fail_lines = one_fail_line(run_example(FASTEST, "--out", str(out)))
    assert fail_lines[0].startswith(f"{FAIL_PREFIX} {out.resolve()}: steps.json: "), fail_lines[0]
    assert "IsADirectoryError" in fail_lines[0] or "Is a directory" in fail_lines[0], fail_lines[0]


def one_fail_line(proc: subprocess.CompletedProcess) -> list[str]:
    """A whole run that must fail (exit 1) with exactly one FAIL line, no traceback and no PASS: its FAIL lines."""
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output[-3000:]
    assert "Traceback" not in output
    assert "PASS" not in proc.stdout
    fail_lines = [line for line in proc.stdout.splitlines() if line.startswith("FAIL")]
    assert len(fail_lines) == 1, (
        f"expected one FAIL line, got {fail_lines}; output ends:\n{output[-3000:]}"
    )
    return fail_lines


def test_a_failed_cpp_build_shows_what_the_compiler_said(tmp_path):
    """A C++ build that fails (here a stand-in compiler that reports a full disk, as a CI machine's did)
    is one FAIL line followed by the end of the build's output, where the compiler's own message is:
    never only the build's command line."""
    compiler = tmp_path / "cxx"
    compiler.write_text(  # the real compiler for torch's `--version` probe, a failure for each compile
        '#!/bin/sh\ncase " $* " in *" -c "*)\n'
        "  echo 'main.cpp: fatal error: cannot write main.o: No space left on device' >&2; exit 1;;\n"
        'esac\nexec c++ "$@"\n'
    )
    compiler.chmod(0o755)
    env = {**os.environ, "CXX": str(compiler), "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "register_pytorch_op" / "test.py"), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    fail_lines = one_fail_line(proc)
    assert fail_lines[0].startswith("FAIL: unexpected RuntimeError: Error building extension"), fail_lines[0]
    after = proc.stdout.split(fail_lines[0], 1)[1]
    assert "fatal error: cannot write main.o: No space left on device" in after, proc.stdout[-3000:]


def test_an_unexpected_error_is_named_by_the_line_that_says_what_went_wrong():
    """The FAIL line of an unexpected error (run_all.py's summary shows it) names the cause: a first line that only
    says where the error was raised (OpenVINO's `Exception from <file>:<line>:`, a bare `Check '...' failed at
    <file>:<line>:`) gives way to the next line that says more. Every line of the message is still printed below."""
    import harness

    openvino = (
        "Exception from src/inference/src/cpp/core.cpp:132:\n"
        "Unsupported operation of type: CstThreshold name: /op/cstThreshold\n"
        "Details:\n"
        "Exception from src/plugins/intel_cpu/src/nodes/reference.cpp:36:\n"
        "Not Implemented:\n"
        "Cannot fallback on ngraph reference implementation. Ngraph::Node::evaluate() is not implemented for op: ..."
    )
    first, *below = harness._unexpected(RuntimeError(openvino)).splitlines()
    assert first == "unexpected RuntimeError: Unsupported operation of type: CstThreshold name: /op/cstThreshold"
    assert below == ["  " + line for line in openvino.splitlines() if "CstThreshold name" not in line]

    check = "Check 'false' failed at src/frontends/onnx/frontend/src/core/graph.cpp:126:\nFRONT_END_GENERAL_FAILURE"
    assert harness._unexpected(RuntimeError(check)).splitlines() == [
        "unexpected RuntimeError: FRONT_END_GENERAL_FAILURE",
        "  Check 'false' failed at src/frontends/onnx/frontend/src/core/graph.cpp:126:",
    ]
    # a line with words after the place names the cause itself; a message of places only keeps its first line
    said = "Check 'rank == 4' failed at src/core/shape.cpp:40: the input must be 4-D\nmore"
    assert harness._unexpected(ValueError(said)).splitlines()[0] == f"unexpected ValueError: {said.splitlines()[0]}"
    only_places = RuntimeError("Exception from a.cpp:1:")
    assert harness._unexpected(only_places) == "unexpected RuntimeError: Exception from a.cpp:1:"
    assert harness._unexpected(KeyError("x")) == "unexpected KeyError: 'x'"  # one-line messages as before
