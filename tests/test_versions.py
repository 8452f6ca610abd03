"""The torch stacks: their pins agree with requirements.txt, and README.md's version table is what the runs report.

Only the pinned stack's column is checked here (the suite runs on it); `python run_stacks.py STACK --check-table`
checks the others, and CI runs that for every stack.
"""

from __future__ import annotations

import json
import re

import pytest
from conftest import EXAMPLES, ROOT

import run_stacks

PINNED = "torch-2.14"


def pins(path) -> dict[str, str]:
    text = (ROOT / path).read_text(encoding="utf-8")
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", text, re.M))


@pytest.mark.parametrize("stack", [s for s in run_stacks.STACKS if s != PINNED])
def test_stack_pins_differ_from_requirements_only_in_torch(stack):
    pinned, other = pins("requirements.txt"), pins(run_stacks.STACKS[stack])
    assert set(other) == set(pinned), f"{stack} pins other packages than requirements.txt"
    differing = sorted(name for name in pinned if pinned[name] != other[name])
    assert differing == ["torch", "torchvision"], (
        f"{stack} differs from requirements.txt in {differing}"
    )


def test_pinned_stack_is_requirements_txt():
    assert run_stacks.STACKS[PINNED] == "requirements.txt"
    import torch

    assert torch.__version__.split("+")[0] == run_stacks.torch_version(PINNED), (
        "the suite runs on another torch"
    )


@pytest.mark.parametrize("name", EXAMPLES)
def test_version_table_matches_the_pinned_run(example_run, name):
    """The committed table's torch 2.14.1 column says what this run of the example reports, step by step."""
    result = example_run(name)
    summary_path = result.out / "steps.json"
    assert summary_path.is_file(), f"{name} wrote no steps.json in {result.out}"
    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    assert summary["torch"] == run_stacks.torch_version(PINNED)
    committed = run_stacks.column(run_stacks.committed_table(), PINNED)
    steps = run_stacks.readme_steps(name)
    assert steps, f"{name}/README.md has no '## N. Title' steps"
    cells = {number: run_stacks.cell(summary, number) for number, _ in steps}
    wrong = [
        f"step {number}: README.md says {committed.get((name, number))!r}, the run gives {cell!r}"
        for number, cell in cells.items()
        if committed.get((name, number)) != cell
    ]
    assert not wrong, (
        f"README.md's version table is out of date for {name} ({'; '.join(wrong)}): run_stacks.py --write-table"
    )
