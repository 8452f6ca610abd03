"""Every example runs green and keeps the repository's house rules."""

from __future__ import annotations

import re

import pytest
from conftest import EXAMPLES, ROOT


def test_examples_are_found():
    assert EXAMPLES, "no example folder (a top-level folder with a test.py) was found"


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_passes(example_run, name):
    result = example_run(name)
    assert result.returncode == 0, f"{name} exited {result.returncode}; its output ends:\n{result.output[-4000:]}"


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_folder_has_readme_and_test(name):
    assert (ROOT / name / "README.md").is_file()
    assert (ROOT / name / "test.py").is_file()


def python_blocks(markdown: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", markdown, re.S)


def code_lines(block: str) -> list[str]:
    return [line for line in block.splitlines() if line.strip() and not line.strip().startswith("#")]


@pytest.mark.parametrize("name", EXAMPLES)
def test_readme_snippets_are_in_test_py(name):
    """A README block is what readers copy: it must be the code test.py actually runs (whitespace folded)."""
    readme = (ROOT / name / "README.md").read_text(encoding="utf-8")
    code = " ".join((ROOT / name / "test.py").read_text(encoding="utf-8").split())
    drifted = [
        code_lines(block)[0].strip()
        for block in python_blocks(readme)
        if len(code_lines(block)) >= 3 and " ".join(block.split()) not in code
    ]
    assert not drifted, f"{name}/README.md blocks not found word for word in test.py, starting: {drifted}"


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_has_main_guard_and_out_option(name):
    source = (ROOT / name / "test.py").read_text(encoding="utf-8")
    assert 'if __name__ == "__main__":' in source
    assert "def main(" in source
    assert '"--out"' in source


@pytest.mark.parametrize("name", EXAMPLES)
def test_top_level_readme_has_a_row(name):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"[`{name}/`]({name}/)" in readme, f"README.md's table of examples has no row for {name}/"


@pytest.mark.parametrize("name", EXAMPLES)
def test_readme_expected_output_is_what_test_py_prints(example_run, name):
    """Each line of the README's expected output (split at its "..." elisions) is in the real output."""
    readme = (ROOT / name / "README.md").read_text(encoding="utf-8")
    assert "## Expected output" in readme, f"{name}/README.md has no '## Expected output' section"
    block = readme.split("## Expected output", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    output = example_run(name).output
    missing = [
        fragment.strip()
        for line in block.splitlines()
        for fragment in line.split("...")
        if fragment.strip() and fragment.strip() not in output
    ]
    assert not missing, f"{name}/README.md expects output that test.py no longer prints: {missing}"
