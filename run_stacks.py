"""Run every example on each torch stack the repository supports; keep README.md's version table and ERRORS.md.

A stack is one set of pinned packages: `requirements.txt` (torch 2.14.1, the default path) or a
file under `stacks/` (the same pins with another torch and torchvision: 2.4.1, 2.8.0, 2.15.0). Each
stack gets its own virtual environment, `.venv-STACK` beside this file (git-ignored), built on first
use. `run_all.py` then runs every example with that environment's python, each writing `steps.json`
(what each step did on that torch) beside its models under `.stacks/STACK/NAME/`.

    python run_stacks.py                          # every stack: build what is missing, run every example
    python run_stacks.py torch-2.8                # one stack
    python run_stacks.py --python torch-2.14=.venv/bin/python   # use an interpreter you already have
    python run_stacks.py --write-table            # then rewrite README.md's table and ERRORS.md from all runs
    python run_stacks.py --no-run --write-table   # rewrite them from the last runs (under .stacks/) only
    python run_stacks.py torch-2.4 --check-table  # fail when README.md's column or ERRORS.md differ for a stack
    python run_stacks.py --build-only torch-2.15  # build an environment, run nothing

ERRORS.md lists every error the examples reproduce (each example records them in its steps.json), with the
torch versions that reproduced it: --write-table needs a run of every stack.

Exit status: 0 when every example passed on every stack run (and the table matched, with
--check-table), 1 otherwise, 2 for a bad command line.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent
STACKS = {  # name -> the requirements file that pins it (requirements.txt: the default stack)
    "torch-2.4": "stacks/torch-2.4.txt",
    "torch-2.8": "stacks/torch-2.8.txt",
    "torch-2.14": "requirements.txt",
    "torch-2.15": "stacks/torch-2.15.txt",
}
RESULTS = ROOT / ".stacks"
TABLE_BEGIN = (
    "<!-- version table: written by `python run_stacks.py --write-table`; do not edit by hand -->"
)
TABLE_END = "<!-- end of version table -->"
ERRORS = ROOT / "ERRORS.md"
RAISED_BY = {  # what raises an error (CAUSES in each test.py) -> its section of ERRORS.md, in this order
    "dynamo=False": "`torch.onnx.export(..., dynamo=False)`: the TorchScript-based exporter",
    "dynamo=True": "`torch.onnx.export(..., dynamo=True)`, and `torch.export.export`, its first step",
    "assert_onnx_program": "`torch.onnx.testing.assert_onnx_program`: the exporter's own check of a program",
    "onnx.checker": "`onnx.checker.check_model(..., full_check=True)`",
    "onnx.defs": "`onnx.defs`: ONNX's process-wide registry of op schemas",
    "ONNX Runtime": "ONNX Runtime, loading or running an exported model",
    "RKNN-Toolkit2": "RKNN-Toolkit2 2.5.0, converting an exported model",
    "OpenVINO": "OpenVINO, reading or compiling an exported model",
    "PyTorch": "PyTorch itself, before any export",
}
ERRORS_HEADER = """# Every error the examples reproduce

Search this page for the fixed part of your message, not for the names in it: leave out the module
path (`torch.onnx.errors.`, `torch.onnx._internal.exporter._errors.`) and your op's name, and search
for `is not supported`, `unrecognized namespace`, `Couldn't export Python operator`, `No ONNX
function found for`, `No schema registered for`, `no fake impl`, `is not a registered function/op`,
`No opset import for domain`, `No conversion rule found`, and so on. Each entry gives the message as
an example printed it (when its first line is generic, such as `ConversionError: Failed to convert
the exported program ...`, also the line further down that names the cause), the torch versions on
which it was reproduced word for word, its cause, and the step that fixes it. `[Caused by ...]` tails
and memory addresses are cut. Warnings and silent failures, which raise nothing, are in each folder's
"Errors this folder fixes" and in the README's [Start here](README.md#start-here).

Written by `python run_stacks.py --write-table` from what the examples reproduced on each torch (each
`test.py` records what its `expect_error` printed, with the cause its `CAUSES` gives); do not edit by
hand: CI and the test suite fail while this page differs from what the examples reproduce.
"""


def environment(stack: str) -> pathlib.Path:
    """The python of STACK's environment, built from its requirements file if it is not there yet."""
    python = ROOT / f".venv-{stack}" / "bin" / "python"
    if python.exists():
        return python
    print(
        f"building .venv-{stack} from {STACKS[stack]} (a few GB to download, a few minutes)",
        flush=True,
    )
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(python.parent.parent)], check=True)
    log = python.parent.parent / "pip-install.log"
    # The stack's file pins every package: a machine-wide pip constraint file (a CI image may cap
    # torch at the release it caches) must not choose another version, so this one call has none.
    # The downloads land in pip's cache, which the stacks share (onnx, onnxruntime, numpy, ...).
    env = {**os.environ, "PIP_CONSTRAINT": os.devnull}
    with log.open("w") as sink:
        install = subprocess.run(
            [str(python), "-m", "pip", "install", "-r", str(ROOT / STACKS[stack])],
            stdout=sink,
            stderr=sink,
            env=env,
        )
    if install.returncode != 0:
        print(log.read_text(errors="replace")[-4000:])
        python.unlink()  # so the next run tries again rather than using a half-built environment
        raise SystemExit(f"installing {STACKS[stack]} failed (log: {log})")
    print(f"built .venv-{stack} in {time.monotonic() - start:.0f} s", flush=True)
    return python


def run_stack(stack: str, python: pathlib.Path, names: list[str]) -> int:
    out = RESULTS / stack
    version = subprocess.run(
        [str(python), "-c", "import torch; print(torch.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    print(f"\n=== {stack}: torch {version} ({python}) ===", flush=True)
    env = dict(os.environ)
    if env.get("TORCH_EXTENSIONS_DIR"):
        # torch versions cannot share C++ builds: torch 2.14 and 2.15 leave a 'lock' file in the
        # build folder (an OS lock), and torch 2.4 and 2.8 wait forever for that file to go. Left
        # unset, torch's default already separates them (~/.cache/torch_extensions/py311_cu121...).
        env["TORCH_EXTENSIONS_DIR"] = str(pathlib.Path(env["TORCH_EXTENSIONS_DIR"]) / stack)
    command = [str(python), str(ROOT / "run_all.py"), "--out", str(out), *names]
    return subprocess.run(command, cwd=ROOT, env=env).returncode


# ---------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------


def examples() -> list[str]:
    sys.path.insert(0, str(ROOT))
    import run_all

    return run_all.discover(ROOT)


def readme_steps(name: str) -> list[tuple[str, str]]:
    """(number, title) of each `## N. Title` section of NAME/README.md."""
    text = (ROOT / name / "README.md").read_text(encoding="utf-8")
    return re.findall(r"^## (\d+)\. (.+)$", text, re.M)


def cell(summary: dict | None, number: str, name: str = "") -> str:
    """What step NUMBER did on one stack, as the table says it: runs, differs (linked to the folder's
    Notes, which say how), needs X (a newer torch), or what went wrong (skipped, fails)."""
    if summary is None:
        return "no result"
    step = summary["steps"].get(number)
    if step is None:
        return "not run"
    status = step["status"]
    if status == "differs":
        return f"[differs]({name}/README.md#notes)"
    return status.replace("needs torch >= ", "needs ")


def load_summary(stack: str, name: str) -> dict | None:
    path = RESULTS / stack / name / "steps.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def torch_version(stack: str) -> str:
    return re.search(
        r"^torch==(\S+)", (ROOT / STACKS[stack]).read_text(encoding="utf-8"), re.M
    ).group(1)


def table(summaries: dict[str, dict[str, dict | None]]) -> str:
    """The markdown table: one row per step of every example, one column per stack. Narrow enough
    for GitHub's column: the step's link and title in the first cell, a word in each other."""
    stacks = list(STACKS)
    lines = [
        "| step | " + " | ".join(torch_version(s) for s in stacks) + " |",
        "| --- | " + " | ".join("---" for _ in stacks) + " |",
    ]
    for name in examples():
        for number, title in readme_steps(name):
            link = f"[`{name}/` {number}]({name}/README.md#{anchor(f'{number}. {title}')})"
            cells = [cell(summaries[s].get(name), number, name) for s in stacks]
            lines.append(f"| {link} {title} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def committed_table() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    if TABLE_BEGIN not in text:
        return ""
    return text.split(TABLE_BEGIN, 1)[1].split(TABLE_END, 1)[0].strip()


def column(table_text: str, stack: str) -> dict[tuple[str, str], str]:
    """(example, step) -> cell of STACK's column in a table written by table()."""
    index = 1 + list(STACKS).index(stack)
    table = {}
    for line in table_text.splitlines()[2:]:
        row = [c.strip() for c in line.strip().strip("|").split("|")]
        step = re.match(r"\[`([\w-]+)/` (\d+)\]", row[0])
        if step and len(row) > index:
            table[step.groups()] = row[index]
    return table


def write_table(text: str) -> None:
    """The table in README.md, and the same table in its Chinese twin, README.zh-CN.md."""
    for readme in (ROOT / "README.md", ROOT / "README.zh-CN.md"):
        if not readme.is_file():
            continue
        content = readme.read_text(encoding="utf-8")
        if TABLE_BEGIN not in content:
            raise SystemExit(
                f"{readme.name} has no {TABLE_BEGIN!r} marker to write the table after"
            )
        before, rest = content.split(TABLE_BEGIN, 1)
        after = rest.split(TABLE_END, 1)[1]
        readme.write_text(
            f"{before}{TABLE_BEGIN}\n\n{text}\n\n{TABLE_END}{after}", encoding="utf-8"
        )


# ---------------------------------------------------------------------------------------------
# ERRORS.md
# ---------------------------------------------------------------------------------------------


def anchor(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def clean(line: str) -> str:
    """A reproduced line as ERRORS.md shows it: no '[Caused by ...]' tail (graph values, file paths), no
    memory addresses."""
    line = re.sub(r"\s*\[Caused by .*", " [Caused by ...]", line)
    return re.sub(r"0x[0-9a-f]{6,}", "0x...", line).strip()


def code(text: str) -> str:
    """TEXT as an inline code span."""
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def error_rows(summary: dict | None, name: str) -> set[tuple[str, str, str, str]]:
    """(section, error, cause, fixing step's link) of each error the run of example NAME reproduced."""
    if summary is None:
        return set()
    titles = dict(readme_steps(name))
    rows = set()
    for number, step in summary["steps"].items():
        for entry in step.get("reproduced", []):
            error = code(clean(entry["error"]))
            if entry["further_down"]:
                error += "\n  <br>further down: " + code(clean(entry["further_down"]))
            fixed_in = str(entry.get("fixed_in", number))  # the step that fixes it: this or a later one
            heading = f"{fixed_in}. {titles.get(fixed_in, '')}"
            link = f"[`{name}/` step {fixed_in}]({name}/README.md#{anchor(heading)})"
            rows.add((entry["raised_by"], error, entry["cause"], link))
    return rows


ENTRY_TAIL = "\n  <br>torch "  # an entry: "- ERROR[ further down]" then "  <br>torch V · cause · fixed in L"


def errors_page(summaries: dict[str, dict[str, dict | None]]) -> str:
    """ERRORS.md: one entry per error, with the torch versions that reproduced it, grouped by what
    raises it. A list, not a table: an error message is long, and a table of them is wider than
    GitHub's column."""
    versions: dict[tuple[str, str, str, str], list[str]] = {}
    for stack in STACKS:
        for name in examples():
            for row in error_rows(summaries[stack].get(name), name):
                versions.setdefault(row, []).append(torch_version(stack))
    unknown = {row[0] for row in versions} - set(RAISED_BY)
    if unknown:
        raise SystemExit(
            f"CAUSES names what raises an error as {sorted(unknown)}; ERRORS.md knows {list(RAISED_BY)}"
        )
    parts = [ERRORS_HEADER]
    for raised_by, title in RAISED_BY.items():
        rows = sorted(row for row in versions if row[0] == raised_by)
        if not rows:
            continue
        parts.append(f"## {title}\n")
        entries = [
            f"- {error}{ENTRY_TAIL}{', '.join(versions[row])} · {cause} · fixed in {link}"
            for row in rows
            for _, error, cause, link in [row]
        ]
        parts.append("\n".join(entries) + "\n")
    return "\n".join(parts)


def committed_entries() -> list[tuple[str, str, list[str], str, str]]:
    """(section, error, torch versions, cause, link) of each entry of the committed ERRORS.md."""
    if not ERRORS.is_file():
        return []
    by_title = {title: raised_by for raised_by, title in RAISED_BY.items()}
    entries, section, lines = [], None, []

    def close():
        if lines and section:
            text = "\n".join(lines)[2:]
            error, _, tail = text.partition(ENTRY_TAIL)
            found, cause, link = (tail.split(" · ", 2) + ["", ""])[:3]
            versions = [v.strip() for v in found.split(",")]
            entries.append((section, error, versions, cause, link.removeprefix("fixed in ")))
        lines.clear()

    for line in ERRORS.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            close()
            section = by_title.get(line[3:].strip())
        elif line.startswith("- "):
            close()
            lines.append(line)
        elif line.startswith("  ") and lines:
            lines.append(line)
        else:
            close()
    close()
    return entries


def committed_errors(stack: str) -> set[tuple[str, str, str, str]]:
    """The entries of the committed ERRORS.md that name STACK's version, as error_rows() gives them."""
    version = torch_version(stack)
    return {(s, e, c, link) for s, e, vs, c, link in committed_entries() if version in vs}


def errors_differ(stack: str, summaries: dict[str, dict | None], names: list[str]) -> list[str]:
    """What ERRORS.md says of STACK that its runs of NAMES do not reproduce, and the other way round."""
    wrong = []
    for name in names:
        have = error_rows(summaries.get(name), name)
        want = {row for row in committed_errors(stack) if row[3].startswith(f"[`{name}/`")}
        wrong += [
            f"{name}: ERRORS.md lists {row[1]} (step {row[3]}), not reproduced"
            for row in sorted(want - have)
        ]
        wrong += [
            f"{name}: reproduced {row[1]} ({row[3]}), not in ERRORS.md"
            for row in sorted(have - want)
        ]
    return wrong


# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "stacks",
        nargs="*",
        metavar="STACK",
        help=f"stacks to run: {', '.join(STACKS)} (default: all)",
    )
    parser.add_argument(
        "--python", action="append", default=[], metavar="STACK=PATH", help="use PATH for STACK"
    )
    parser.add_argument(
        "--write-table", action="store_true", help="rewrite README.md's table and ERRORS.md"
    )
    parser.add_argument(
        "--check-table", action="store_true", help="fail when README.md's table or ERRORS.md differ"
    )
    parser.add_argument(
        "--examples", nargs="+", default=[], metavar="NAME", help="run only these examples"
    )
    parser.add_argument(
        "--no-run", action="store_true", help="only write or check the table, from the last runs"
    )
    parser.add_argument(
        "--build-only",
        action="store_true",
        help="only build the stacks' environments (CI builds them while the test suite runs)",
    )
    args = parser.parse_args(argv)
    unknown = [s for s in args.stacks if s not in STACKS]
    if unknown:
        parser.error(f"unknown stack(s) {', '.join(unknown)}; valid: {', '.join(STACKS)}")
    pythons = {}
    for item in args.python:
        stack, _, path = item.partition("=")
        if stack not in STACKS or not path:
            parser.error(
                f"--python takes STACK=PATH with STACK one of {', '.join(STACKS)}, not {item!r}"
            )
        pythons[stack] = pathlib.Path(
            path
        ).absolute()  # not resolve(): a venv's python is a symlink
    selected = args.stacks or list(STACKS)

    if args.build_only:
        for stack in selected:
            if stack not in pythons:
                environment(stack)
        return 0
    failed = []
    for stack in [] if args.no_run else selected:
        python = pythons.get(stack) or environment(stack)
        if run_stack(stack, python, args.examples) != 0:
            failed.append(stack)

    summaries = {s: {name: load_summary(s, name) for name in examples()} for s in STACKS}
    if args.write_table:
        write_table(table(summaries))
        print("wrote the version table in README.md and README.zh-CN.md")
        missing = [
            f"{s}/{name}"
            for s in STACKS
            for name, summary in summaries[s].items()
            if summary is None
        ]
        if missing:
            print(f"ERRORS.md not written: no run of {', '.join(missing)} (run every stack first)")
            failed.append("ERRORS.md")
        else:
            ERRORS.write_text(errors_page(summaries), encoding="utf-8")
            print("wrote ERRORS.md")
    if args.check_table:
        fresh, committed = table(summaries), committed_table()
        for stack in selected:
            want, have = column(committed, stack), column(fresh, stack)
            wrong = [
                f"{name} step {number}: README says {want.get((name, number))!r}, the run gives {value!r}"
                for (name, number), value in have.items()
                if want.get((name, number)) != value
                and (not args.examples or name in args.examples)
            ]
            if wrong:
                print(
                    f"README.md's version table is out of date for {stack}:\n  "
                    + "\n  ".join(wrong)
                )
                failed.append(f"{stack} table")
            wrong = errors_differ(stack, summaries[stack], args.examples or examples())
            if wrong:
                print(f"ERRORS.md is out of date for {stack}:\n  " + "\n  ".join(wrong))
                failed.append(f"{stack} ERRORS.md")
    if failed:
        print(f"\nFAILED: {', '.join(failed)}")
        return 1
    if not args.no_run:
        print(f"\nevery example passed on {', '.join(selected)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
