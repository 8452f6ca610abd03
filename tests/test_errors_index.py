"""ERRORS.md: every error the examples reproduce, as they reproduce it, each linked to the step that fixes it.

The suite checks the rows for the pinned torch against this session's runs of the examples; `python
run_stacks.py STACK --check-table` checks the other stacks' rows, and CI runs that for every stack.
"""

from __future__ import annotations

import json
import re

import pytest
from conftest import EXAMPLES, ROOT

import run_stacks

PINNED = "torch-2.14"


@pytest.mark.parametrize("name", EXAMPLES)
def test_errors_page_lists_what_the_pinned_run_reproduces(example_run, name):
    result = example_run(name)
    summary = json.loads((result.out / "steps.json").read_text(encoding="utf-8"))
    reproduced = [e for step in summary["steps"].values() for e in step.get("reproduced", [])]
    assert reproduced, (
        f"{name} recorded no reproduced error in steps.json: every example reproduces some"
    )
    wrong = run_stacks.errors_differ(PINNED, {name: summary}, [name])
    assert not wrong, (
        "ERRORS.md is out of date (python run_stacks.py --write-table):\n" + "\n".join(wrong)
    )


def test_errors_page_links_existing_steps():
    text = run_stacks.ERRORS.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([a-z_]+)/README\.md#([^)]+)\)", text)
    assert links, "ERRORS.md links no step"
    for name, anchor in set(links):
        anchors = {run_stacks.anchor(f"{n}. {t}") for n, t in run_stacks.readme_steps(name)}
        assert anchor in anchors, (
            f"ERRORS.md links {name}/README.md#{anchor}, which is no step heading there"
        )


def test_errors_page_sections_and_entries_are_well_formed():
    text = run_stacks.ERRORS.read_text(encoding="utf-8")
    assert text.startswith(run_stacks.ERRORS_HEADER), "ERRORS.md's header is not the generated one"
    versions = {run_stacks.torch_version(s) for s in run_stacks.STACKS}
    entries = run_stacks.committed_entries()
    assert len(entries) >= 40, f"ERRORS.md has {len(entries)} entries"
    entry_lines = sum(line.startswith("- ") for line in text.splitlines())
    assert entry_lines == len(entries), "an entry of ERRORS.md is not in the generated form"
    for section, error, found, cause, link in entries:
        assert section and error.startswith("`"), error
        assert set(found) <= versions, (error, found)
        assert cause and link.startswith("[`") and "/README.md#" in link, (error, link)


def test_top_readme_links_the_errors_page():
    assert "](ERRORS.md)" in (ROOT / "README.md").read_text(encoding="utf-8")
