"""ERRORS.md: every error the examples reproduce, as they reproduce it, each linked to the step that fixes it.

Written by run_stacks.py from stacks/matrix.json; tests/test_versions.py checks that file against
the pinned run and the page against that file.
"""

from __future__ import annotations

import re

from conftest import EXAMPLES, ROOT

import run_stacks

PINNED = "torch-2.14"


def test_errors_page_links_existing_steps():
    text = run_stacks.ERRORS.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([a-z_]+)/README\.md#([^)]+)\)", text)
    assert links, "ERRORS.md links no step"
    for name, anchor in set(links):
        anchors = {run_stacks.anchor(f"{n}. {t}") for n, t in run_stacks.readme_steps(name)}
        assert anchor in anchors, (
            f"ERRORS.md links {name}/README.md#{anchor}, which is no step heading there"
        )


def test_errors_page_has_the_errors_of_every_example():
    """ERRORS.md (written from stacks/matrix.json, which test_versions checks) names every example."""
    text = run_stacks.ERRORS.read_text(encoding="utf-8")
    assert text.startswith(run_stacks.ERRORS_HEADER), "ERRORS.md's header is not the generated one"
    assert sum(line.startswith("- `") for line in text.splitlines()) >= 40, "ERRORS.md lists few errors"
    for name in EXAMPLES:
        assert f"[`{name}/` step" in text, f"ERRORS.md lists no error of {name}"


def test_top_readme_links_the_errors_page():
    assert "](ERRORS.md)" in (ROOT / "README.md").read_text(encoding="utf-8")
