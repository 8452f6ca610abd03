"""Keep the Chinese pages' code in step with the English ones.

Every `README.zh-CN.md` holds the same fenced blocks as the `README.md` beside it, byte for byte and in the
same order (a reader copies the same code from either page), and the top-level pair holds the same version
table. After changing an English page's code, its expected output, a picture or the version table:

    python sync_translations.py           # copy every English page's blocks (and the table) into its twin
    python sync_translations.py --check   # only report the pages whose blocks differ (exit 1)

The prose is not touched: a changed sentence is translated by hand. A pair whose number of blocks differs is
reported and left alone (a block was added or removed: add its translation around it first).
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent
TWIN = "README.zh-CN.md"
TABLE = re.compile(r"<!-- version table:.*?<!-- end of version table -->", re.S)


def pages() -> list[pathlib.Path]:
    """Every English README.md of the repository: the top-level one and each folder's."""
    found = [ROOT / "README.md", *sorted(ROOT.glob("*/README.md"))]
    return [p for p in found if not p.parent.name.startswith(".")]


def spans(text: str) -> list[tuple[int, int]]:
    """(start, end) character offsets of each fenced block, fence lines included."""
    result, start, offset = [], None, 0
    for line in text.splitlines(keepends=True):
        if line.startswith("```"):
            if start is None:
                start = offset
            else:
                result.append((start, offset + len(line)))
                start = None
        offset += len(line)
    return result


def fences(text: str) -> list[str]:
    return [text[a:b] for a, b in spans(text)]


def without_fences(text: str) -> str:
    kept, last = [], 0
    for a, b in spans(text):
        kept.append(text[last:a])
        last = b
    kept.append(text[last:])
    return "".join(kept)


prose = without_fences


def version_table(text: str) -> str:
    match = TABLE.search(text)
    return match.group(0) if match else ""


def synced(english: str, chinese: str) -> str:
    """CHINESE with ENGLISH's fenced blocks and version table; ValueError when the block counts differ."""
    en, zh = fences(english), fences(chinese)
    if len(en) != len(zh):
        raise ValueError(
            f"{len(en)} fenced blocks in the English page, {len(zh)} in the Chinese one"
        )
    parts, last = [], 0
    for (a, b), block in zip(spans(chinese), en, strict=True):
        parts.append(chinese[last:a])
        parts.append(block)
        last = b
    parts.append(chinese[last:])
    result = "".join(parts)
    table = version_table(english)
    if table and version_table(result):
        result = TABLE.sub(lambda _: table, result, count=1)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="only report the pages that differ")
    args = parser.parse_args(argv)
    problems = 0
    for english in pages():
        twin = english.parent / TWIN
        name = twin.relative_to(ROOT)
        if not twin.is_file():
            print(f"{name}: missing")
            problems += 1
            continue
        before = twin.read_text(encoding="utf-8")
        try:
            after = synced(english.read_text(encoding="utf-8"), before)
        except ValueError as error:
            print(f"{name}: {error}; not changed")
            problems += 1
            continue
        if after != before:
            if args.check:
                print(f"{name}: its code differs from {english.relative_to(ROOT)}")
                problems += 1
            else:
                twin.write_text(after, encoding="utf-8")
                print(f"{name}: copied the code of {english.relative_to(ROOT)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
