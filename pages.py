"""Each page's code and expected output, written once: in the folder's test.py, and in a run of it.

    python pages.py            regenerate every page's generated parts (it runs the examples)
    python pages.py FOLDER...  the same for those folders' pages only (the others are not touched)
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

import ast
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
    (re.compile(r"max diff [-+.e0-9]+"), "max diff ..."),  # the same, onnxscript_function's words
    (re.compile(r"\b\d+(\.\d+)? s\b"), "... s"),  # a duration
    (re.compile(r"/ort\.quant\.\w+/"), "/ort.quant.../"),  # quantize_static's temporary folder
    # What an int8 runtime's kernels give depends on the CPU (quantize_int8): the checks assert a
    # bound; the page shows the wording, not this machine's figure.
    (re.compile(r"\d+(\.\d+)?% of the (output|bound|tolerance)"), r"...% of the \2"),
    (re.compile(r"\|int8 - float\| <= \d\.\d+"), "|int8 - float| <= ..."),
    (re.compile(r"\(off by \d(\.\d+)?e-\d+\)"), "(off by ...)"),
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
        first = next((line for line in part.splitlines() if not line.startswith("#")), "")
        code += ("\n\n\n" if re.match(r"(def|class|@) ?", first) else "\n\n") + part
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


# A page holds one script, or two where a heading says the rest runs in another environment.
SECOND_ENVIRONMENT = "## In the RKNN environment"
SECOND_ENVIRONMENT_ZH = "## 在 RKNN 环境中"  # the same heading on the Chinese page
# The one import a page makes after its first block: importing torch.utils.cpp_extension logs "No
# CUDA runtime is found" on a machine with a CUDA toolkit and no GPU, so the page filters that
# message first and imports right after the filter, in the block that builds its C++.
LATE_IMPORT = "from torch.utils import cpp_extension"
LATE_IMPORT_FILTER = 'logging.getLogger("torch.utils.cpp_extension").addFilter('


def python_blocks(markdown: str) -> list[str]:
    """The ```python blocks of a page, in order."""
    return re.findall(r"^```python\n(.*?)^```", markdown, re.S | re.M)


def page_parts(markdown: str) -> list[list[str]]:
    """The python blocks of a page: one list per script (two where SECOND_ENVIRONMENT splits it)."""
    heading = SECOND_ENVIRONMENT_ZH if f"\n{SECOND_ENVIRONMENT_ZH}\n" in markdown else SECOND_ENVIRONMENT
    return [python_blocks(part) for part in markdown.split(f"\n{heading}\n", 1)]


def _is_import(node: ast.stmt) -> bool:
    """An import, or a try: whose body is only imports (an optional package, with a fallback)."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        return True
    return isinstance(node, ast.Try) and all(isinstance(n, ast.Import | ast.ImportFrom) for n in node.body)


def paste_problems(markdown: str) -> list[str]:
    """What keeps a page's python blocks, pasted in order into one file per script, from running as
    a reader's script: a block that starts indented or does not parse alone, a first block holding
    more than imports, a later block importing (but cpp_extension, after its log filter), any use
    of the repository's harness (a reader has none)."""
    problems = []
    for script, blocks in enumerate(page_parts(markdown), start=1):
        if not blocks:
            problems.append(f"script {script} has no python block")
        for number, block in enumerate(blocks, start=1):
            where = f"script {script}, block {number} ({block.strip().splitlines()[0][:50]!r})"
            if block[:1] in (" ", "\t"):
                problems.append(f"{where} starts indented")
                continue
            try:
                tree = ast.parse(block)
            except SyntaxError as error:
                problems.append(f"{where} does not parse alone: {error}")
                continue
            if any(isinstance(n, ast.Name) and n.id == "harness" for n in ast.walk(tree)) or any(
                "harness" in (a.name for a in n.names) or getattr(n, "module", None) == "harness"
                for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)
            ):
                problems.append(f"{where} uses the harness, which a reader does not have")
            if number == 1:
                others = [ast.unparse(n).splitlines()[0] for n in tree.body if not _is_import(n)]
                if others:
                    problems.append(f"{where}, the first, holds more than imports: {others}")
                continue
            imports = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
            if imports not in ([], [LATE_IMPORT]):
                problems.append(f"{where} imports {imports}: imports go in the first block")
            elif imports and LATE_IMPORT_FILTER not in block[: block.index(LATE_IMPORT)]:
                problems.append(f"{where} imports cpp_extension before filtering its log")
    return problems


PROSE_WORDS = 2500  # an English page's prose, outside <details>
OPENING_WORDS = 250  # before `## 1.`: the error it fixes, the way out, how to run it
# Lines over WIDTH in test.py regions that a page shows today, each to be wrapped when its folder's
# cells are next re-recorded (any change to test.py re-runs its folder on every release): the check
# fails while one is listed but no longer needed.
WIDE_LINES = {
    "deploy_openvino/README.md": 1,
}


def prose(markdown: str) -> str:
    """A page without its code blocks, <details> and comments (cog's markers and sources)."""
    text = re.sub(r"```.*?```", "", markdown, flags=re.S)
    text = re.sub(r"<details>.*?</details>", "", text, flags=re.S)
    return re.sub(r"<!--.*?-->", "", text, flags=re.S)


def words(text: str) -> int:
    """Words as the house rule counts them: link targets included, each CJK character one."""
    return len(re.findall(r"[A-Za-z0-9_'.-]+", text)) + sum("\u4e00" <= c <= "\u9fff" for c in text)


def size_problems(page: pathlib.Path, markdown: str) -> list[str]:
    """The page-size and layout rules (CONTRIBUTING.md, "The page"): at most PROSE_WORDS prose
    words on an English page (the top README's too) and OPENING_WORDS before a folder's step 1;
    no python line wider than WIDTH, which GitHub's code column shows whole."""
    problems = []
    name = page.relative_to(ROOT).as_posix()
    if page.name == "README.md":  # the English pages, the top README's too
        text = prose(markdown)
        if (count := words(text)) > PROSE_WORDS:
            problems.append(f"{count} prose words (at most {PROSE_WORDS} outside <details>)")
    if page.name == "README.md" and page.parent != ROOT:  # a folder's page: its opening
        first = re.search(r"^## 1\.", text, re.M)
        if first and (count := words(text[: first.start()])) > OPENING_WORDS:
            problems.append(f"{count} words before step 1 (at most {OPENING_WORDS})")
    wide = [line for block in python_blocks(markdown) for line in block.splitlines() if len(line) > WIDTH]
    allowed = WIDE_LINES.get(name.replace("README.zh-CN.md", "README.md"), 0)
    if len(wide) > allowed:
        problems += [f"a python line of {len(line)} characters (at most {WIDTH}): {line.strip()[:60]}"
                     for line in wide]
    elif len(wide) < allowed:
        problems.append(f"pages.WIDE_LINES allows {allowed} wide lines, the page has {len(wide)}: update it")
    return problems


def main(argv: list[str]) -> int:
    global CHECK
    sys.modules.setdefault("pages", sys.modules[__name__])  # the generators' import finds this run
    CHECK = "--check" in argv or "--no-run" in argv
    found = [*ROOT.glob("README*.md"), *ROOT.glob("*/README*.md")]
    pages = sorted(p for p in found if "{{{cog" in p.read_text("utf-8"))
    chosen = [ROOT / a.strip("/") for a in argv if not a.startswith("--")]
    if chosen:
        pages = [p for p in pages if p.parent in chosen]
    if not CHECK:
        folders = sorted({p.parent for p in pages if "output()" in p.read_text("utf-8")})
        with ThreadPoolExecutor(os.cpu_count()) as pool:
            OUTPUTS.update(zip(folders, pool.map(run_example, folders), strict=True))
    options = ["--check", "--diff"] if "--check" in argv else ["-r"]
    prologue = "from pages import include, output; from error_texts import errors_fixed, opening_errors, start_here"
    markers = "{{{cog }}} {{{end}}}"  # not cog's [[[ ]]]: a page prints nested lists
    argv = ["cog", *options, "--markers", markers, "-I", str(ROOT), "-p", prologue]
    status = Cog().main([*argv, *map(str, pages)])
    folders = [p for p in pages if p.parent != ROOT]  # the top README's recipe is recipe.py's
    pasted = [f"{p.relative_to(ROOT)}: {problem}" for p in folders
              for problem in paste_problems(p.read_text("utf-8"))]  # fmt: skip
    if pasted:  # the page is written (or checked); its code must still paste as a script
        print("a page's blocks do not paste as a script:\n  " + "\n  ".join(pasted))
    sized = [f"{p.relative_to(ROOT)}: {problem}" for p in pages
             for problem in size_problems(p, p.read_text("utf-8"))]  # fmt: skip
    if sized:
        print("a page breaks the size or layout rules:\n  " + "\n  ".join(sized))
    return status or (1 if pasted or sized else 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
