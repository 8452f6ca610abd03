"""The torch stacks: their pins, stacks/matrix.json against the pinned run, and the pages written from it.

The suite runs every example on the pinned stack and checks its cells here; `python run_stacks.py --ci`
checks the oldest, RKNN's and the newest stack, and every stale cell, in CI.
"""

from __future__ import annotations

import json
import re

import pytest
from conftest import EXAMPLES, ROOT

import run_stacks

PINNED = run_stacks.PINNED


def pins(path) -> dict[str, str]:
    text = (ROOT / path).read_text(encoding="utf-8")
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", text, re.M))


def test_a_stack_for_every_minor_release_from_2_2_and_the_source_materials_older_ones():
    """Every torch line from 2.2, and 1.13, 2.0 and 2.1 ("PyTorch 1.13 or 2.x", the source material)."""
    newest = max(run_stacks.minor(s) for s in run_stacks.STACKS)
    older = [(1, 13), (2, 0), (2, 1)]
    assert [run_stacks.minor(s) for s in run_stacks.STACKS] == older + [(2, m) for m in range(2, newest[1] + 1)]


@pytest.mark.parametrize("stack", [s for s in run_stacks.STACKS if s != PINNED])
def test_stack_pins_differ_from_requirements_only_in_torch(stack):
    pinned, other = pins("requirements.txt"), pins(run_stacks.STACKS[stack])
    said = (ROOT / run_stacks.STACKS[stack]).read_text(encoding="utf-8").split("\ntorch==")[0]
    if "torchvision" not in other:  # torch 1.13: none for this Python; the comment says so
        assert "no\n# torchvision" in said or "no torchvision" in said, f"{stack}: say why it has no torchvision"
        other["torchvision"] = "none"
    assert set(other) == set(pinned), f"{stack} pins other packages than requirements.txt"
    differing = sorted(name for name in pinned if pinned[name] != other[name])
    unsaid = [name for name in differing if name not in ("torch", "torchvision") and name not in said]
    assert {"torch", "torchvision"} <= set(differing) and not unsaid, (
        f"{stack} differs from requirements.txt in {differing}; its comment must say why for {unsaid}"
    )


def test_pinned_stack_is_requirements_txt():
    assert run_stacks.STACKS[PINNED] == "requirements.txt"
    import torch

    assert torch.__version__.split("+")[0] == run_stacks.torch_version(PINNED), "the suite runs on another torch"


def test_matrix_has_every_cell_and_the_pages_say_what_it_says():
    """Every stack has a cell for every example, and README.md's table and version list and ERRORS.md
    are what `python run_stacks.py --no-run` writes from stacks/matrix.json."""
    matrix = run_stacks.load_matrix()
    missing = [f"{s}/{n}" for s in run_stacks.STACKS for n in EXAMPLES if n not in matrix.get(s, {})]
    assert not missing, f"stacks/matrix.json has no cell for {missing}: run python run_stacks.py"
    assert run_stacks.pages_differ(matrix) == [], "run python run_stacks.py --no-run"


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_pinned_run_is_its_cell_and_quiet(example_run, name):
    """This run of the example did, step by step, what its torch 2.14 cell in stacks/matrix.json says
    (statuses, reasons, every error reproduced), and wrote nothing to stderr."""
    result = example_run(name)
    path = result.out / "steps.json"
    assert path.is_file(), f"{name} wrote no steps.json in {result.out}"
    assert json.loads(path.read_text(encoding="utf-8"))["stderr"] == "", f"{name} wrote to stderr"
    run = run_stacks.record(PINNED, name, path)
    cell = run_stacks.load_matrix()[PINNED][name]
    assert run_stacks.facts(run) == run_stacks.facts(cell), (
        f"{name} on torch 2.14 differs from its cell in stacks/matrix.json: run python run_stacks.py torch-2.14"
    )


def test_a_run_keeps_what_it_wrote_to_stderr(tmp_path):
    """What makes a run 'not quiet' is seen: a warning, and a child process's stderr, reach steps.json."""
    import subprocess
    import sys

    script = tmp_path / "test.py"
    script.write_text(
        f"import os, sys, warnings\nsys.path.insert(0, {str(ROOT)!r})\nimport harness\n"
        "def step1():\n    '''noisy'''\n    warnings.warn('release noise', FutureWarning)\n"
        "    os.system('echo from a child >&2')\n"
        "sys.exit(harness.run(__file__, [step1], kept={}, causes={}))\n",
        encoding="utf-8",
    )
    proc = subprocess.run([sys.executable, str(script), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300)
    stderr = json.loads((tmp_path / "out" / "steps.json").read_text(encoding="utf-8"))["stderr"]
    assert "FutureWarning: release noise" in stderr and "from a child" in stderr, stderr
    assert "from a child" in proc.stderr, "the terminal no longer sees stderr"


def test_the_weekly_workflow_runs_every_stack():
    """.github/workflows/stacks.yml lists each stack run_stacks.py knows, one job each (a new stack is added there)."""
    import yaml

    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "stacks.yml").read_text(encoding="utf-8"))
    (job,) = workflow["jobs"].values()
    assert job["strategy"]["matrix"]["stack"] == list(run_stacks.STACKS), "stacks.yml's matrix: add the new stack"
