"""Shared fixtures: run each example once per session, in its own process, with a temporary --out."""

from __future__ import annotations

import pathlib
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
