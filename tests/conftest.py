"""Shared fixtures: run each example once per session, in its own process, with a temporary --out; and run each
README as a reader would paste it (its python blocks, in order, as one script in an empty directory)."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys
from dataclasses import dataclass

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import run_all  # noqa: E402

EXAMPLES = run_all.discover(ROOT)


@dataclass
class ExampleRun:
    name: str
    returncode: int
    output: str
    out: pathlib.Path

    def model(self, relative: str):
        """Load a model the example wrote, failing with the example's output if it is not there."""
        import onnx

        path = self.out / relative
        assert path.is_file(), f"{self.name} did not write {relative}; its output ends:\n{self.output[-3000:]}"
        return onnx.load(str(path))


@pytest.fixture(scope="session")
def example_run(tmp_path_factory):
    """example_run(name) -> ExampleRun, running `python test.py --out TMP` at most once per session."""
    cache: dict[str, ExampleRun] = {}

    def run(name: str) -> ExampleRun:
        if name not in cache:
            out = tmp_path_factory.mktemp(name)
            proc = subprocess.run(
                [sys.executable, "test.py", "--out", str(out)],
                cwd=ROOT / name,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=1800,
            )
            cache[name] = ExampleRun(name, proc.returncode, proc.stdout, out)
        result = cache[name]
        if result.returncode == run_all.SKIP_EXIT_CODE:
            pytest.skip(f"{name} skipped itself: {run_all.last_lines(result.output)}")
        return result

    return run


def python_blocks(markdown: str) -> list[str]:
    """The ```python blocks of a README, in order."""
    return re.findall(r"^```python\n(.*?)^```", markdown, re.S | re.M)


def page_script(name: str) -> str:
    """What a reader gets by pasting every python block of NAME/README.md, in order, into one file."""
    readme = (ROOT / name / "README.md").read_text(encoding="utf-8")
    return "\n\n".join(block.rstrip() for block in python_blocks(readme)) + "\n"


@pytest.fixture(scope="session")
def page_run(tmp_path_factory, example_run):
    """page_run(name) -> ExampleRun of NAME's page script, run once per session in an empty directory.

    It skips where the example itself skipped (no C++ compiler, ...): the page has no SKIP logic of its own.
    """
    cache: dict[str, ExampleRun] = {}

    def run(name: str) -> ExampleRun:
        example_run(name)  # skips when the example skipped itself; also warms the C++ build cache
        if name not in cache:
            folder = tmp_path_factory.mktemp(f"page-{name}")
            (folder / "page.py").write_text(page_script(name), encoding="utf-8")
            proc = subprocess.run(
                [sys.executable, "page.py"],
                cwd=folder,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=1800,
            )
            cache[name] = ExampleRun(name, proc.returncode, proc.stdout, folder)
        return cache[name]

    return run
