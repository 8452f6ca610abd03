"""How each test.py writes the code its pages show, read from the source.

- A region holds whole statements: its last statement does not open a block (a loop, a `with`, an
  `if`) that goes on after `# endregion`, or the page shows a prefix of what runs
  (CONTRIBUTING.md, "the loop rule").
- A region is named for what it holds; names after a step (`step3-2`) are older, kept in the
  folders of POSITIONAL until they next change.
- A `dynamo=True` export returns its ONNXProgram and the code saves it (`program.save(path)`);
  a path passed to `torch.onnx.export` with `dynamo=True` is older, kept in PATH_ARGUMENT.
"""

from __future__ import annotations

import ast
import re

import pytest
from conftest import EXAMPLES, ROOT

SOURCES = [f"{name}/test.py" for name in EXAMPLES] + ["lesson_code.py", "page_helpers.py"]
# folders whose regions are still named after their step: rename them when the folder next changes
POSITIONAL = {
    "argument_types", "deploy_openvino", "deploy_rknn", "pythonop_symbolic", "register_pytorch_op",
}
# folders whose dynamo=True exports still pass a path: program.save(path) when the folder next changes
PATH_ARGUMENT = {"argument_types", "register_pytorch_op"}


def lines_of(source: str) -> list[str]:
    return (ROOT / source).read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("source", SOURCES)
def test_no_region_ends_inside_a_block(source):
    lines = lines_of(source)
    cut = []
    for number, line in enumerate(lines, 1):
        if match := re.match(r"(\s*)# endregion", line):
            after = next((x for x in lines[number:] if x.strip()), "")
            if len(after) - len(after.lstrip()) > len(match[1]):  # the block goes on below
                cut.append(f"{source}:{number}: the region ends before {after.strip()!r}")
    assert not cut, "\n".join(cut)


@pytest.mark.parametrize("name", EXAMPLES)
def test_regions_are_named_for_what_they_hold(name):
    positional = [
        f"{name}/test.py:{number}: {line.strip()}"
        for number, line in enumerate(lines_of(f"{name}/test.py"), 1)
        if re.match(r"\s*# region step\d", line)
    ]
    if name in POSITIONAL:
        assert positional, f"{name}: no region named after its step now; drop it from POSITIONAL"
    else:
        assert not positional, "name each region for what it holds:\n" + "\n".join(positional)


def exports_with_a_path(source: str) -> list[str]:
    """Each `torch.onnx.export(..., dynamo=True)` call of SOURCE given a path (third argument, or f=)."""
    found = []
    for node in ast.walk(ast.parse((ROOT / source).read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and ast.unparse(node.func) == "torch.onnx.export"):
            continue
        keywords = {k.arg: k.value for k in node.keywords}
        dynamo = keywords.get("dynamo")
        if isinstance(dynamo, ast.Constant) and dynamo.value is True and (
            len(node.args) > 2 or "f" in keywords
        ):
            found.append(f"{source}:{node.lineno}")
    return found


@pytest.mark.parametrize("source", SOURCES)
def test_dynamo_true_exports_save_the_program(source):
    found = exports_with_a_path(source)
    if source.split("/")[0] in PATH_ARGUMENT:
        assert found, f"{source}: no dynamo=True export passes a path now; drop it from PATH_ARGUMENT"
    else:
        assert not found, "write program = torch.onnx.export(...); program.save(path):\n" + "\n".join(
            found
        )
