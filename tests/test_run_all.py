"""The runner's contract, checked on throwaway examples in a temporary copy of the repository."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

import pytest
from conftest import EXAMPLES, ROOT

EXAMPLE_BODIES = {
    "good": "print('all checks passed')\nsys.exit(0)",
    "bad": "print('mismatch in step 2')\nsys.exit(1)",
    "skipped": "print('SKIP: no C++ compiler')\nsys.exit(77)",
}


@pytest.fixture
def sandbox(tmp_path):
    shutil.copy(ROOT / "run_all.py", tmp_path / "run_all.py")
    for name, body in EXAMPLE_BODIES.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "test.py").write_text(
            textwrap.dedent(
                """\
                import pathlib, sys
                if "--out" in sys.argv:
                    out = pathlib.Path(sys.argv[sys.argv.index("--out") + 1])
                    out.mkdir(parents=True, exist_ok=True)
                    (out / "cwd.txt").write_text(str(pathlib.Path.cwd()))
                """
            )
            + body
            + "\n"
        )
    (tmp_path / "not_an_example").mkdir()  # a folder without test.py is not an example
    return tmp_path


def runner(sandbox, *args):
    return subprocess.run(
        [sys.executable, "run_all.py", *args], cwd=sandbox, capture_output=True, text=True, timeout=120
    )


def test_list_prints_discovered_examples(sandbox):
    proc = runner(sandbox, "--list")
    assert proc.returncode == 0
    assert proc.stdout.split() == ["bad", "good", "skipped"]


def test_list_in_repository_matches_discovery():
    proc = subprocess.run([sys.executable, "run_all.py", "--list"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0
    assert proc.stdout.split() == EXAMPLES


def test_unknown_name_exits_2_and_lists_valid_ones(sandbox):
    proc = runner(sandbox, "good", "nosuch")
    assert proc.returncode == 2
    assert "nosuch" in proc.stderr
    for name in EXAMPLE_BODIES:
        assert name in proc.stderr
    assert "PASS" not in proc.stdout  # nothing ran


def test_failure_exits_1_and_the_others_still_run(sandbox):
    proc = runner(sandbox, "--out", str(sandbox / "out"))
    assert proc.returncode == 1, proc.stdout
    summary = proc.stdout.split("example  ")[-1]
    assert "FAIL" in summary and "mismatch in step 2" in summary
    assert "PASS" in summary and "SKIP" in summary and "no C++ compiler" in summary
    assert "1 passed, 1 failed, 1 skipped" in proc.stdout
    # each example ran in its own folder and got OUT/<name>
    for name in EXAMPLE_BODIES:
        assert (sandbox / "out" / name / "cwd.txt").read_text() == str(sandbox / name)


def test_named_examples_only(sandbox):
    proc = runner(sandbox, "good", "skipped")
    assert proc.returncode == 0, proc.stdout  # a skip is not a failure
    assert "bad" not in proc.stdout
    assert "1 passed, 0 failed, 1 skipped" in proc.stdout
