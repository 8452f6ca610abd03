"""README.md's Start here: from the error in hand to the step that fixes it, in a few hundred words.

A reader scans the table from its top, reads the row that matches their error, follows its first
link, and reads the step up to its first code block. Counted as the "Lesson first" issue asks:
README.md's prose before the table, the first cell of each row above, the whole row, and the linked
step's prose up to its first code block: at most 500 words for every row. Every row links a step's
own heading (`folder/README.md#N-...`), not a folder.
"""

from __future__ import annotations

import re

import pytest
from conftest import ROOT

LIMIT = 500
README = (ROOT / "README.md").read_text(encoding="utf-8")
STEP_LINK = re.compile(r"\]\(([\w-]+/README\.md)#(\d+-[^)]+)\)")


def words(text: str) -> int:
    """Words as a reader meets them: link targets, HTML comments and markup left out."""
    text = re.sub(r"\]\([^)]*\)", "]", text)
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    return len(re.findall(r"[A-Za-z0-9_'.-]+", text))


def table() -> tuple[str, list[list[str]]]:
    """(the prose before the table, the table's rows as cells)."""
    start = README.index("\n| you see |")
    before = re.sub(r"```.*?```", "", README[:start], flags=re.S)
    rows = []
    for line in README[start + 1 :].splitlines():
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return before, rows[2:]  # the header row and the separator


def step_prose(page: str, anchor: str) -> str:
    """The prose of the step whose heading has ANCHOR, up to its first code block."""
    import run_stacks

    text = (ROOT / page).read_text(encoding="utf-8")
    for match in re.finditer(r"^## (.+)$", text, re.M):
        if run_stacks.anchor(match.group(1).replace("`", "")) == anchor:
            body = text[match.end() :]
            return body.split("```", 1)[0].split("\n## ", 1)[0]
    raise AssertionError(f"{page} has no heading with the anchor #{anchor}")


BEFORE, ROWS = table()


def test_the_table_comes_within_the_first_400_words():
    assert words(BEFORE) <= 400, f"{words(BEFORE)} prose words before the Start here table"
    assert len(ROWS) >= 15, f"the Start here table has {len(ROWS)} rows"


@pytest.mark.parametrize("index", range(len(ROWS)), ids=lambda i: ROWS[i][0][:60])
def test_every_row_reaches_its_step_within_500_words(index):
    row = ROWS[index]
    links = STEP_LINK.findall(row[-1])
    assert links, f"row {index + 1} links no step heading: {row[-1][:100]}"
    page, anchor = links[0]
    scanned = sum(words(other[0]) for other in ROWS[:index])
    read = words(BEFORE) + scanned + words(" ".join(row)) + words(step_prose(page, anchor))
    assert read <= LIMIT, (
        f"row {index + 1} ({row[0][:50]}...): {read} words to reach {page}#{anchor} "
        f"(before the table {words(BEFORE)}, rows above {scanned}, the row "
        f"{words(' '.join(row))}, the step up to its first code block "
        f"{words(step_prose(page, anchor))})"
    )
