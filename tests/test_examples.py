"""Every example runs green and keeps the repository's house rules; every README runs as pasted."""

from __future__ import annotations

import ast
import re

import pytest
from conftest import EXAMPLES, ROOT, page_script, python_blocks

STEP_HEADER = re.compile(r"^== (\d+)\. .* ==$", re.M)
README_STEP = re.compile(r"^## (\d+)\. ", re.M)
ANSI = re.compile(r"\x1b\[")


def readme(name: str) -> str:
    return (ROOT / name / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_passes(example_run, name):
    result = example_run(name)
    assert result.returncode == 0, (
        f"{name} exited {result.returncode}; its output ends:\n{result.output[-4000:]}"
    )


HARNESS = (ROOT / "harness.py").read_text(encoding="utf-8")


def test_the_pages_are_what_pages_py_writes():
    """Every page's code is its folder's test.py regions (page_helpers.py's for the helpers), as
    `python pages.py` writes them: `python pages.py --check` passes."""
    import pages

    assert pages.main(["--check"]) == 0, "a page's code differs from test.py: run python pages.py"


INCLUDE = re.compile(r"^<!-- \{\{\{cog (include\(.*\)|output\(\)) \}\}\} -->$", re.M)


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_block_comes_from_test_py(name):
    """Each python block of both pages is generated (none written by hand), both pages include the
    same regions in the same order, and every region of test.py is on the pages."""
    import pages

    english, chinese = (
        (ROOT / name / page).read_text(encoding="utf-8") for page in ("README.md", "README.zh-CN.md")
    )
    directives = INCLUDE.findall(english)
    assert directives == INCLUDE.findall(chinese), f"{name}: the two pages include different code"
    generated = [d for d in directives if d.startswith("include(")]
    assert len(generated) == len(python_blocks(english)), f"{name}: a python block not from test.py"
    included = set(re.findall(r'"([^"]+)"', " ".join(d for d in generated if "source=" not in d)))
    unused = set(pages.regions(ROOT / name / "test.py")) - included
    assert not unused, f"{name}/test.py has regions no page shows: {sorted(unused)}"


def bound_names(tree: ast.Module) -> set[str]:
    """The modules TREE imports from, its top-level imports and those inside a try: included."""
    return {
        alias.name if isinstance(node, ast.Import) else str(node.module)
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }


@pytest.mark.parametrize("name", EXAMPLES)
def test_page_blocks_paste_as_a_script(name):
    """Each block starts unindented and parses alone; a page script's first block holds only imports, a later one
    imports nothing but cpp_extension (after its log filter); no block uses the harness. The rule is
    pages.paste_problems, which `python pages.py` (and --check) applies to every page too."""
    import pages

    for page in ("README.md", "README.zh-CN.md"):
        problems = pages.paste_problems((ROOT / name / page).read_text(encoding="utf-8"))
        assert not problems, f"{name}/{page}:\n" + "\n".join(problems)


def test_the_paste_rule_catches_what_it_names():
    """paste_problems fails a page whose code uses the harness, imports late, or starts indented."""
    import pages

    page = "```python\nimport torch\n```\n\n```python\n{}\n```\n"
    assert pages.paste_problems(page.format("x = torch.ones(1)")) == []
    for later in ("print(harness.op_types('m.onnx'))", "import os", "  x = 1"):
        assert pages.paste_problems(page.format(later)), later
    assert pages.paste_problems("```python\nx = 1\n```\n"), "a first block with code"


def models_named(script: str) -> list[str]:
    """The .onnx files a page writes, by the string literals that name them (failures/ aside; an
    f-string's fixed parts, such as "_dynamo.onnx" in f"{name}_dynamo.onnx", name no file)."""
    tree = ast.parse(script)
    parts = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    names = {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.endswith(".onnx")
        and id(node) not in parts
    }
    # "ai.onnx" is ONNX's default domain, not a file
    return sorted(
        n for n in names if not n.startswith("failures/") and n not in ("ai.onnx", ".onnx")
    )


@pytest.mark.parametrize("name", EXAMPLES)
def test_readme_runs_as_pasted(page_run, name):
    """Pasted in order into one file in an empty directory, the page's python blocks run and write its models."""
    result = page_run(name)
    assert result.returncode == 0, (
        f"{name}/README.md as a script exited {result.returncode}:\n{result.output[-4000:]}"
    )
    named = models_named(page_script(name))
    assert named, f"{name}/README.md names no model it writes"
    missing = [model for model in named if not (result.out / model).is_file()]
    assert not missing, f"{name}/README.md names models its code did not write: {missing}"


@pytest.mark.parametrize("name", EXAMPLES)
def test_passing_run_is_quiet(example_run, name):
    """No traceback but a reproduced error's, no colour codes: what a reader sees is the lesson's evidence."""
    output = example_run(name).output
    tracebacks = [
        line
        for line in output.splitlines()
        if "Traceback" in line and not line.lstrip().startswith("reproduced")
    ]
    assert not tracebacks, f"{name} prints a traceback in a passing run: {tracebacks[:3]}"
    assert not ANSI.search(output), (
        f"{name} prints ANSI escape codes when its output is not a terminal"
    )


@pytest.mark.parametrize("name", EXAMPLES)
def test_step_headers_match_the_readme(example_run, name):
    """Each `== N. ... ==` header test.py prints is in the README's expected output, and N runs over its `## N.`."""
    output = example_run(name).output
    headers = STEP_HEADER.findall(output)
    assert headers, f"{name} prints no '== N. Title ==' step header"
    expected = expected_output(name)
    missing = [
        line for line in re.findall(r"^== \d+\. .* ==$", output, re.M) if line not in expected
    ]
    assert not missing, f"{name}/README.md's expected output lacks the step headers {missing}"
    assert sorted(set(headers), key=int) == README_STEP.findall(readme(name)), (
        f"{name}: test.py's step numbers {sorted(set(headers), key=int)} differ from the README's '## N.' sections"
    )


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_has_main_guard_and_out_option(name):
    source = (ROOT / name / "test.py").read_text(encoding="utf-8")
    assert 'if __name__ == "__main__":' in source
    assert "def main(" in source
    assert re.search(r"harness\.run\(\s*__file__", source)  # the command line, the steps: harness.py


@pytest.mark.parametrize("name", EXAMPLES)
def test_top_level_readme_has_a_row(name):
    top = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"[`{name}/`]({name}/" in top, f"README.md's table of examples has no row for {name}/"


def expected_output(name: str) -> str:
    text = readme(name)
    assert "## Expected output" in text, f"{name}/README.md has no '## Expected output' section"
    return text.split("## Expected output", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]


def unprinted(expected: str, output: str) -> list[str]:
    """The lines of EXPECTED that OUTPUT lacks, in order: each expected line matches one whole
    output line after the one the line before it matched ("..." stands for any text: an elision
    or a cut), so a line cannot pass as a piece of another, nor out of its place. OUTPUT may hold
    more lines (pages.py --check keeps the page as a run on the author's machine wrote it)."""
    lines, at, missing = output.splitlines(), 0, []
    for line in expected.splitlines():
        if not line.strip():
            continue
        line, cut = re.subn(r" \.\.\.$", "", line.rstrip())  # pages.cut's " ...": the rest
        pattern = re.compile(".*".join(map(re.escape, line.split("..."))) + (".*" if cut else ""))
        found = next((i for i in range(at, len(lines)) if pattern.fullmatch(lines[i].rstrip())), None)
        if found is None:
            missing.append(line)
        else:
            at = found + 1
    return missing


def test_expected_output_is_compared_line_by_line_in_order():
    """The check above fails for a line printed as a piece of another, and for lines out of order."""
    assert unprinted("  f16: a b\n  bf16: a b c", "  f16: a b\n  bf16: a b c") == []
    assert unprinted("  f16: a b", "  bf16: a b c") == ["  f16: a b"]  # a piece of a line
    assert unprinted("  two\n  one", "  one\n  two") == ["  one"]  # out of order
    assert unprinted("  x: matches (diff ...; rtol=1 ...", "  x: matches (diff 3e-7; rtol=1e-05)") == []
    assert unprinted("  reproduced: the inliner. ...", "  reproduced: the inliner. []") == []  # a cut line


@pytest.mark.parametrize("name", EXAMPLES)
def test_readme_expected_output_is_what_test_py_prints(example_run, name):
    """The README's expected output, line by line and in order, is what test.py prints here (with
    what varies elided: pages.VARIES, the CPU's lines included)."""
    import pages

    result = example_run(name)
    output = pages.normalize(result.output, str(result.out))
    missing = unprinted(expected_output(name), output)
    assert not missing, (
        f"{name}/README.md expects lines that test.py did not print here, in that order (run "
        f"python pages.py {name} if test.py changed; a line that depends on the CPU starts with "
        f"'  this CPU'): {missing}"
    )


LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_no_link_leaves_the_repository():
    """A clone has only the repository: every relative link of every page resolves to a file or folder in it,
    and no page names the source documents' folder beside it (cite their public addresses instead)."""
    pages = [*ROOT.glob("*.md"), *ROOT.glob("*/*.md")]
    outside = "/".join(
        ("shared", "seeds")
    )  # built, so that this file does not name the folder either
    problems = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        if outside in text:
            problems.append(f"{page.relative_to(ROOT)} names {outside}")
        for target in LINK.findall(text):
            if "://" in target or target.startswith("mailto:"):
                continue
            resolved = (page.parent / target).resolve()
            if not resolved.is_relative_to(ROOT) or not resolved.exists():
                problems.append(
                    f"{page.relative_to(ROOT)} links {target}, which a clone does not have"
                )
    assert not problems, "; ".join(problems)


def heading_anchors(page) -> set[str]:
    """The anchors GitHub gives the headings of PAGE (run_stacks.anchor; a repeated one gets -1, -2, ...)."""
    import run_stacks

    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    seen: dict[str, int] = {}
    anchors = set()
    for title in re.findall(r"^#{1,6} (.+)$", text, re.M):
        slug = run_stacks.anchor(re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title).replace("`", ""))
        anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return anchors | {f"user-content-{a}" for a in anchors}


def test_every_anchor_names_a_heading():
    """Every link to a heading (`#anchor`, on the same page or another) lands on one: after a page moves its
    sections around, no link is left pointing at nothing."""
    pages = [*ROOT.glob("*.md"), *ROOT.glob("*/*.md")]
    problems = []
    for page in pages:
        text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
        text = re.sub(r"`[^`\n]+`", "", text)  # a link written as code is an example, not a link
        for target, fragment in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", text):
            if "://" in target:
                continue
            linked = (page.parent / target).resolve() if target else page
            if linked.is_dir():
                linked = linked / "README.md"
            if (
                linked.suffix == ".md"
                and linked.is_file()
                and fragment not in heading_anchors(linked)
            ):
                problems.append(f"{page.relative_to(ROOT)} -> {target}#{fragment}")
    assert not problems, "links to no heading: " + "; ".join(problems)


@pytest.mark.parametrize("name", EXAMPLES)
def test_test_py_holds_no_copy_of_the_harness(name):
    """What every test.py shares lives in harness.py: no test.py defines a function or class of the same
    name, or builds its own command line."""
    harness_names = {
        node.name
        for node in ast.parse(HARNESS).body
        if isinstance(node, ast.FunctionDef | ast.ClassDef)
    }
    tree = ast.parse((ROOT / name / "test.py").read_text(encoding="utf-8"))
    defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.ClassDef)}
    copied = sorted(defined & harness_names)
    assert not copied, f"{name}/test.py defines what harness.py has: {copied}"
    assert "argparse" not in bound_names(tree), f"{name}/test.py parses its own command line"
