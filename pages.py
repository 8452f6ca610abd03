"""Each page's code and expected output, written once: in the folder's test.py, and in a run of it.

    python pages.py            regenerate every page's generated parts (it runs the examples)
    python pages.py FOLDER...  the same, running only those examples (the others' output is kept)
    python pages.py --no-run   the same, keeping the expected output blocks as they are
    python pages.py --check    fail when a page's code differs from test.py's (CI; runs nothing)

It runs cog (https://cog.readthedocs.io) over every README*.md. In a page,

    <!-- {{{cog include("NAME") }}} -->
    ...
    <!-- {{{end}}} -->

holds region NAME of the folder's test.py (`# region NAME` ... `# endregion`), dedented, as a
python block; include("NAME", source="recipe.py") takes it from that file of the repository, and
include("page_helpers.py:imports", "imports") joins two files' regions.
`output()` holds what `python test.py` prints, long lines cut at ` ...` and what differs from run
to run elided (VARIES); `--check` keeps those as they are (tests/ checks them against a run).
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import tempfile
import textwrap
from concurrent.futures import ThreadPoolExecutor

from cogapp import Cog

ROOT = pathlib.Path(__file__).resolve().parent
WIDTH = 96  # GitHub's code column shows 98 characters of a line
REGION = re.compile(r"^[ \t]*# region (\S+)\n(.*?)^[ \t]*# endregion\n", re.S | re.M)
# What differs between two runs of one example on one machine: elided, here and in the check.
VARIES = [
    (re.compile(r"max abs diff [-+.e0-9]+"), "max abs diff ..."),
    (re.compile(r"\b\d+(\.\d+)? s\b"), "... s"),  # a duration
    # a C++ build, cold or from the cache
    (re.compile(r"^  (built \S+ in|reused the cached build) .*", re.M), "  built ... (or reused the cache)"),
    # What differs between CPUs (deploy_openvino): a run prints each such line as "  this CPU...";
    # a page shows a run of them as one line. The step checks them against the rule deciding them.
    (re.compile(r"^(  this CPU\b.*\n?)+", re.M), "  this CPU: ... (lines that depend on the CPU)\n"),
]
OUTPUTS: dict[pathlib.Path, str] = {}  # folder -> what its test.py printed, when it has run
CHECK = False


def regions(path: pathlib.Path) -> dict[str, str]:
    """Every `# region NAME` ... `# endregion` of PATH, dedented."""
    found: dict[str, str] = {}
    for name, body in REGION.findall(path.read_text(encoding="utf-8")):
        assert name not in found, f"{path}: two regions named {name}"
        found[name] = textwrap.dedent(body).strip("\n")
    return found


def include(*names: str, source: str | None = None) -> None:
    """Write the regions NAMES of SOURCE (default: test.py beside the page) as one python block."""
    import cog  # cog's module, there while cog runs a generator

    page = pathlib.Path(cog.inFile).resolve()
    path = ROOT / source if source else page.parent / "test.py"
    parts = []
    for name in names:  # FILE:NAME takes the region from that file of the repository
        file, _, region = name.rpartition(":")
        found = regions(ROOT / file if file else path)
        assert region in found, f"{page}: {file or path.name} has no region {region}"
        parts.append(found[region])
    code = parts[0]
    for part in parts[1:]:  # PEP 8's two blank lines before a definition, one otherwise
        code += ("\n\n\n" if re.match(r"(def|class|@) ?", part) else "\n\n") + part
    cog.outl(f"\n```python\n{code}\n```\n")  # blank lines: a fence stands apart from the markers


def normalize(text: str, out: str = "") -> str:
    """TEXT with what VARIES elided (OUT, the models' folder, and the repository shown as ...)."""
    for path in (out, str(ROOT)):
        text = text.replace(path, "...") if path else text
    for pattern, replacement in VARIES:
        text = pattern.sub(replacement, text)
    return text


def cut(line: str) -> str:
    return line if len(line) <= WIDTH else line[: WIDTH - 4].rstrip() + " ..."


def output() -> None:
    """Write what the page's test.py printed (OUTPUTS), normalized and cut, as a text block."""
    import cog

    folder = pathlib.Path(cog.inFile).resolve().parent
    if CHECK or folder not in OUTPUTS:
        cog.out(cog.previous)  # --check: tests/ compares the block with a real run
        return
    lines = [cut(line.rstrip()) for line in OUTPUTS[folder].splitlines()]
    cog.outl("\n```text\n" + "\n".join(lines).strip("\n") + "\n```\n")


def run_example(folder: pathlib.Path) -> str:
    with tempfile.TemporaryDirectory() as out:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
        proc = subprocess.run(
            [sys.executable, "test.py", "--out", out], cwd=folder, env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=1800, check=False,
        )
        if proc.returncode != 0:
            raise SystemExit(f"{folder.name}/test.py exited {proc.returncode}:\n{proc.stdout}")
        return normalize(proc.stdout, out)


def main(argv: list[str]) -> int:
    global CHECK
    sys.modules.setdefault("pages", sys.modules[__name__])  # the generators' import finds this run
    CHECK = "--check" in argv or "--no-run" in argv
    found = [*ROOT.glob("README*.md"), *ROOT.glob("*/README*.md")]
    pages = sorted(p for p in found if "{{{cog" in p.read_text("utf-8"))
    if not CHECK:
        folders = sorted({p.parent for p in pages if "output()" in p.read_text("utf-8")})
        chosen = [ROOT / a.strip("/") for a in argv if not a.startswith("--")]
        folders = [f for f in folders if f in chosen] if chosen else folders
        with ThreadPoolExecutor(os.cpu_count()) as pool:
            OUTPUTS.update(zip(folders, pool.map(run_example, folders), strict=True))
    options = ["--check", "--diff"] if "--check" in argv else ["-r"]
    prologue = "from pages import include, output"
    markers = "{{{cog }}} {{{end}}}"  # not cog's [[[ ]]]: a page prints nested lists
    argv = ["cog", *options, "--markers", markers, "-I", str(ROOT), "-p", prologue]
    return Cog().main([*argv, *map(str, pages)])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
