"""The command line every test.py shares (issue 12): --out DIR on every example; stale files, write errors on one."""

from __future__ import annotations

import ast
import os
import pathlib
import re
import subprocess
import sys

import onnx
import pytest
from conftest import EXAMPLES, ROOT

# The fastest example on the 2-core machine (10.1 s wall; pythonop_symbolic 11.0; the others build C++ or export more)
FASTEST = "onnxscript_function"
FAIL_PREFIX = "FAIL: cannot write models under"


def owned_models(name: str) -> tuple[list[str], list[str]]:
    """KEPT's models and FAILURES as NAME/test.py declares them, read from its source: importing it imports torch."""
    tree = ast.parse((ROOT / name / "test.py").read_text(encoding="utf-8"))
    found = {node.targets[0].id: ast.literal_eval(node.value) for node in tree.body
             if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) in ("KEPT", "FAILURES")}
    return [model for models in found["KEPT"].values() for model in models], list(found["FAILURES"])


@pytest.mark.parametrize("name", [n for n in EXAMPLES if "__file__, globals()" in (ROOT / n / "test.py").read_text()])
def test_each_step_number_names_one_function(name):
    """harness.run(__file__, globals()) runs the functions named stepN_..., in N's order: one per number."""
    tree = ast.parse((ROOT / name / "test.py").read_text(encoding="utf-8"))
    numbers = [int(m[1]) for node in tree.body
               if isinstance(node, ast.FunctionDef) and (m := re.match(r"step(\d+)_", node.name))]
    assert sorted(numbers) == list(range(1, len(numbers) + 1)), numbers


def run_example(name: str, *args: str, cwd=None) -> subprocess.CompletedProcess:
    command = [sys.executable, str(ROOT / name / "test.py"), *args]
    return subprocess.run(command, cwd=cwd or ROOT / name, capture_output=True, text=True, timeout=900)


def one_fail_line(proc: subprocess.CompletedProcess) -> str:
    """The one FAIL line of a whole run that must fail (exit 1) with no traceback and no PASS."""
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Traceback" not in output and "PASS" not in proc.stdout, output[-3000:]
    fail_lines = [line for line in proc.stdout.splitlines() if line.startswith("FAIL")]
    assert len(fail_lines) == 1, f"expected one FAIL line, got {fail_lines}; output ends:\n{output[-3000:]}"
    return fail_lines[0]


@pytest.mark.parametrize("name", EXAMPLES)
@pytest.mark.parametrize("kind", ["empty", "regular file", "under /proc", "read-only directory"])
def test_a_bad_out_stops_the_example_before_it_writes(tmp_path, kind, name):
    """An empty DIR is an argparse error (exit 2); a DIR that cannot hold models is one FAIL line (exit 1)."""
    out = tmp_path / "models"
    if kind == "regular file":
        out.write_text("not a directory\n")
    elif kind == "under /proc":
        out = pathlib.Path("/proc/no-such-process/models")  # /proc holds no folders but its own
    elif kind == "read-only directory":
        if os.geteuid() == 0:
            pytest.skip("root can write into a read-only directory")
        out.mkdir(mode=0o500)
    proc = run_example(name, "--out", "" if kind == "empty" else str(out), cwd=tmp_path)
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if kind == "empty":
        assert proc.returncode == 2 and "--out" in proc.stderr, proc.stdout + proc.stderr
        assert list(tmp_path.iterdir()) == []  # nothing written into the current directory
    else:
        assert proc.returncode == 1 and len(lines) == 1, f"expected one line and exit 1, got:\n{proc.stdout}"
        assert lines[0].startswith(f"{FAIL_PREFIX} {out.resolve()}: "), lines[0]
        assert kind != "regular file" or out.read_text() == "not a directory\n"  # left as it was


def test_stale_files_are_named_never_deleted_and_own_models_replaced(tmp_path):
    kept, failures = owned_models(FASTEST)
    out = tmp_path / "models"
    (out / "failures").mkdir(parents=True)
    garbage = b"not an ONNX model, left by someone else\n"
    foreign = {"junk.onnx": garbage, "failures/old.onnx": garbage, "notes.txt": b"not a model at all\n"}
    stale_own = {kept[0]: garbage, **({failures[0]: garbage} if failures else {})}
    for relative, content in {**foreign, **stale_own}.items():
        (out / relative).write_bytes(content)
    fail_line = one_fail_line(run_example(FASTEST, "--out", str(out)))
    # only .onnx files count as models
    assert "junk.onnx" in fail_line and "failures/old.onnx" in fail_line and "notes.txt" not in fail_line, fail_line
    for relative, content in foreign.items():  # never deleted, never touched
        assert (out / relative).read_bytes() == content, f"{relative} was changed or removed"
    for relative in kept:  # the stale copies of its own models were removed before the run and written afresh
        onnx.checker.check_model(onnx.load(str(out / relative)), full_check=True)
    for relative in stale_own:
        assert not (out / relative).exists() or (out / relative).read_bytes() != garbage, f"stale {relative} kept"


def test_a_write_error_during_the_run_is_one_fail_line(tmp_path):
    """An OSError while the run writes (a directory holds steps.json's name) is the same one FAIL line."""
    out = tmp_path / "models"
    (out / "steps.json").mkdir(parents=True)
    fail_line = one_fail_line(run_example(FASTEST, "--out", str(out)))
    assert fail_line.startswith(f"{FAIL_PREFIX} {out.resolve()}: steps.json: "), fail_line
    assert "IsADirectoryError" in fail_line or "Is a directory" in fail_line, fail_line
