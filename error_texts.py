"""Every error text a page shows, from the one place it is written by hand: `CAUSES` in each test.py.

A test.py's `CAUSES` maps the fixed part of each message it reproduces (the key) to what raises
it and why; each run records the whole message it printed, and stacks/matrix.json keeps those
records for every torch. From the two, this module writes, in both languages:

    <!-- {{{cog opening_errors("2", "5.1") }}} -->   the opening's error lines: every error step 2
    <!-- {{{end}}} -->                                 fixes, the first one step 5 fixes
    <!-- {{{cog errors_fixed() }}} -->                 "Errors this folder fixes": all of them, by step
    <!-- {{{cog start_here(ROWS) }}} -->               README.md's Start here table (ROWS: below)

A message is shown as its exception's name and the key, `...` where the message has more:
`SchemaError: No schema registered for 'cstThreshold' version '1' and domain 'rknn_cst'`. A link
goes to the heading of the step that fixes the error, in the page's language. Edit a key in
`CAUSES`, run `python run_stacks.py --no-run` after a run has recorded it (or `python
run_stacks.py --stale`), then `python pages.py --no-run`: every place that shows it changes, and
`python pages.py --check` (CI) fails while one differs.

Start here's ROWS are (you see, go to) pairs of hand-written prose in which `{FOLDER N.I}` (in
"you see") is the key of the I-th error that step N of FOLDER fixes, `{FOLDER N}` those of all of
them, and `{FOLDER N}` in "go to" a link to that step. tests/test_start_here.py checks that the rows link the fixing
step of every error ERRORS.md lists.
"""

from __future__ import annotations

import ast
import functools
import json
import pathlib
import re
from dataclasses import dataclass, field

ROOT = pathlib.Path(__file__).resolve().parent
MATRIX = ROOT / "stacks" / "matrix.json"
PINNED = "torch-2.14"  # whose wording a page shows, where it reproduced the error
ZH = "README.zh-CN.md"
CLASS = re.compile(r"^(?:<class '(?:[\w.]+\.)?(\w+)'>|(?:[a-z_]\w*\.)*([A-Z]\w*))(?: \(\w+\))?: ")


@dataclass
class Error:
    """One key of a folder's CAUSES, as the runs reproduced it."""

    folder: str
    key: str
    raised_by: str
    fixed_in: int
    lines: dict[str, str] = field(default_factory=dict)  # stack -> the line that holds the key

    @property
    def line(self) -> str:
        """The line as the pinned stack printed it, else as the newest stack that printed it."""
        return self.lines.get(PINNED) or self.lines[list(self.lines)[-1]]

    @property
    def message(self) -> str:
        """`Class: ... key ...`: the exception's name, the key, `...` where the message has more."""
        line = self.line
        match = CLASS.match(line)
        name, rest = ((match.group(1) or match.group(2)), line[match.end() :]) if match else ("", line)
        start = rest.find(self.key)
        if start < 0:  # the key begins in the exception's name: the message up to the key's end
            end = line.find(self.key) + len(self.key)
            text, tail = rest[: end - (len(line) - len(rest))], line[end:].strip()
        else:
            text = ("" if start == 0 else "... ") + self.key
            tail = rest[start + len(self.key) :].strip()
        if tail and tail not in "!.":
            text += " ..."
        return f"{name}: {text}" if name else text


def causes(folder: str) -> dict[str, tuple[str, int | None]]:
    """FOLDER/test.py's CAUSES keys, each with what raises it and the fixing step it names (None
    where it names none), read without running test.py."""
    tree = ast.parse((ROOT / folder / "test.py").read_text(encoding="utf-8"))
    names = {  # a key may be a string constant of test.py's, named
        t.id: node.value.value
        for node in tree.body if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for t in node.targets if isinstance(t, ast.Name)
    }

    def value(node: ast.expr) -> str:
        return names[node.id] if isinstance(node, ast.Name) else ast.literal_eval(node)

    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "CAUSES" for t in node.targets):
            # keys and what raises them are literals; a cause may name a constant of test.py
            return {value(k): (value(v.elts[0]), value(v.elts[2]) if len(v.elts) > 2 else None)
                    for k, v in zip(node.value.keys, node.value.values, strict=True)}
    return {}


@functools.cache
def errors() -> dict[str, list[Error]]:
    """Folder -> its CAUSES keys that a run reproduced, in CAUSES order."""
    import run_stacks

    matrix = json.loads(MATRIX.read_text(encoding="utf-8"))
    found: dict[str, list[Error]] = {}
    for folder in run_stacks.examples():
        keys = causes(folder)
        by_key: dict[str, Error] = {}
        for stack in run_stacks.STACKS:
            cell = matrix.get(stack, {}).get(folder)
            for number, step in (cell or {"steps": {}})["steps"].items():
                for entry in step.get("reproduced", []):
                    lines = [run_stacks.clean(entry["error"]), run_stacks.clean(entry["further_down"])]
                    for key, (raised_by, named) in keys.items():
                        line = next((x for x in lines if key in x), None)
                        if line is not None:
                            # the step test.py names now, over one a cell recorded (a stale cell
                            # keeps the numbers of the steps as they were when it ran)
                            fixed_in = named or int(entry.get("fixed_in", number))
                            error = by_key.setdefault(key, Error(folder, key, raised_by, fixed_in))
                            error.lines.setdefault(stack, line)
        found[folder] = [by_key[key] for key in keys if key in by_key]
    return found


def step_ran(folder: str, number: int) -> list[str]:
    """The stacks on which step NUMBER of FOLDER ran (the releases its errors are measured on)."""
    import run_stacks

    matrix = json.loads(MATRIX.read_text(encoding="utf-8"))
    ran = []
    for stack in run_stacks.STACKS:
        cell = matrix.get(stack, {}).get(folder)
        step = (cell or {"steps": {}})["steps"].get(str(number))
        if step is not None and step["status"] in ("runs", "differs"):
            ran.append(stack)
    return ran


def headings(folder: str, page: str = "README.md") -> dict[int, str]:
    """Step number -> the anchor of its heading in FOLDER's PAGE."""
    import run_stacks

    text = (ROOT / folder / page).read_text(encoding="utf-8")
    found = re.findall(r"^## (\d+)\. (.+)$", text, re.M)
    return {int(n): run_stacks.anchor(f"{n}. {t}".replace("`", "")) for n, t in found}


def code(text: str) -> str:
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def who(raised_by: str) -> str:
    """What raised it, as a page names it: `dynamo=True`, ONNX Runtime."""
    return code(raised_by) if re.search(r"[=._]", raised_by) else raised_by


def releases(error: Error, zh: bool) -> str:
    """' (torch 2.6-2.8)' where the error is not raised on every release its step ran on."""
    import run_stacks

    if set(error.lines) >= set(step_ran(error.folder, error.fixed_in)):
        return ""
    span = run_stacks.spans(list(error.lines))
    return f"（torch {span}）" if zh else f" (torch {span})"  # the others raise none, or another


def shown(chosen: list[Error], zh: bool, raisers: bool = True) -> str:
    """The errors, grouped by what raises them: `dynamo=True`: `A`, `B`; ONNX Runtime: `C` (without
    RAISERS, where the prose around says it: `A`, `B`, `C`)."""
    groups: dict[str, list[str]] = {}
    for error in chosen:
        groups.setdefault(error.raised_by, []).append(code(error.message) + releases(error, zh))
    sep, colon, comma = ("；", "：", "、") if zh else ("; ", ": ", ", ")
    if not raisers:
        return comma.join(item for items in groups.values() for item in items)
    return sep.join(f"{who(by)}{colon}" + comma.join(items) for by, items in groups.items())


def link(folder: str, number: int, zh: bool, here: str | None = None) -> str:
    """A link to step NUMBER of FOLDER: within the page when HERE is FOLDER."""
    page = ZH if zh else "README.md"
    anchors = headings(folder, page)
    if number not in anchors:
        raise ValueError(f"{folder}/{page} has no step {number}")
    target = f"#{anchors[number]}" if here == folder else f"{folder}/{page}#{anchors[number]}"
    if here is not None and here != folder:
        target = f"../{target}"
    words = f"第 {number} 步" if zh else f"step {number}"
    return f"[{words}]({target})" if here == folder else f"[`{folder}/` {words}]({target})"


def pick(folder: str, ref: str) -> list[Error]:
    """REF 'N' is every error step N of FOLDER fixes; 'N.I' the I-th of them (CAUSES order)."""
    number, _, index = ref.partition(".")
    fixed = [e for e in errors()[folder] if e.fixed_in == int(number)]
    if not fixed:
        raise ValueError(f"no recorded error of {folder} is fixed in step {number}")
    if index:
        if not 1 <= int(index) <= len(fixed):
            raise ValueError(f"step {number} of {folder} fixes {len(fixed)} errors, not {index}")
        return [fixed[int(index) - 1]]
    return fixed


def _page() -> tuple[str, bool]:
    import cog

    path = pathlib.Path(cog.inFile).resolve()
    return path.parent.name, path.name == ZH


def _bullets(folder: str, refs: list[str], zh: bool, raisers: bool = True) -> list[str]:
    by_step: dict[int, list[Error]] = {}
    for ref in refs:
        for error in pick(folder, ref):
            if error not in by_step.setdefault(error.fixed_in, []):
                by_step[error.fixed_in].append(error)
    out = []
    for number, chosen in by_step.items():
        out.append(f"- {link(folder, number, zh, here=folder)} · {shown(chosen, zh, raisers)}")
    return out


def opening_errors(*refs: str) -> None:
    """The opening's error lines: the errors of REFS ('N' or 'N.I'), each with its step's link."""
    import cog

    folder, zh = _page()
    cog.outl("\n" + "\n".join(_bullets(folder, list(refs), zh, raisers=False)) + "\n")


def errors_fixed() -> None:
    """Every error the folder's runs reproduced, by the step that fixes it, in step order."""
    import cog

    import run_stacks

    folder, zh = _page()
    numbers = sorted({e.fixed_in for e in errors()[folder]})
    pinned = run_stacks.label(PINNED)
    lead = (
        f"以下是本目录在 torch {pinned} 上运行时打印的原文（torch {pinned} 不报的，取报它的最新版本的原文；"
        "由 `test.py` 的 `CAUSES` 和各版本的运行记录生成），只在部分版本上出现的注明版本；"
        "每个版本上的每种措辞及其原因见 [ERRORS.md](../ERRORS.md)："
        if zh else
        f"Each as this folder's run printed it on torch {pinned}, or on the newest release that raises "
        "it (written from `test.py`'s `CAUSES` and the runs on every release), with the releases that "
        "raise it where not all do; "
        "[ERRORS.md](../ERRORS.md) has every wording on every release, and each cause:"
    )
    summary = "本目录的运行复现的每一条错误，按修复它的步骤排列" if zh else \
        "Every error this folder's runs reproduce, by the step that fixes it"
    bullets = "\n".join(_bullets(folder, [str(n) for n in numbers], zh))
    # reference, as ERRORS.md is: folded, so the page's prose stays within its word budget
    cog.outl(f"\n<details>\n<summary>{summary}</summary>\n\n{lead}\n\n{bullets}\n\n</details>\n")


PLACE = re.compile(r"\{([a-z0-9_]+) (\d+)(?:\.(\d+))?\}")


def row_cells(you_see: str, go_to: str, zh: bool) -> tuple[str, str]:
    """One Start here row: messages into YOU_SEE's places, links into GO_TO's."""

    def message(match: re.Match) -> str:  # the key alone: the table's heading says what raises it
        ref = match.group(2) + (f".{match.group(3)}" if match.group(3) else "")
        return ("、" if zh else ", ").join(code(e.key) for e in pick(match.group(1), ref))

    def target(match: re.Match) -> str:
        if match.group(3):
            raise ValueError(f"a link goes to a step, not to one error: {match.group(0)}")
        return link(match.group(1), int(match.group(2)), zh)

    return PLACE.sub(message, you_see), PLACE.sub(target, go_to)


def start_here(rows: list[tuple[str, str]]) -> None:
    """README's Start here table from ROWS (see the module's docstring)."""
    import cog

    _, zh = _page()
    zh = pathlib.Path(cog.inFile).name == ZH
    head = "| 你看到的 | 去哪里 |" if zh else "| you see | go to |"
    lines = ["", head, "| --- | --- |"]
    for you_see, go_to in rows:
        cells = row_cells(you_see, go_to, zh)
        lines.append(f"| {cells[0]} | {cells[1]} |")
    cog.outl("\n".join(lines) + "\n")


def linked_steps(markdown: str) -> set[tuple[str, int]]:
    """(folder, step) of each step a page's links reach."""
    import run_stacks

    found = set()
    for folder, page, target in re.findall(r"\]\(([a-z_0-9]+)/(README(?:\.zh-CN)?\.md)#([^)]+)\)", markdown):
        for number, title in re.findall(r"^## (\d+)\. (.+)$", (ROOT / folder / page).read_text("utf-8"), re.M):
            if run_stacks.anchor(f"{number}. {title}".replace("`", "")) == target:
                found.add((folder, int(number)))
    return found
