"""What every example's test.py shares, so that each test.py holds only its lesson.

A test.py imports this module; the page code never does (a README pasted into an empty folder runs
without it). What it gives a test.py:

- run(): the command line (--out DIR, -v), the output folder, each step in turn with its
  `== N. Title ==` header (the step function's docstring), SKIP and FAIL lines, steps.json (what
  each step did on this torch, and every error it reproduced, for the version table and
  ERRORS.md), exit status 0 / 1 / 77.
- run_more(): the steps an example runs in a second environment (deploy_rknn's RKNN half).
- needs_torch(), differs(), Skip: how a step says it cannot run here, once, at the step.
- quiet() and captured(): what C++ code and loggers print, held back and checked (shown with -v).
- show(): the full ONNX checker and a one-line summary of a model (the whole graph with -v);
  attributes(), op_types(), opsets_of(), output_dims(): what a model holds, to assert on;
  printed(): what the running step has printed, to check a reproduced error's text.
The pages' imports and steps are regions of each test.py (pages.py shows them on the pages); the
helpers the pages paste are in page_helpers.py.
"""

from __future__ import annotations

import argparse
import ast
import atexit
import contextlib
import ctypes
import importlib.abc
import importlib.machinery
import importlib.util
import json
import logging
import os
import pathlib
import re
import shutil
import sys
import sysconfig
import tempfile
import textwrap
import threading
import traceback
import types
import warnings


class _StderrWatch:
    """From here on, what reaches file descriptor 2 (Python's warnings, C++ code, child processes)
    still goes to the terminal, and stop() returns it: steps.json keeps it, and a run that wrote
    anything there fails run_stacks.py and the suite (what no page explains)."""

    def __init__(self) -> None:
        sys.stderr.flush()
        self.chunks: list[bytes] = []
        self.terminal = os.dup(2)
        read, write = os.pipe()
        os.dup2(write, 2)
        os.close(write)
        self.thread = threading.Thread(target=self._pump, args=(read,), daemon=True)
        self.thread.start()

    def _pump(self, read: int) -> None:
        while chunk := os.read(read, 65536):
            self.chunks.append(chunk)
            os.write(self.terminal, chunk)
        os.close(read)

    def stop(self) -> str:
        if self.terminal is not None:
            sys.stderr.flush()
            os.dup2(self.terminal, 2)  # the pipe's last write end closes: the pump sees its end
            self.thread.join(timeout=10)
            os.close(self.terminal)
            self.terminal = None
        return b"".join(self.chunks).decode(errors="replace")


# A test.py's stderr from its first import on (torch's and NumPy's import-time warnings included).
_WATCH = _StderrWatch() if pathlib.Path(sys.argv[0]).name == "test.py" else None
if _WATCH is not None:
    atexit.register(_WATCH.stop)  # what is still in the pipe reaches the terminal

import numpy as np  # noqa: E402, I001 - after the watch starts
import onnx  # noqa: E402
import torch  # noqa: E402


ROOT = pathlib.Path(__file__).resolve().parent
TORCH = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])  # e.g. (2, 14)
SKIP = 77  # exit status for "cannot run here", as in automake
WIDTH = 96  # a longer summary line is cut with " ...": GitHub's code column shows 98 characters
VERBOSE = False  # -v: every exported graph in full, and what quiet() held back


class Skip(Exception):
    """A step this machine cannot run (no C++ compiler, a missing optional package):
    `SKIP step N: why`, the other steps go on, and the example exits 77."""


class NeedsTorch(Exception):
    """Raised where a step finds it needs a newer torch: `SKIP step N: needs torch >= X (why)`."""

    def __init__(self, version: str, why: str) -> None:
        super().__init__(f"needs torch >= {version} ({why})")
        self.version, self.why = version, why


if TORCH < (2, 4):
    # torch 2.3 and older: the TorchScript exporter is torch.onnx.export's only one, and the keyword
    # that picks it, dynamo=, came with 2.4. A reader on those releases deletes the pages'
    # `dynamo=False`; every test.py does the same here, once (run() prints that it does). What the
    # release lacks besides is named: a keyword its export does not take (autograd_inlining= came
    # with 2.1), an opset its exporter does not write (17 at most on 1.13, 18 on 2.0).
    import inspect

    from torch.onnx import _constants

    _export = torch.onnx.export
    _TAKES = inspect.signature(_export).parameters
    _KEYWORD_SINCE = {"autograd_inlining": "2.1"}  # torch/onnx/utils.py's export(), by release
    _OPSET_SINCE = {18: "2.0", 19: "2.1", 20: "2.4"}  # _constants.ONNX_MAX_OPSET, by release

    def _export_before_2_4(*args, dynamo=False, **kwargs):
        if dynamo:
            raise NeedsTorch("2.4", "torch.onnx.export(..., dynamo=True) came with 2.4")
        for keyword in kwargs:
            if keyword not in _TAKES:
                since = _KEYWORD_SINCE[keyword]
                raise NeedsTorch(since, f"torch.onnx.export(..., {keyword}=) came with {since}")
        opset = kwargs.get("opset_version") or 0
        if opset > _constants.ONNX_MAX_OPSET:
            since = _OPSET_SINCE[opset]
            raise NeedsTorch(since, f"the TorchScript exporter writes opset {opset} from {since}")
        return _export(*args, **kwargs)

    torch.onnx.export = _export_before_2_4
DROPPED = "torch.onnx.export has no dynamo= argument before 2.4: the pages' dynamo=False is dropped"
# torch 2.5's torch.onnx.export ends its parameters with `**_: Any,  # ignored options`: it takes
# custom_translation_table without a word and writes the model without the translation.
TABLE = "custom_translation_table came with 2.6 (2.5's export takes it and ignores it, silently)"


class _Absent(types.ModuleType):
    """A package this environment lacks (torchvision beside torch 1.13 on Python 3.11: the index
    has no torchvision wheel for it): the pages' `import torchvision` succeeds, and each step that
    uses it is skipped, saying so, while the others run."""

    def __init__(self, name: str, why: str) -> None:
        super().__init__(name)
        self.__path__, self._why = [], why

    def __getattr__(self, attribute: str):
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        raise Skip(self._why)


class _AbsentFinder(importlib.abc.MetaPathFinder):
    def __init__(self, package: _Absent) -> None:
        self.package = package

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(self.package.__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec):
        return _Absent(spec.name, self.package._why)

    def exec_module(self, module):
        pass


if importlib.util.find_spec("torchvision") is None:
    _RELEASE = torch.__version__.split("+")[0]
    _TORCHVISION = _Absent(
        "torchvision",
        f"torchvision is not installed beside torch {_RELEASE} "
        "(for torch 1.13 the index has no torchvision built for Python 3.11)",
    )
    sys.modules["torchvision"] = _TORCHVISION
    sys.meta_path.insert(0, _AbsentFinder(_TORCHVISION))


def needs_torch(version: str, why: str):
    """Decorate a step that needs torch >= VERSION: on an older torch run() skips it whole, prints
    `SKIP step N: needs torch >= VERSION (why)`, and the version table says so."""

    def mark(step):
        step.needs_torch = (version, why)
        return step

    return mark


def differs(why: str) -> None:
    """The running step behaves differently, and validly, on this torch: print why, once, and mark
    it (the version table says `differs`)."""
    print(f"  on torch {torch.__version__.split('+')[0]}: {why}")
    _STATUS[_CURRENT[0]].update(status="differs", why=why)


# ---------------------------------------------------------------------------------------------
# run(): the command line, the output folder, the steps, steps.json
# ---------------------------------------------------------------------------------------------

_STATUS: dict[int, dict] = {}  # step number -> {"status", "why", "title", "reproduced"}: steps.json
_CURRENT = [0]
_PRINTED: list[list[str]] = [[]]  # what the running step has printed so far


def printed() -> str:
    """What the running step has printed so far (a reproduced error's line, to check its text)."""
    return "".join(_PRINTED[0])


def run(
    test_py: str,
    steps,
    *,
    kept: dict[int, tuple[str, ...]],
    causes: dict[str, tuple],
    failures: tuple[str, ...] = (),
    argv: list[str] | None = None,
    first: int = 1,
    other_files: tuple[str, ...] = (),
    arguments=None,
    after=None,
    summary: str = "steps.json",
    passed: str = "every model in {out} checked and matched PyTorch in ONNX Runtime",
) -> int:
    """main() of a test.py: run STEPS (numbered from FIRST) in DIR (--out), its current directory.

    steps: a list, or the test.py's globals(): then its functions named stepN_..., in N's order.

    kept: the models each step writes and claims valid (checked to exist once the step ran);
    failures: the failure demonstrations under failures/; other_files: whatever else it writes.
    causes: part of an expected error's text -> (what raises it, its cause in one line[, the step
    that fixes it]); every error a step reproduces must match exactly one, for ERRORS.md.
    arguments(parser): add options; their values reach the steps as harness.OPTIONS.
    after(out): runs after the steps (deploy_rknn's second environment); may raise Skip.
    """
    global VERBOSE, OPTIONS
    here = pathlib.Path(test_py).resolve().parent
    args = _parse_command_line(test_py, here, argv, arguments)
    VERBOSE, OPTIONS = args.verbose, args
    out = args.out.resolve()
    if isinstance(steps, dict):
        steps = steps_in(steps)
    owned = tuple(m for models in kept.values() for m in models) + failures
    problem = _prepare_out(out, owned + other_files)
    if problem:
        print(f"FAIL: cannot write models under {out}: {problem}")
        return 1
    _quiet_the_libraries()
    if TORCH < (2, 4):
        print(f"(torch {torch.__version__.split('+')[0]}: {DROPPED}, as you would delete it)")
    _STATUS.clear()
    skipped: list[str] = []
    home = os.getcwd()
    stderr = _WATCH or _StderrWatch()
    os.chdir(out)  # the lesson's code writes "x.onnx" and "failures/x.onnx", as the README does
    try:
        torch.manual_seed(0)
        for number, step in enumerate(steps, start=first):
            reason = _run_step(number, step, causes)
            if reason:
                skipped.append(f"step {number}: {reason}")
        if after is not None:
            try:
                after(out)
            except Skip as reason:  # printed once, as the run's last line
                skipped.append(str(reason))
    except AssertionError as exc:
        print(f"\nFAIL: {_failed(exc)}")
        if VERBOSE:
            traceback.print_exc(file=sys.stdout)
        return 1
    except OSError as exc:
        print(f"\nFAIL: cannot write models under {out}: {exc}")
        return 1
    except Exception as exc:  # noqa: BLE001 - an unexpected error: its message, the traceback with -v
        print(f"\nFAIL: {_unexpected(exc)}")
        if VERBOSE:
            traceback.print_exc(file=sys.stdout)
        return 1
    finally:
        os.chdir(home)
        summary_problem = write_summary(out / summary, {"stderr": stderr.stop()})
    if summary_problem:
        print(f"\nFAIL: cannot write models under {out}: {summary_problem}")
        return 1
    foreign = _foreign_models(out, owned)
    if foreign:
        names = ", ".join(foreign)
        print(f"\nFAIL: {out} holds models this example did not write: {names} (remove them)")
        return 1
    if skipped:
        print(f"\nSKIP: {'; '.join(skipped)}")
        return SKIP
    ran = [n for n, s in _STATUS.items() if s["status"] in ("runs", "differs")]
    if not ran:
        print(f"\nSKIP: no step runs on torch {torch.__version__.split('+')[0]} (each says why above)")
        return SKIP
    missing = [m for n in ran for m in kept.get(n, ()) if not (out / m).is_file()]
    if missing:
        print(f"\nFAIL: these models were not written: {', '.join(missing)}")
        return 1
    print("\nPASS: " + passed.format(out=out))
    return 0


OPTIONS = argparse.Namespace()


def steps_in(namespace: dict) -> list:
    """The functions named stepN_... in NAMESPACE (a test.py's globals()), in N's order: 1, 2, ..."""
    found = {int(m[1]): f for name, f in namespace.items() if (m := re.match(r"step(\d+)_", name))}
    assert sorted(found) == list(range(1, len(found) + 1)), f"steps numbered {sorted(found)}"
    return [found[n] for n in sorted(found)]


def run_more(steps, *, first: int, causes: dict, out: pathlib.Path, summary: str, extra=None):
    """The steps an example runs in a second environment (deploy_rknn's RKNN half), on the files
    its first process wrote in OUT: nothing removed, no PASS line. SUMMARY (the steps' statuses,
    and EXTRA) is written pass or fail, for the first process to fold into its steps.json."""
    home, status = os.getcwd(), 1
    os.chdir(out)
    _STATUS.clear()
    try:
        for number, step in enumerate(steps, start=first):
            _run_step(number, step, causes)
        status = 0
    except AssertionError as exc:
        print(f"\nFAIL: {_failed(exc)}")
    except Exception as exc:  # noqa: BLE001 - an unexpected error: its message, the traceback with -v
        print(f"\nFAIL: {_unexpected(exc)}")
        if VERBOSE:
            traceback.print_exc(file=sys.stdout)
    finally:
        os.chdir(home)
        problem = write_summary(out / summary, extra)
    if problem:
        print(f"\nFAIL: cannot write models under {out}: {problem}")
        return 1
    return status


def _run_step(number: int, step, causes: dict) -> str:
    """Run one step: '' when it ran (or needs a newer torch), the reason when it was skipped."""
    title = (step.__doc__ or step.__name__).strip().splitlines()[0]
    _STATUS[number] = {"status": "runs", "why": "", "title": title}
    _CURRENT[0] = number
    print(f"\n== {number}. {title} ==")
    needed = getattr(step, "needs_torch", None)
    if needed and TORCH < tuple(int(p) for p in needed[0].split(".")):
        print(f"SKIP step {number}: needs torch >= {needed[0]} ({needed[1]})")
        _STATUS[number].update(status=f"needs torch >= {needed[0]}", why=needed[1])
        if os.environ.get("HARNESS_RUN_GATED"):  # run_stacks.py --probe: is the gate needed?
            _probe(number, step, needed)
        return ""
    printed = _PRINTED[0] = []
    saved = sys.stdout
    sys.stdout = _Tee(saved, printed)
    try:
        step()
    except NeedsTorch as reason:
        print(f"SKIP step {number}: {reason}")
        _STATUS[number].update(status=f"needs torch >= {reason.version}", why=reason.why)
    except Skip as reason:
        print(f"SKIP step {number}: {reason}")
        _STATUS[number].update(status="skipped", why=str(reason))
        return str(reason)
    except BaseException:
        _STATUS[number].update(status="fails")
        raise
    finally:
        sys.stdout = saved
    _record_reproduced(number, "".join(printed), causes)
    return ""


def _probe(number: int, step, needed: tuple[str, str]) -> None:
    """Run a step its needs_torch gate skips (HARNESS_RUN_GATED=1, `run_stacks.py --probe`): a
    gate is right only where the step fails without it. steps.json keeps what the run gave."""
    printed = _PRINTED[0] = []
    saved, status = sys.stdout, dict(_STATUS[number])
    sys.stdout = _Tee(saved, printed)
    try:
        step()
        result = "ran"
    except NeedsTorch as reason:
        result = f"needs torch >= {reason.version} ({reason.why})"
    except AssertionError as exc:
        result = "fails: " + _failed(exc).splitlines()[0][:300]
    except BaseException as exc:  # noqa: BLE001 - what the gate keeps a reader from
        result = "fails: " + _unexpected(exc).splitlines()[0][:300]
    finally:
        sys.stdout = saved
    print(f"PROBE step {number}, gated on torch >= {needed[0]}, run anyway: {result}")
    _STATUS[number] = {**status, "probe": result}  # the gate's status, not the run's differs()


def _record_reproduced(number: int, printed: str, causes: dict) -> None:
    """Note each error the step reproduced (expect_error's `reproduced:` lines) with the cause
    CAUSES gives, in steps.json; `python run_stacks.py` writes ERRORS.md from them."""
    entries = []
    for line in printed.splitlines():
        if line.startswith("  reproduced: "):
            entries.append({"error": line.split("reproduced: ", 1)[1], "further_down": ""})
        elif line.startswith("  reproduced, further down: ") and entries:
            entries[-1]["further_down"] = line.split("further down: ", 1)[1]
    for entry in entries:
        text = entry["error"] + "\n" + entry["further_down"]
        keys = [key for key in causes if key in text]
        assert len(keys) == 1, (
            f"step {number}: CAUSES must explain {entry['error'][:200]!r} once, not {len(keys)}x"
        )
        raised_by, cause, *fixed_in = causes[keys[0]]
        entry.update(raised_by=raised_by, cause=cause, fixed_in=fixed_in[0] if fixed_in else number)
    if entries:
        _STATUS[number]["reproduced"] = entries


def write_summary(path: pathlib.Path, extra: dict | None = None) -> str | None:
    """steps.json: which torch ran, what each step did. Returns why it could not be written."""
    summary = {
        "torch": torch.__version__.split("+")[0],
        "steps": {str(n): s for n, s in _STATUS.items()},
    }
    summary.update(extra or {})
    try:
        path.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    except OSError as exc:
        return f"{path.name}: {exc}"
    return None


def merge_summary(path: pathlib.Path) -> None:
    """Fold the steps another process ran (its summary file) into this run's steps.json."""
    steps = json.loads(path.read_text(encoding="utf-8"))["steps"]
    _STATUS.update({int(number): status for number, status in steps.items()})


def _quiet_the_libraries() -> None:
    """What every example holds back, each said once in the pages: the DeprecationWarning of
    every dynamo=False export, ONNX Runtime's log of a session that failed (expect_error prints
    the error itself), torch 2.8's 'Missing annotation for parameter' log, and release noise
    (README.md, "Your torch version")."""
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.onnx")
    warnings.filterwarnings("ignore", message=".*legacy TorchScript-based ONNX export.*")
    warnings.filterwarnings("ignore", message=".*The feature will be removed.*")
    # Release noise: torch 2.2 and 2.3 warn that their TorchScript exporter supports opset 17 at
    # most where a dynamo=False step asks for 18 or 19 (the models pass the checker and run).
    warnings.filterwarnings("ignore", message=r"Exporting to ONNX opset version \d+ is not supported")
    # Release noise: torch 2.11's pytree warns from copyreg each time an exported program is copied.
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
    # Release noise: torch 2.5 warns, at each dynamo=True export of an op registered with
    # torch::RegisterOperators (CompositeImplicitAutograd), that it is traced through, which the
    # step that exports one (register_pytorch_op/ 4) shows.
    warnings.filterwarnings("ignore", message="At pre-dispatch tracing, we assume that any custom op")
    # Release noise: torch 1.13 warns 'The shape inference of X type is missing' through Python's
    # warnings (later releases in C++, checked by quiet() where a step shows it) for prim::Constant
    # and for each custom-domain node, whose setType it ignores (the steps say so).
    if TORCH < (2, 0):
        warnings.filterwarnings("ignore", message=r"The shape inference of \S+ type is missing")
    # Release noise: torch 1.13 warns at each g.op() of a symbolic that g.op "is to be removed" (it
    # was not: it is how every later release writes a symbolic).
    warnings.filterwarnings("ignore", message=r"'torch\.onnx\._patch_torch\._graph_op' is deprecated")
    logging.getLogger("torch.onnx._internal.exporter._schemas").setLevel(logging.ERROR)
    with contextlib.suppress(ImportError):
        import onnxruntime

        onnxruntime.set_default_logger_severity(4)


def _parse_command_line(test_py, here, argv, arguments) -> argparse.Namespace:
    doc = ast.get_docstring(ast.parse(pathlib.Path(test_py).read_text(encoding="utf-8"))) or ""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    parser.add_argument(
        "--out",
        type=_non_empty_path,
        default=here / "output",
        metavar="DIR",
        help="write the models under DIR, failure demonstrations under DIR/failures "
        "(default: output/ beside test.py)",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="print every exported graph in full"
    )
    if arguments is not None:
        arguments(parser)
    return parser.parse_args(argv)


def _non_empty_path(text: str) -> pathlib.Path:
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "must not be empty (it would write into the current directory)"
        )
    return pathlib.Path(text)


def _prepare_out(out: pathlib.Path, owned: tuple[str, ...]) -> str:
    """Make DIR and DIR/failures, remove this example's files of an earlier run: '' or why not."""
    if out.exists() and not out.is_dir():
        return "it exists and is not a directory"
    try:
        (out / "failures").mkdir(parents=True, exist_ok=True)
        for name in owned:
            (out / name).unlink(missing_ok=True)
        for folder in (out, out / "failures"):
            with tempfile.TemporaryFile(dir=folder):
                pass  # can we write there?
    except OSError as exc:
        return f"{type(exc).__name__}: {exc.strerror or exc}"
    return ""


def _foreign_models(out: pathlib.Path, owned: tuple[str, ...]) -> list[str]:
    """The .onnx files in DIR and DIR/failures that this example did not write (never deleted)."""
    found = [*out.glob("*.onnx"), *(out / "failures").glob("*.onnx")]
    return sorted(
        p.relative_to(out).as_posix() for p in found if p.relative_to(out).as_posix() not in owned
    )


TAIL = 25  # lines of a long unexpected message shown after its first


def _names_the_cause(line: str) -> bool:
    """False for a blank line and for one that only says where the error was raised: OpenVINO's
    `Exception from src/inference/src/cpp/core.cpp:132:`, or a `Check 'cond' failed at file.cpp:12:`
    with nothing after the place. Any other word on the line (a message after the place) makes it True."""
    where = r"(Exception from|Check '.*' failed at) \S+:\d+:?"
    return bool(line.strip()) and not re.fullmatch(where, line.strip())


def _failed(exc: AssertionError) -> str:
    """A failed check's message, or, for an assert without one, where it failed and its line."""
    if str(exc):
        return str(exc)
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    return f"{pathlib.Path(frame.filename).name}:{frame.lineno}: {frame.line}"


def _unexpected(exc: BaseException) -> str:
    """An unexpected error, without its traceback or colour codes: the first line of its message that names the
    cause (OpenVINO's messages start with a line that only says where the error was raised), then
    the message's other lines, that first one too, so nothing is lost; of a message of many lines
    (a failed C++ build's: the command, then the compiler's output), the last TAIL, where the
    compiler says what went wrong (a missing header, a full disk)."""
    lines = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip().splitlines() or [""]  # no colour codes
    cause = next((i for i, line in enumerate(lines) if _names_the_cause(line)), 0)
    rest = lines[:cause] + lines[cause + 1 :]
    shown = ["  " + line for line in rest[-TAIL:]]
    if len(rest) > TAIL:
        shown.insert(0, f"  ... ({len(rest) - TAIL} lines left out; -v prints the traceback)")
    return "\n".join([f"unexpected {type(exc).__name__}: {lines[cause].strip()}", *shown])


# ---------------------------------------------------------------------------------------------
# Models: the checker and a one-line summary
# ---------------------------------------------------------------------------------------------


def show(path) -> onnx.ModelProto:
    """onnx.checker with full_check, then a summary: the ops in order, the opset imports, the
    outputs (on two lines, each cut at WIDTH characters, when one is too long); -v: the graph."""
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    ops = [f"{n.domain}.{n.op_type}" if n.domain else n.op_type for n in model.graph.node]
    opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import)
    outputs = ", ".join(f"{o.name}: {type_text(o.type)}" for o in model.graph.output)
    line = f"  {pathlib.PurePath(path).as_posix()}: {' '.join(ops)}"
    if len(f"{line} | opsets {opsets} | {outputs}") <= WIDTH:
        print(f"{line} | opsets {opsets} | {outputs}")
    else:  # two lines, each cut at WIDTH
        print(cut(line))
        print(cut(f"    opsets {opsets} | {outputs}"))
    if VERBOSE:
        print(textwrap.indent(onnx.printer.to_text(model.graph), "    "))
    return model


def cut(line: str, width: int = WIDTH) -> str:
    """LINE, or its first WIDTH - 4 characters and ' ...' (the README's elision)."""
    return line if len(line) <= width else line[: width - 4].rstrip() + " ..."


def type_text(value_type) -> str:
    """float32[1,3,10,10]; a symbolic dimension by its name."""
    tensor = value_type.tensor_type
    dims = [
        str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?")
        for d in tensor.shape.dim
    ]
    return f"{onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)}[{','.join(dims)}]"


def op_types(path) -> list[str]:
    """The nodes of a model file, `domain.Op` for a custom domain."""
    return [
        f"{n.domain}.{n.op_type}" if n.domain else n.op_type
        for n in onnx.load(str(path)).graph.node
    ]


def attributes(node) -> dict[str, tuple[str, object]]:
    """{name: (ONNX attribute type, value)} of a node: strings decoded, floats at float32 precision
    (as the file stores them), so that they compare with the values the model was built with."""
    table = {}
    for a in node.attribute:
        value = onnx.helper.get_attribute_value(a)
        if isinstance(value, bytes):
            value = value.decode()
        elif isinstance(value, float):
            value = float(np.float32(value))
        elif isinstance(value, list):
            value = [float(np.float32(v)) if isinstance(v, float) else v for v in value]
        table[a.name] = (onnx.AttributeProto.AttributeType.Name(a.type), value)
    return table


def opsets_of(model) -> dict[str, int]:
    return {o.domain: o.version for o in model.opset_import}


def output_dims(model) -> list[int | str]:
    dims = model.graph.output[0].type.tensor_type.shape.dim
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in dims]


# ---------------------------------------------------------------------------------------------
# Output: what C++ code and loggers print, held back and checked
# ---------------------------------------------------------------------------------------------


def flush_stdio() -> None:
    """Flush Python's buffers and C's: C++ code (the TorchScript exporter, RKNN) prints through
    C's stdout, block-buffered when stdout is a file or a pipe, so text left in it would cross a
    redirect of the descriptors (unless PYTHONUNBUFFERED is set). fflush(NULL) flushes them all."""
    sys.stdout.flush()
    sys.stderr.flush()
    ctypes.CDLL(None).fflush(None)


@contextlib.contextmanager
def captured(sink: list[str]):
    """Capture file descriptors 1 and 2 and Python warnings into sink[0]: C++ code (the exporter,
    ORT, the compiler) writes to the descriptors directly. Check what the lesson depends on."""
    flush_stdio()
    saved = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile() as tmp, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        os.dup2(tmp.fileno(), 1)
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            flush_stdio()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            tmp.seek(0)
            text = tmp.read().decode(errors="replace")
            sink.append(text + "".join(f"{w.category.__name__}: {w.message}\n" for w in caught))


@contextlib.contextmanager
def quiet(*expected: str):
    """captured(), but what Python code prints still reaches the reader: only what C++ code, loggers
    and warnings write is held back (the TorchScript exporter's 'Torch IR graph at exception:' dump,
    its shape-inference warnings, a compiler's log). Yields the held-back text (sink[0]), then
    checks that it holds each EXPECTED text; shown with -v."""
    sys.stdout.flush()
    python_stdout, sink = sys.stdout, []
    encoding = getattr(python_stdout, "encoding", None) or "utf-8"
    with open(os.dup(1), "w", encoding=encoding, errors="replace", buffering=1) as passthrough:
        with captured(sink):
            # print() still reaches the reader (and the step's record); C++ writes to fd 1 do not
            sys.stdout = (
                python_stdout.to(passthrough) if isinstance(python_stdout, _Tee) else passthrough
            )
            try:
                yield sink
            finally:
                sys.stdout = python_stdout
    missing = [text for text in expected if text not in sink[0]]
    assert not missing, (
        f"expected the libraries to print {missing}; they printed:\n{sink[0][-3000:]}"
    )
    if VERBOSE and sink[0].strip():
        print(textwrap.indent(sink[0].rstrip(), "    | "))


class _Tee:
    """A stdout that also keeps what is written to it (a step's record)."""

    def __init__(self, stream, kept: list[str]):
        self.stream, self.kept = stream, kept

    def to(self, stream) -> _Tee:
        return _Tee(stream, self.kept)

    def write(self, text: str) -> int:
        self.kept.append(text)
        return self.stream.write(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)


# ---------------------------------------------------------------------------------------------
# What a step may need that a machine lacks: a C++ toolchain, onnxruntime-extensions
# ---------------------------------------------------------------------------------------------


def build_problem(python_headers: bool = True) -> str:
    """Why C++ cannot be built here with ninja ('' when it can): a Skip reason. A library that does
    not link Python (deploy_openvino's) passes python_headers=False."""
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler.split()[0]) is None:
        return f"no C++ compiler: {compiler!r} is not on PATH (install g++, or set CXX)"
    if python_headers and not pathlib.Path(sysconfig.get_paths()["include"], "Python.h").is_file():
        return "no Python headers (Python.h): install your Python's development package"
    # cpp_extension runs `ninja` from PATH. A venv used without activation has it only beside its
    # python, where activation would have put it on PATH: look there too.
    scripts = sysconfig.get_path("scripts")
    if shutil.which("ninja") is None and shutil.which("ninja", path=scripts):
        os.environ["PATH"] = scripts + os.pathsep + os.environ.get("PATH", "")
    if shutil.which("ninja") is None:
        python = sys.executable
        return f"ninja is not installed for {python}: run `{python} -m pip install ninja`"
    return ""


def ortx_problem() -> str:
    """Why onnxruntime-extensions is unusable (not installed, failing to import): a Skip reason."""
    try:
        import onnxruntime_extensions  # noqa: F401 - imported again only to read its error
    except ImportError as error:
        why = f"{type(error).__name__}: {error}"
        return (
            f"onnxruntime-extensions cannot be imported ({why}): pip install onnxruntime-extensions"
        )
    return ""
