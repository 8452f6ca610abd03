"""Shared fixtures: run each example once per session, in its own process, with a temporary --out; and run each
README as a reader would paste it (its python blocks, in order, as one script in an empty directory)."""

from __future__ import annotations

import ctypes
import os
import pathlib
import subprocess
import sys
from dataclasses import dataclass

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import run_all  # noqa: E402

EXAMPLES = run_all.discover(ROOT)

# The examples run as a reader starts them: without PYTHONUNBUFFERED (some machines set it, this one among them).
# Without it C's stdout is block-buffered, and C++ output must still land where the example captures it.
CHILD_ENV = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}


def passed(result: ExampleRun) -> ExampleRun:
    """RESULT, after checking that the example passed (its output's end is the message if not)."""
    assert result.returncode == 0, f"{result.name} exited {result.returncode}:\n{result.output[-4000:]}"
    return result


def load_example(name: str):
    """NAME/test.py as a module (it runs nothing at import): its ops, models and tolerances, not
    copies of them. Registered in sys.modules: @onnxscript.script reads its source through it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"{name}_example", ROOT / name / "test.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def flush_c_stdio():
    """Flush C's stdout after each test, while pytest still captures the descriptors: a test that exports
    in this process (dynamo=False) leaves the exporter's C++ log ('Torch IR graph at exception: ...') in
    C's buffer, which would otherwise reach the terminal at exit, after pytest's summary."""
    yield
    ctypes.CDLL(None).fflush(None)


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
        assert path.is_file(), (
            f"{self.name} did not write {relative}; its output ends:\n{self.output[-3000:]}"
        )
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
                env=CHILD_ENV,
            )
            cache[name] = ExampleRun(name, proc.returncode, proc.stdout, out)
        result = cache[name]
        if result.returncode == run_all.SKIP_EXIT_CODE:
            pytest.skip(f"{name} skipped itself: {run_all.verdict(result.output, 'SKIP')}")
        return result

    return run


# A README's ```python blocks, and its scripts (a second one for another environment, after the heading
# pages.SECOND_ENVIRONMENT): pages.py's, which checks the same pages.
from pages import python_blocks  # noqa: E402, F401 - re-exported: tests import it from here


def rknn_python() -> pathlib.Path | None:
    """deploy_rknn's second interpreter, found as its test.py finds it: $RKNN_PYTHON, else ROOT/.venv-rknn."""
    configured = os.environ.get("RKNN_PYTHON", "").strip()
    python = pathlib.Path(configured) if configured else ROOT / ".venv-rknn" / "bin" / "python"
    return python if python.is_file() else None


def page_parts(name: str) -> list[list[str]]:
    """The python blocks of NAME/README.md, in order: one list, or two where the page says that a second part
    runs in another environment."""
    import pages

    return pages.page_parts((ROOT / name / "README.md").read_text(encoding="utf-8"))


def page_scripts(name: str) -> list[str]:
    """What a reader gets by pasting each part's python blocks, in order, into one file."""
    return ["\n\n".join(block.rstrip() for block in blocks) + "\n" for blocks in page_parts(name)]


def page_script(name: str) -> str:
    """All the page's scripts, as one text (to find the models it names)."""
    return "\n".join(page_scripts(name))


@pytest.fixture(scope="session")
def page_run(tmp_path_factory, example_run):
    """page_run(name) -> ExampleRun of NAME's page script(s), run once per session in an empty directory.

    It skips where the example itself skipped (no C++ compiler, no RKNN environment, ...): the page has no SKIP
    logic of its own. A second script (another environment's) runs after the first, in the same directory.
    """
    cache: dict[str, ExampleRun] = {}

    def run(name: str) -> ExampleRun:
        example_run(name)  # skips when the example skipped itself; also warms the C++ build cache
        if name not in cache:
            folder = tmp_path_factory.mktemp(f"page-{name}")
            scripts = page_scripts(name)
            interpreters = [pathlib.Path(sys.executable)]
            if len(scripts) > 1:
                second = rknn_python()
                if second is None:
                    pytest.skip(
                        f"{name}'s second page script needs the RKNN environment (.venv-rknn)"
                    )
                interpreters.append(second)
            returncode, output = 0, ""
            for number, (script, python) in enumerate(zip(scripts, interpreters, strict=True)):
                filename = "page.py" if number == 0 else f"page{number + 1}.py"
                (folder / filename).write_text(script, encoding="utf-8")
                proc = subprocess.run(
                    [str(python), filename],
                    cwd=folder,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    timeout=1800,
                    env=CHILD_ENV,
                )
                output += proc.stdout
                if proc.returncode != 0:
                    returncode = proc.returncode
                    break
            cache[name] = ExampleRun(name, returncode, output, folder)
        return cache[name]

    return run
