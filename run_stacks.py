"""Every example on every torch minor release from 2.2 to 2.15, and on 1.13, 2.0 and 2.1 (the
source material's "PyTorch 1.13 or 2.x"); the version table and ERRORS.md.

A stack is one file of pins: `requirements.txt` (torch 2.14.1, the default) or `stacks/torch-X.Y.txt`
(the same pins with that line's newest torch and its torchvision). Each gets a virtual environment,
`.venv-STACK` (git-ignored), in which `run_all.py` runs the examples; each example writes
`steps.json`, what each step did on that torch. `stacks/matrix.json` keeps, per stack and example,
those steps and what the run was produced from (a hash of the example's code, harness.py,
page_helpers.py and the stack's pins); README.md's version table and ERRORS.md are written from it.

    python run_stacks.py              # every stack: build, run, record, write the table
    python run_stacks.py torch-2.8    # one stack (the examples it runs: --examples NAME ...)
    python run_stacks.py --stale      # only the cells whose code changed since they were recorded
    python run_stacks.py --ci         # CI: the oldest, the source material's (2.2), RKNN's and the
                                      # newest stack, and every stale cell; fail where a run differs
                                      # from its cell; record nothing
    python run_stacks.py --ci --all torch-2.8   # --ci on every cell of the stacks named (none named:
                                                # all of them), stale or not: the scheduled workflow
    python run_stacks.py --probe torch-2.5   # run each step a needs_torch gate skips: is it needed?
    python run_stacks.py --check      # run nothing: no cell is stale, the pages say what matrix.json says
    python run_stacks.py --no-run     # run nothing: write them from matrix.json
    python run_stacks.py --build-only torch-2.2                   # build an environment, run nothing
    python run_stacks.py --python torch-2.14=.venv/bin/python     # use an interpreter you have

Environments are built by uv (requirements-dev.txt) from its cache, by hard links: seconds once a
stack's packages are in the cache, and little disk beyond it; each is kept, and built again when its
pins file changes. The pinned stack runs in .venv when that has requirements.txt's pins. Without uv,
pip builds them (minutes, 6 GB each) and a run removes those it built (--keep keeps them). The next
stack's environment is built while one runs when the disk has room. The pinned stack's cells are
also checked by the test suite, which runs every example on it. Exit status: 0 when every run
passed quietly (nothing on stderr) and, with --ci or --check, agreed with matrix.json; with
--probe, when every gated step failed; 1 otherwise; 2 for a bad command line.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parent
PINNED = "torch-2.14"
CI_STACKS = ("torch-1.13", "torch-2.2", "torch-2.4", "torch-2.15")  # the oldest, the source
# material's (2.2), RKNN-Toolkit2's, the newest


def _stacks() -> dict[str, str]:
    """name -> the requirements file that pins it, oldest torch first."""
    files = {p.stem: f"stacks/{p.name}" for p in (ROOT / "stacks").glob("torch-*.txt")}
    files[PINNED] = "requirements.txt"
    return dict(sorted(files.items(), key=lambda item: minor(item[0])))


def minor(stack: str) -> tuple[int, int]:
    major, minor_ = stack.removeprefix("torch-").split(".")
    return int(major), int(minor_)


STACKS = _stacks()
MATRIX = ROOT / "stacks" / "matrix.json"
RESULTS = ROOT / ".stacks"  # each run's output: .stacks/STACK/NAME/ (models, steps.json)
ERRORS = ROOT / "ERRORS.md"
TABLE_BEGIN = "<!-- version table: written by `python run_stacks.py` from stacks/matrix.json -->"
TABLE_END = "<!-- end of version table -->"
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
the exported program ...`, also the line further down that names the cause), the torch releases on
which it was reproduced word for word, its cause, and the step that fixes it. `[Caused by ...]`
tails and memory addresses are cut. Warnings and silent failures, which raise nothing, are in each
folder's "Errors this folder fixes" and in the README's [Start here](README.md#start-here).

Written by `python run_stacks.py` from [stacks/matrix.json](stacks/matrix.json), what the examples
reproduced on each torch (each `test.py` records what its `expect_error` printed, with the cause
its `CAUSES` gives); do not edit by hand: the test suite fails while this page differs from it.
"""


# ---------------------------------------------------------------------------------------------
# Environments and runs
# ---------------------------------------------------------------------------------------------


def free_gb() -> float:
    return shutil.disk_usage(ROOT).free / 2**30


def pins(stack: str) -> str:
    """What STACK's environment is built from: a hash of its requirements file."""
    return hashlib.sha256((ROOT / STACKS[stack]).read_bytes()).hexdigest()[:16]


def satisfies(python: pathlib.Path, requirements: pathlib.Path) -> bool:
    """Whether PYTHON's environment has every `name==version` pin of REQUIREMENTS (the pinned
    stack's cells can run in .venv, which requirements-dev.txt builds from requirements.txt)."""
    if not python.is_file():
        return False
    wanted = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", requirements.read_text(encoding="utf-8"), re.M))
    probe = "import importlib.metadata as m, json, sys; w = json.loads(sys.argv[1]); " \
        "print(all(m.version(n) == v for n, v in w.items()))"
    try:
        out = subprocess.run([str(python), "-c", probe, json.dumps(wanted)], capture_output=True, text=True)
    except OSError:
        return False
    return out.stdout.strip() == "True"


def uv() -> str | None:
    """uv (requirements-dev.txt pins it): it installs from its cache by hard links, so an
    environment it built before takes seconds and little disk; pip takes minutes and 6 GB."""
    return shutil.which("uv", path=str(pathlib.Path(sys.executable).parent)) or shutil.which("uv")


def ready(stack: str) -> bool:
    """Whether STACK's environment is built from its requirements file as it is now."""
    stamp = ROOT / f".venv-{stack}" / "installed"
    if stack == PINNED and satisfies(ROOT / ".venv" / "bin" / "python", ROOT / STACKS[stack]):
        return True
    return stamp.is_file() and stamp.read_text(encoding="utf-8").strip() == pins(stack)


def environment(stack: str) -> pathlib.Path:
    """The python of STACK's environment: .venv-STACK, kept between runs and built again only when
    its requirements file changes (the pinned stack uses .venv when that has its pins)."""
    if stack == PINNED and satisfies(ROOT / ".venv" / "bin" / "python", ROOT / STACKS[stack]):
        return ROOT / ".venv" / "bin" / "python"
    venv = ROOT / f".venv-{stack}"
    python = venv / "bin" / "python"
    stamp = venv / "installed"  # written once every pin is installed: the hash of the pins
    if stamp.is_file() and stamp.read_text(encoding="utf-8").strip() == pins(stack):
        return python
    start = time.monotonic()
    shutil.rmtree(venv, ignore_errors=True)  # a half-built one, or one of other pins
    log = venv.parent / f".venv-{stack}.log"
    # The stack's file pins every package: a machine-wide constraint file (a CI image may cap torch
    # at the release it caches) must not choose another version, nor a machine's find-links: PEP 440
    # ranks a local build such as 2.13.0+cpu above the index's 2.13.0, and the index's torchvision
    # does not import beside it. uv reads neither pip's configuration nor, with --no-config, its own.
    requirements = str(ROOT / STACKS[stack])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_CONSTRAINT", "UV_FIND_LINKS"))}
    if uv():
        if os.environ.get("PIP_EXTRA_INDEX_URL"):  # the workflows' CPU wheels: uv reads UV_ names
            env.setdefault("UV_EXTRA_INDEX_URL", os.environ["PIP_EXTRA_INDEX_URL"])
            env.setdefault("UV_INDEX_STRATEGY", "unsafe-best-match")  # numpy etc. from PyPI too
        commands = [
            # what a reader's `python3 -m venv` holds (on Python 3.11, pip and setuptools, which
            # torch's C++ extension builder imports), then the pins, from uv's cache
            [sys.executable, "-m", "venv", str(venv)],
            [uv(), "pip", "install", "--no-config", "--python", str(python), "-r", requirements],
        ]
    else:
        empty = ROOT / ".stacks" / "no-find-links"
        empty.mkdir(parents=True, exist_ok=True)
        env.update(PIP_CONSTRAINT=os.devnull, PIP_FIND_LINKS=str(empty))
        commands = [
            [sys.executable, "-m", "venv", str(venv)],
            [str(python), "-m", "pip", "install", "-r", requirements],
        ]
    with log.open("w") as sink:
        for command in commands:
            if subprocess.run(command, stdout=sink, stderr=sink, env=env).returncode != 0:
                print(log.read_text(errors="replace")[-4000:])
                raise SystemExit(f"installing {STACKS[stack]} failed (log: {log})")
    stamp.write_text(pins(stack) + "\n", encoding="utf-8")
    print(f"  built .venv-{stack} in {time.monotonic() - start:.0f} s", flush=True)
    return python


def run_examples(stack: str, python: pathlib.Path, names: list[str], results: pathlib.Path = RESULTS) -> int:
    """run_all.py with STACK's python: each example's output under .stacks/STACK/NAME/."""
    env = dict(os.environ)
    if results != RESULTS:  # --probe: each step its needs_torch gate skips runs anyway
        env["HARNESS_RUN_GATED"] = "1"
    # torch versions cannot share C++ builds: torch >= 2.14 leaves a 'lock' file in the build folder
    # (an OS lock), and torch <= 2.8 waits forever for that file to go.
    base = env.get("TORCH_EXTENSIONS_DIR") or str(pathlib.Path.home() / ".cache/torch_extensions")
    env["TORCH_EXTENSIONS_DIR"] = str(pathlib.Path(base) / stack)
    shutil.rmtree(results / stack, ignore_errors=True)
    command = [str(python), str(ROOT / "run_all.py"), "--out", str(results / stack), *names]
    return subprocess.run(command, cwd=ROOT, env=env).returncode


def inputs(stack: str, name: str) -> str:
    """What a cell is produced from: a hash of NAME's code, the harness, the pages' helpers, the
    lesson code it imports and STACK's pins (a change to any of them makes the cell stale)."""
    files = sorted((ROOT / name).glob("*.py")) + sorted((ROOT / name).glob("*.txt"))
    files += [ROOT / "harness.py", ROOT / "page_helpers.py", ROOT / STACKS[stack]]
    if re.search(r"^from lesson_code import", (ROOT / name / "test.py").read_text("utf-8"), re.M):
        files.append(ROOT / "lesson_code.py")  # the lesson code it shares with other folders
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def record(stack: str, name: str, path: pathlib.Path | None = None, made_from: str = "") -> dict | None:
    """The cell of a run (its steps.json, by default under .stacks/): what each step did, without
    the titles (the pages have them), and MADE_FROM, the inputs() the run started from."""
    path = path or RESULTS / stack / name / "steps.json"
    if not path.is_file():
        return None
    summary = json.loads(path.read_text(encoding="utf-8"))
    steps = {n: {k: v for k, v in s.items() if k != "title"} for n, s in summary["steps"].items()}
    for step in steps.values():  # what differs from run to run (memory addresses) cut
        for entry in step.get("reproduced", []):
            entry.update(error=clean(entry["error"]), further_down=clean(entry["further_down"]))
    return {"from": made_from or inputs(stack, name), "torch": summary["torch"], "steps": steps}


def noise(stack: str, name: str) -> str:
    """What a run wrote to stderr (steps.json keeps it): a passing run writes nothing there."""
    path = RESULTS / stack / name / "steps.json"
    if not path.is_file():
        return ""
    return json.loads(path.read_text(encoding="utf-8")).get("stderr", "").strip()


def load_matrix() -> dict[str, dict[str, dict]]:
    if not MATRIX.is_file():
        return {}
    return json.loads(MATRIX.read_text(encoding="utf-8"))


def save_matrix(matrix: dict[str, dict[str, dict]]) -> None:
    ordered = {s: dict(sorted(matrix[s].items())) for s in STACKS if s in matrix}
    MATRIX.write_text(json.dumps(ordered, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def stale(matrix: dict, stack: str) -> list[str]:
    """The examples whose cell on STACK is missing or was produced from other code."""
    cells = matrix.get(stack, {})
    return [n for n in examples() if n not in cells or cells[n]["from"] != inputs(stack, n)]


def facts(cell: dict | None) -> dict | None:
    return None if cell is None else {k: v for k, v in cell.items() if k != "from"}


# ---------------------------------------------------------------------------------------------
# The table, the version list and ERRORS.md
# ---------------------------------------------------------------------------------------------


def examples() -> list[str]:
    sys.path.insert(0, str(ROOT))
    import run_all

    return run_all.discover(ROOT)


def readme_steps(name: str) -> list[tuple[str, str]]:
    """(number, title) of each `## N. Title` section of NAME/README.md."""
    text = (ROOT / name / "README.md").read_text(encoding="utf-8")
    return re.findall(r"^## (\d+)\. (.+)$", text, re.M)


def anchor(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def torch_version(stack: str) -> str:
    pins = (ROOT / STACKS[stack]).read_text(encoding="utf-8")
    return re.search(r"^torch==(\S+)", pins, re.M).group(1)


def label(stack: str) -> str:
    return stack.removeprefix("torch-")


def spans(stacks: list[str]) -> str:
    """STACKS as runs of consecutive releases: '2.2-2.5, 2.8'."""
    order = list(STACKS)
    runs: list[list[str]] = []
    for stack in sorted(stacks, key=order.index):
        if runs and order.index(stack) == order.index(runs[-1][-1]) + 1:
            runs[-1].append(stack)
        else:
            runs.append([stack])
    return ", ".join(label(r[0]) + (f"–{label(r[-1])}" if len(r) > 1 else "") for r in runs)


def cell_text(cell: dict | None, number: str) -> str:
    """What step NUMBER did on one stack, in a word: runs, differs, needs X, skipped, not run."""
    step = None if cell is None else cell["steps"].get(number)
    if step is None:
        return "not run"
    return step["status"].replace("needs torch >= ", "needs ")


def table(matrix: dict) -> str:
    """One row per step of every example: which releases run it, and how the others differ."""
    lines = ["| step | on torch |", "| --- | --- |"]
    for name in examples():
        for number, title in readme_steps(name):
            by_text: dict[str, list[str]] = {}
            for stack in STACKS:
                text = cell_text(matrix.get(stack, {}).get(name), number)
                by_text.setdefault(text, []).append(stack)
            if list(by_text) == ["runs"]:
                summary = "runs on all"
            else:
                parts = []
                for text, stacks in sorted(by_text.items(), key=lambda i: minor(i[1][0])):
                    shown = f"[differs]({name}/README.md#notes)" if text == "differs" else text
                    parts.append(f"{shown}: {spans(stacks)}")
                summary = "; ".join(parts)
            link = f"[`{name}/` {number}]({name}/README.md#{anchor(f'{number}. {title}')})"
            lines.append(f"| {link} {title} | {summary} |")
    return "\n".join(lines)


def releases(matrix: dict) -> str:
    """Per release: how many steps need a newer torch, and which steps differ (each linked; the
    folder's Notes say how) or do not run."""
    items = []
    for stack in STACKS:
        needs: dict[str, int] = {}
        other: dict[str, dict[str, list[str]]] = {}  # word -> example -> linked step numbers
        for name in examples():
            cell = matrix.get(stack, {}).get(name)
            for number, title in readme_steps(name):
                text = cell_text(cell, number)
                if text.startswith("needs "):
                    needs[text[6:]] = needs.get(text[6:], 0) + 1
                elif text != "runs":
                    link = f"[{number}]({name}/README.md#{anchor(f'{number}. {title}')})"
                    other.setdefault(text, {}).setdefault(name, []).append(link)
        said = []
        if needs:
            counts = [f"{v} for {n}" for v, n in sorted(needs.items(), key=lambda i: minor(i[0]))]
            said.append("steps that need a newer torch: " + ", ".join(counts))
        for text, by_name in other.items():
            said.append(f"{text}: " + "; ".join(f"`{n}/` {', '.join(links)}" for n, links in by_name.items()))
        pins = (ROOT / STACKS[stack]).read_text(encoding="utf-8")
        vision = re.search(r"^torchvision==(\S+)", pins, re.M)
        vision = f"torchvision {vision.group(1)}" if vision else "no torchvision for this Python"
        head = f"- **{torch_version(stack)}** ({vision})"
        items.append(f"{head}: " + ("; ".join(said) or "every step runs") + ".")
    return "\n".join(items)


def generated(matrix: dict) -> str:
    """What README.md holds between the version table's markers."""
    return (
        "<details><summary>What each release does differently</summary>\n\n"
        f"{releases(matrix)}\n\n</details>\n\n"
        "<details><summary>Every step on every release</summary>\n\n"
        f"{table(matrix)}\n\n</details>"
    )


def write_pages(matrix: dict) -> None:
    """The table and the version list in both READMEs (the same text: generated, so English),
    ERRORS.md, and every page's error texts (`python pages.py --no-run`)."""
    text = generated(matrix)
    for readme in (ROOT / "README.md", ROOT / "README.zh-CN.md"):
        content = readme.read_text(encoding="utf-8")
        before, rest = content.split(TABLE_BEGIN, 1)
        after = rest.split(TABLE_END, 1)[1]
        readme.write_text(f"{before}{TABLE_BEGIN}\n\n{text}\n\n{TABLE_END}{after}", encoding="utf-8")
    ERRORS.write_text(errors_page(matrix), encoding="utf-8")
    import pages  # its error texts (error_texts.py) read stacks/matrix.json, which MATRIX is

    if pages.main(["--no-run"]) != 0:  # every page's error texts, from the new matrix
        raise SystemExit("python pages.py --no-run failed: see above")


def pages_differ(matrix: dict) -> list[str]:
    """The generated files that differ from what MATRIX gives."""
    text = generated(matrix)
    wrong = []
    for readme in (ROOT / "README.md", ROOT / "README.zh-CN.md"):
        content = readme.read_text(encoding="utf-8")
        if f"{TABLE_BEGIN}\n\n{text}\n\n{TABLE_END}" not in content:
            wrong.append(readme.name)
    if not ERRORS.is_file() or ERRORS.read_text(encoding="utf-8") != errors_page(matrix):
        wrong.append(ERRORS.name)
    return wrong


def clean(line: str) -> str:
    """A reproduced line as ERRORS.md shows it: no '[Caused by ...]' tail, no memory addresses."""
    line = re.sub(r"\s*\[Caused by .*", " [Caused by ...]", line)
    line = re.sub(r"/ort\.quant\.\w+/", "/ort.quant.../", line)  # quantize_static's temporary folder
    return re.sub(r"0x[0-9a-f]{6,}", "0x...", line).strip()


def code(text: str) -> str:
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def error_rows(cell: dict | None, name: str) -> set[tuple[str, str, str, str]]:
    """(section, error, cause, fixing step's link) of each error one cell reproduced."""
    if cell is None:
        return set()
    import error_texts

    titles = dict(readme_steps(name))
    named = {key: step for key, (_, step) in error_texts.causes(name).items() if step}
    rows = set()
    for number, step in cell["steps"].items():
        for entry in step.get("reproduced", []):
            error = code(clean(entry["error"]))
            if entry["further_down"]:
                error += "\n  <br>further down: " + code(clean(entry["further_down"]))
            # the step that fixes it: the one test.py's CAUSES names now, over the one the cell
            # recorded (a stale cell keeps the step numbers of the run that wrote it)
            lines = (entry["error"], entry["further_down"] or "")
            now = next((n for key, n in named.items() if any(key in x for x in lines)), None)
            fixed_in = str(now or entry.get("fixed_in", number))
            heading = f"{fixed_in}. {titles.get(fixed_in, '')}"
            link = f"[`{name}/` step {fixed_in}]({name}/README.md#{anchor(heading)})"
            rows.add((entry["raised_by"], error, entry["cause"], link))
    return rows


def errors_page(matrix: dict) -> str:
    """ERRORS.md: one entry per error, with the releases that reproduced it, grouped by what
    raises it. A list, not a table: an error message is long."""
    found: dict[tuple[str, str, str, str], list[str]] = {}
    for stack in STACKS:
        for name in examples():
            for row in error_rows(matrix.get(stack, {}).get(name), name):
                found.setdefault(row, []).append(stack)
    unknown = {row[0] for row in found} - set(RAISED_BY)
    if unknown:
        raise SystemExit(f"CAUSES names {sorted(unknown)}; ERRORS.md knows {list(RAISED_BY)}")
    parts = [ERRORS_HEADER]
    for raised_by, title in RAISED_BY.items():
        rows = sorted(row for row in found if row[0] == raised_by)
        if rows:
            entries = [
                f"- {error}\n  <br>torch {spans(found[row])} · {cause} · fixed in {link}"
                for row in rows
                for _, error, cause, link in [row]
            ]
            parts += [f"## {title}\n", "\n".join(entries) + "\n"]
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------


def probe(plan: dict[str, list[str]], pythons: dict[str, pathlib.Path]) -> int:
    """Run each step a needs_torch gate skips on each stack of PLAN anyway (.stacks/probe/): a
    gate is needed where the step fails there. Exit 1 when a gated step ran."""
    results, unneeded = RESULTS / "probe", []
    for stack, names in plan.items():
        run_examples(stack, pythons.get(stack) or environment(stack), names, results)
        for name in names:
            path = results / stack / name / "steps.json"
            steps = json.loads(path.read_text(encoding="utf-8"))["steps"] if path.is_file() else {}
            for number, step in steps.items():
                if "probe" in step:
                    print(f"{stack} {name} step {number} ({step['status']}): {step['probe']}")
                    if step["probe"] == "ran":
                        unneeded.append(f"{stack} {name} step {number}")
    print("gates not needed: " + (", ".join(unneeded) or "none"))
    return 1 if unneeded else 0


class Builder:
    """Builds the next stack's environment in the background while one runs (disk permitting)."""

    def __init__(self) -> None:
        self.threads: dict[str, threading.Thread] = {}
        self.errors: dict[str, BaseException] = {}
        self.built: set[str] = set()  # the stacks whose environment this run built

    def start(self, stack: str) -> None:
        if stack in self.threads or ready(stack):
            return
        if free_gb() < 16:  # an environment, and the unpacked downloads while it installs
            return

        def build() -> None:
            try:
                environment(stack)
            except BaseException as exc:  # noqa: BLE001 - reported when the stack is run
                self.errors[stack] = exc

        self.built.add(stack)
        self.threads[stack] = threading.Thread(target=build, daemon=True)
        self.threads[stack].start()

    def get(self, stack: str) -> pathlib.Path:
        if stack in self.threads:
            self.threads.pop(stack).join()
            if stack in self.errors:
                raise self.errors.pop(stack)
        return environment(stack)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("stacks", nargs="*", metavar="STACK", help=f"of {', '.join(STACKS)}")
    parser.add_argument("--examples", nargs="+", default=[], metavar="NAME", help="only these")
    parser.add_argument("--stale", action="store_true", help="only the stale cells")
    parser.add_argument("--ci", action="store_true", help="CI: check, record nothing")
    parser.add_argument(
        "--all", action="store_true", help="with --ci: every cell of the stacks named, not only stale ones"
    )
    parser.add_argument("--check", action="store_true", help="run nothing; check no cell is stale and the pages")
    parser.add_argument("--no-run", action="store_true", help="run nothing; write the pages")
    parser.add_argument("--probe", action="store_true", help="run each gated step anyway: is its gate needed?")
    parser.add_argument("--build-only", action="store_true", help="build environments only")
    parser.add_argument("--keep", action="store_true", help="without uv: keep the environments pip built")
    parser.add_argument(
        "--python", action="append", default=[], metavar="STACK=PATH", help="use PATH for STACK"
    )
    args = parser.parse_args(argv)
    unknown = [s for s in args.stacks if s not in STACKS]
    if unknown:
        parser.error(f"unknown stack(s) {', '.join(unknown)}; valid: {', '.join(STACKS)}")
    if args.all and not args.ci:  # a run without --ci or --stale runs every cell of its stacks already
        parser.error("--all goes with --ci")
    pythons = {}
    for item in args.python:
        stack, _, path = item.partition("=")
        if stack not in STACKS or not path:
            parser.error(f"--python takes STACK=PATH, STACK one of {', '.join(STACKS)}: {item!r}")
        pythons[stack] = pathlib.Path(path).absolute()  # not resolve(): a venv's python is a link
    matrix = load_matrix()

    if args.no_run:
        write_pages(matrix)
        return 0
    if args.check:
        wrong = pages_differ(matrix)
        old = {s: stale(matrix, s) for s in STACKS}
        for stack, names in old.items():
            if names:
                print(f"{stack}: stale cells (CI re-runs them): {', '.join(names)}")
        if wrong:
            print(f"{', '.join(wrong)} differ from stacks/matrix.json: run python run_stacks.py --no-run")
        return 1 if wrong or any(old.values()) else 0  # a stale cell: run_stacks.py --stale

    # What to run: stack -> examples
    plan: dict[str, list[str]] = {}
    for stack in args.stacks or list(STACKS):
        names = args.examples or examples()
        if args.stale or args.ci:
            names = [n for n in names if n in stale(matrix, stack)]
        if args.ci and (stack in CI_STACKS or args.all):
            names = args.examples or examples()
        if names:
            plan[stack] = names
    if args.probe:
        return probe(plan, pythons)
    if args.build_only:
        for stack in plan:
            if stack not in pythons:
                environment(stack)
        return 0

    failed: list[str] = []
    builder = Builder()
    order = list(plan)
    began = time.monotonic()
    for index, stack in enumerate(order):
        names = plan[stack]
        print(f"\n=== [{index + 1}/{len(order)}] {stack} (torch {torch_version(stack)}): "
              f"{len(names)} example(s), {time.monotonic() - began:.0f} s since the start ===",
              flush=True)
        start = time.monotonic()
        built = stack not in pythons and (stack in builder.built or not ready(stack))
        try:
            python = pythons.get(stack) or builder.get(stack)
        except (SystemExit, subprocess.CalledProcessError) as exc:
            print(f"  {exc}")
            failed.append(f"{stack} (its environment)")
            continue
        for following in order[index + 1 : index + 2]:
            if following not in pythons:
                builder.start(following)
        made_from = {name: inputs(stack, name) for name in names}  # before the run, not after
        status = run_examples(stack, python, names)
        if status != 0:
            failed.append(f"{stack} (an example failed)")
        for name in names:
            quiet = noise(stack, name)
            if quiet:
                failed.append(f"{stack}/{name} (stderr)")
                print(f"  {name} wrote to stderr, which no page explains:\n    "
                      + "\n    ".join(quiet.splitlines()[:6]))
            cell = record(stack, name, made_from=made_from[name])
            if args.ci:
                want = matrix.get(stack, {}).get(name)
                if facts(cell) != facts(want):
                    failed.append(f"{stack}/{name} (differs from stacks/matrix.json)")
                    print(f"  {name}: the run differs from its cell in stacks/matrix.json")
                elif want["from"] != cell["from"]:
                    print(f"  {name}: the run agrees with its cell, recorded from older code "
                          "(python run_stacks.py --stale records it again)")
            elif cell is not None and all(s["status"] != "fails" for s in cell["steps"].values()):
                matrix.setdefault(stack, {})[name] = cell
        # A stack's environment is kept (uv's links into its cache cost little disk), except in CI,
        # which builds each from nothing (.ci/run: no cache) and a copy by pip (6 GB each).
        if stack not in pythons and not args.keep and (args.ci or (built and not uv())):
            shutil.rmtree(ROOT / f".venv-{stack}", ignore_errors=True)
        print(f"  {stack}: {time.monotonic() - start:.0f} s", flush=True)

    if not args.ci:
        latest = load_matrix()  # another run may have recorded other cells meanwhile
        for stack, names in plan.items():
            for name in names:
                if name in matrix.get(stack, {}):
                    latest.setdefault(stack, {})[name] = matrix[stack][name]
        matrix = latest
        save_matrix(matrix)
        write_pages(matrix)
        print("\nwrote stacks/matrix.json, the version table (README.md, README.zh-CN.md), ERRORS.md")
    print(f"\n{len(order)} stack(s) in {time.monotonic() - began:.0f} s")
    if failed:
        print(f"FAILED: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
