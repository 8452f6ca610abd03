"""Each test.py's steps, read from its source: one function per step number, none defined twice.

`harness.steps_in` collects a test.py's `stepN_...` functions from its globals(), where a second
`def step2_...` (the same name, or another name with the same number) silently replaces the
first; so this reads the source instead. deploy_rknn/ and quantize_int8/ list their steps in
`STEPS` (run here) and `RKNN_STEPS` (run in RKNN-Toolkit2's environment): the two tuples must
hold every step function, in number order.
"""

from __future__ import annotations

import ast
import re

import pytest
from conftest import EXAMPLES, ROOT


def step_functions(name: str) -> list[tuple[int, str, int]]:
    """(step number, function name, line) of each top-level `def stepN_...` of NAME/test.py."""
    tree = ast.parse((ROOT / name / "test.py").read_text(encoding="utf-8"))
    return [
        (int(m[1]), node.name, node.lineno)
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and (m := re.match(r"step(\d+)_", node.name))
    ]


def listed(name: str) -> list[str] | None:
    """The names in NAME/test.py's STEPS and RKNN_STEPS tuples, in order; None without STEPS."""
    tree = ast.parse((ROOT / name / "test.py").read_text(encoding="utf-8"))
    tuples = {
        target.id: [element.id for element in node.value.elts]
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple)
        for target in node.targets
        if isinstance(target, ast.Name) and target.id in ("STEPS", "RKNN_STEPS")
    }
    if "STEPS" not in tuples:
        return None
    return tuples["STEPS"] + tuples.get("RKNN_STEPS", [])


@pytest.mark.parametrize("name", EXAMPLES)
def test_one_function_per_step_number(name):
    found = step_functions(name)
    numbers = [number for number, _, _ in found]
    twice = sorted({f"{n}: {f} (line {line})" for n, f, line in found if numbers.count(n) > 1})
    assert not twice, f"{name}/test.py defines a step number more than once: {twice}"
    assert sorted(numbers) == list(range(1, len(numbers) + 1)), f"{name}: steps {sorted(numbers)}"


@pytest.mark.parametrize("name", [n for n in EXAMPLES if listed(n) is not None])
def test_the_steps_tuples_hold_every_step_in_order(name):
    names = listed(name)
    expected = [f for _, f, _ in sorted(step_functions(name))]
    assert names == expected, f"{name}: STEPS + RKNN_STEPS {names}, the step functions {expected}"
