"""The runner's contract, checked on throwaway examples in a temporary copy of the repository."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT

# An example that prints its arguments, records its folder and each of its runs under --out DIR, says a line, exits.
EXAMPLE = """\
import pathlib, sys
print("args:", sys.argv[1:])
if "--out" in sys.argv:
    out = pathlib.Path(sys.argv[sys.argv.index("--out") + 1])
    out.mkdir(parents=True, exist_ok=True)
    (out / "cwd.txt").write_text(str(pathlib.Path.cwd()))
    with open(out / "runs.txt", "a") as runs:
        runs.write("ran\\n")
print({said!r})
sys.exit({status})
"""
EXAMPLES = {"good": ("all checks passed", 0), "bad": ("mismatch in step 2", 1),
            "skipped": ("SKIP: no C++ compiler", 77)}

# An example that starts a grandchild (which writes its pid to READY), prints a line unflushed, writes INFO and hangs.
# UNDER_NINJA: ninja runs the grandchild in a group of its own, as a compiler (and passes SIGTERM on to that group);
# else it runs in the example's group and ignores SIGTERM: only SIGKILL stops it.
HANGING_EXAMPLE = """\
import json, os, pathlib, shlex, subprocess, sys, time
INFO = pathlib.Path({info!r})
ready = INFO.with_suffix(".grandchild")
sleeper = [sys.executable, "-c", "import os, signal, sys, time; "
    "sys.argv[2:] and signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid())); os.rename(sys.argv[1] + '.tmp', sys.argv[1]); "
    "time.sleep(600)", str(ready)]
if {under_ninja!r}:
    import ninja
    pathlib.Path("build.ninja").write_text(f"rule hang\\n  command = {{shlex.join(sleeper)}}\\nbuild never: hang\\n")
    helper = subprocess.Popen([os.path.join(ninja.BIN_DIR, "ninja")], stdout=subprocess.DEVNULL)
else:
    helper = subprocess.Popen(sleeper + ["ignore SIGTERM"])
while not ready.exists():
    time.sleep(0.05)
print("step 1 done, now hanging")
g = int(ready.read_text())
info = {{"pid": os.getpid(), "pgid": os.getpgid(0), "helper": helper.pid}}
info.update(grandchild=g, grandchild_pgid=os.getpgid(g))
INFO.with_suffix(".tmp").write_text(json.dumps(info))
INFO.with_suffix(".tmp").rename(INFO)
time.sleep(600)
"""

# Two examples that wait (60 s at most) until both started, print 20 lines (PAUSE s apart) and fail: they pass the wait
# only when they run at the same time.
MEETING_EXAMPLE = """\
import pathlib, sys, time
(pathlib.Path.cwd() / "started").touch()
deadline = time.monotonic() + 60
while not (pathlib.Path.cwd().parent / {other!r} / "started").exists():
    if time.monotonic() > deadline:
        print("FAIL: {other} never ran at the same time")
        sys.exit(1)
    time.sleep(0.05)
for i in range(20):
    print(f"{name} line {{i}}")
    time.sleep({pause})
print("FAIL: {name} found a mismatch")
sys.exit(1)
"""

# A step that fails as OpenVINO's compile_model did on a CPU without the op: the first line only says where.
OPENVINO_MESSAGE = """Exception from src/inference/src/cpp/core.cpp:132:
Unsupported operation of type: CstThreshold name: /op/cstThreshold
Details:
Exception from src/plugins/intel_cpu/src/nodes/reference.cpp:36:
Not Implemented:
Cannot fallback on ngraph reference implementation. Ngraph::Node::evaluate() is not implemented for op: CstThreshold
"""
OPENVINO_EXAMPLE = """\
import sys
sys.path.insert(0, {root!r})
import harness
def step1_compile():
    \"\"\"Compile for the CPU\"\"\"
    raise RuntimeError({message!r})
sys.exit(harness.run(__file__, [step1_compile], kept={{}}, causes={{}}))
"""


@pytest.fixture
def sandbox(tmp_path):
    shutil.copy(ROOT / "run_all.py", tmp_path / "run_all.py")
    for name, (said, status) in EXAMPLES.items():
        add_example(tmp_path, name, EXAMPLE.format(said=said, status=status))
    (tmp_path / "not_an_example").mkdir()  # a folder without test.py is not an example
    return tmp_path


@pytest.fixture
def hanging(sandbox):
    """hanging(under_ninja=False, name="hang") adds the example NAME, returns its INFO file and kills what is left."""
    infos = []

    def add(under_ninja: bool = False, name: str = "hang") -> pathlib.Path:
        if under_ninja:
            pytest.importorskip("ninja")
        infos.append(sandbox / f"{name}.json")
        add_example(sandbox, name, HANGING_EXAMPLE.format(info=str(infos[-1]), under_ninja=under_ninja))
        return infos[-1]

    yield add
    for info in filter(pathlib.Path.exists, infos):
        for pid in map(json.loads(info.read_text()).get, ("pid", "helper", "grandchild")):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def add_example(sandbox: pathlib.Path, name: str, source: str) -> None:
    (sandbox / name).mkdir()
    (sandbox / name / "test.py").write_text(source)


def runner(sandbox, *args, started=False):
    """The runner's run; STARTED: the runner, running in a session of its own (signalling its group spares pytest)."""
    command = [sys.executable, "run_all.py", *args]
    if started:
        return subprocess.Popen(command, cwd=sandbox, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
    return subprocess.run(command, cwd=sandbox, capture_output=True, text=True, timeout=120)


def wait_for(path: pathlib.Path, seconds: float = 60) -> dict:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} was not written within {seconds} s"
        time.sleep(0.05)
    return json.loads(path.read_text())


def running(pid) -> list[str]:
    """Live process PID's /proc/PID/stat after its name (state, parent, group, ...); [] for a gone one or a zombie (here
    pid 1 may never reap an orphan)."""
    try:
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []
    return [] if fields[0] in ("Z", "X") else fields


def assert_all_stopped(info: dict) -> None:
    """The hanging example, its helper, its grandchild and every other process of their groups are gone when the
    runner has exited (it waits for what SIGKILL hit to go)."""
    roles = {str(info[role]) for role in ("pid", "helper", "grandchild")}
    groups = [[str(info["pgid"])], [str(info["grandchild_pgid"])]]  # as running(pid)[2:3] gives a group
    left = [p for p in os.listdir("/proc") if running(p) and (p in roles or running(p)[2:3] in groups)]
    assert not left, f"{left} (of {roles} or groups {groups}) survived"


def summary_of(stdout: str) -> str:
    assert "example  result  seconds  reason" in stdout, f"no summary in:\n{stdout}"
    return stdout.split("example  result  seconds  reason", 1)[1]


def summary_row(stdout: str, name: str) -> str:
    rows = [line for line in summary_of(stdout).splitlines() if line.startswith(f"{name} ")]
    assert len(rows) == 1, f"expected one summary row for {name} in:\n{stdout}"
    return rows[0]


def test_list_prints_the_examples_or_those_named_normalised_once_each_in_order(sandbox):
    proc = runner(sandbox, "--list")
    assert proc.returncode == 0 and proc.stdout.split() == ["bad", "good", "skipped"]  # folders holding a test.py
    proc = runner(sandbox, "--list", "skipped", "./good/", "skipped", "good", str(sandbox / "skipped"))
    assert proc.returncode == 0 and proc.stdout.split() == ["skipped", "good"], proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        *[(["--timeout", value, "good"], ["--timeout"]) for value in ["0", "-5", "nan", "inf", "abc", ""]],
        *[(["-j", value, "good"], ["-j"]) for value in ["0", "-1", "1.5", "two", ""]],
        (["--out", "", "good"], ["--out"]),  # it would write into the example folders
        (["good", "./nosuch/"], ["nosuch", "bad", "good", "skipped"]),  # an unknown name, and the valid ones
        (["--list", "good", "nosuch"], ["nosuch"]),
    ],
)
def test_a_bad_command_line_exits_2_and_runs_nothing(sandbox, args, said):
    proc = runner(sandbox, *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert all(word in proc.stderr for word in said) and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout == "" and not (sandbox / "good" / "good").exists()  # nothing ran, nothing listed


def test_every_example_runs_and_a_failure_exits_1_with_the_line_that_names_its_cause(sandbox):
    """A crash's reason is the exception line of its traceback (the last of two chained ones); an OpenVINO error's, the
    line after the one that only says where it was raised: its block still shows every other line, in order."""
    crash = 'try:\n    {}[0]\nexcept KeyError as e:\n    raise ValueError("bad shape (2, 3)") from e\n'
    add_example(sandbox, "crash", crash)
    add_example(sandbox, "ov_cpu", OPENVINO_EXAMPLE.format(root=str(ROOT), message=OPENVINO_MESSAGE))
    proc = runner(sandbox, "--out", str(sandbox / "out"))
    assert proc.returncode == 1, proc.stdout
    names = [*EXAMPLES, "crash", "ov_cpu"]
    rows = {name: (summary_row(proc.stdout, name).split(None, 3) + [""])[1:4:2] for name in names}  # status, reason
    assert [rows[name][0] for name in names] == ["PASS", "FAIL", "SKIP", "FAIL", "FAIL"]
    assert rows["bad"][1].endswith(" | mismatch in step 2") and rows["skipped"][1] == "no C++ compiler"  # the reasons
    cause = "Unsupported operation of type: CstThreshold name: /op/cstThreshold"
    assert rows["crash"][1] == "exit 1: ValueError: bad shape (2, 3)" and "KeyError" in proc.stdout  # in the block
    assert rows["ov_cpu"][1] == f"exit 1: unexpected RuntimeError: {cause}"
    block = proc.stdout.split(f"\nFAIL: unexpected RuntimeError: {cause}\n", 1)[1].splitlines()
    assert block[:5] == ["  " + line for line in OPENVINO_MESSAGE.splitlines() if line != cause], proc.stdout
    assert proc.stdout.rstrip().endswith("1 passed, 3 failed, 1 skipped")
    for name in EXAMPLES:  # each example ran in its own folder and got OUT/<name>
        assert (sandbox / "out" / name / "cwd.txt").read_text() == str(sandbox / name)


def test_named_examples_only_normalised_each_once_and_announced(sandbox):
    proc = runner(sandbox, "-j", "1", "./good", "good/", "good", "skipped", "./good/", "--out", str(sandbox / "out"))
    assert proc.returncode == 0, proc.stdout + proc.stderr  # a skip is not a failure
    assert (sandbox / "out" / "good" / "runs.txt").read_text() == "ran\n"
    lines = proc.stdout.splitlines()
    assert lines[:4] == ["RUN   good", lines[1], "RUN   skipped", lines[3]], proc.stdout
    assert lines[1].startswith("PASS  good  (") and lines[3].startswith("SKIP  skipped  (")
    assert "bad" not in proc.stdout and proc.stdout.rstrip().endswith("1 passed, 0 failed, 1 skipped")
    assert "args:" not in proc.stdout  # a passing (or skipped) example's output is not shown without -v


def test_verbose_is_passed_on_and_prints_the_whole_output(sandbox):
    loud = runner(sandbox, "-v", "good")
    assert loud.returncode == 0 and "args: ['-v']" in loud.stdout
    assert loud.stdout.index("all checks passed") < loud.stdout.index("PASS  good")


def test_jobs_default_to_the_cpus_this_process_may_use():
    cpus = os.process_cpu_count() if hasattr(os, "process_cpu_count") else len(os.sched_getaffinity(0))
    proc = subprocess.run([sys.executable, "run_all.py", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0 and "-j N, --jobs N" in proc.stdout and f"(default: {cpus}," in proc.stdout


def test_examples_run_at_once_and_each_failure_is_one_block_and_the_summary_keeps_the_order_given(sandbox):
    """meet_b and meet_a pass their wait only if they run at the same time; meet_a ends first, but the summary
    lists them in the order given. Each one's output is shown once, as one block, between its start and end."""
    add_example(sandbox, "meet_a", MEETING_EXAMPLE.format(name="meet_a", other="meet_b", pause=0.01))
    add_example(sandbox, "meet_b", MEETING_EXAMPLE.format(name="meet_b", other="meet_a", pause=0.1))
    proc = runner(sandbox, "-j", "2", "meet_b", "meet_a", "good")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    rows = [line.split()[0] for line in summary_of(proc.stdout).splitlines()[2:] if line.strip()][:3]
    assert rows == ["meet_b", "meet_a", "good"], proc.stdout  # the order given
    ends = {}
    for name in ("meet_a", "meet_b"):
        assert f"exit 1: {name} found a mismatch" in summary_row(proc.stdout, name)
        assert proc.stdout.count(f"{name} line 7") == 1, "the output is shown once"
        start = lines.index(f"---- {name} printed:")
        assert lines[start + 1 : start + 21] == [f"{name} line {i}" for i in range(20)], proc.stdout
        assert lines[start + 21] == f"FAIL: {name} found a mismatch"
        assert lines[start + 22].startswith(f"FAIL  {name}  ("), proc.stdout
        ends[name] = start + 22
    assert ends["meet_a"] < ends["meet_b"]  # the end of each is printed as it comes
    assert max(lines.index("RUN   meet_b"), lines.index("RUN   meet_a")) < ends["meet_a"]  # at the same time
    assert ends["meet_a"] < lines.index("RUN   good") < ends["meet_b"]  # -j 2: once one ended


def test_an_unexpected_error_is_named_by_the_line_that_says_what_went_wrong():
    """harness's FAIL line: a first line that only says where the error was raised gives way to the next that does."""
    from harness import _unexpected as fail_line

    check, said = "Check 'false' failed at graph.cpp:1:", "Check 'rank == 4' failed at shape.cpp:40: not 4-D"
    assert fail_line(RuntimeError(f"{check}\nNO_OP")).splitlines() == ["unexpected RuntimeError: NO_OP", f"  {check}"]
    assert fail_line(ValueError(f"{said}\nmore")).splitlines() == [f"unexpected ValueError: {said}", "  more"]
    places = "Exception from a.cpp:1:"  # a message of places only keeps its first line
    assert fail_line(RuntimeError(places)) == f"unexpected RuntimeError: {places}"
    assert fail_line(KeyError("x")) == "unexpected KeyError: 'x'"
    coloured = "Failed. \x1b[96mThis is step 1/3\x1b[0m of exporting"  # torch.onnx's TorchExportError
    assert fail_line(RuntimeError(coloured)) == "unexpected RuntimeError: Failed. This is step 1/3 of exporting"


@pytest.mark.parametrize("under_ninja", [False, True], ids=["grandchild ignoring SIGTERM", "grandchild under ninja"])
def test_timeout_stops_the_whole_process_group_and_keeps_its_output(sandbox, hanging, under_ninja):
    """SIGTERM to the example's group, SIGKILL after the grace; ninja passes the SIGTERM on to its own group."""
    info_path, start = hanging(under_ninja), time.monotonic()
    proc = runner(sandbox, "--timeout", "4", "hang", "good")
    took, info = time.monotonic() - start, wait_for(info_path, 0)  # written before the hang
    assert (info["grandchild_pgid"] != info["pgid"]) == under_ninja
    assert proc.returncode == 1, proc.stdout + proc.stderr
    row = summary_row(proc.stdout, "hang")  # with the line printed, unflushed, just before the hang
    assert "FAIL" in row and "timed out after 4 s" in row and "step 1 done, now hanging" in row
    assert "PASS" in summary_row(proc.stdout, "good") and proc.stdout.rstrip().endswith("1 passed, 1 failed, 0 skipped")
    assert_all_stopped(info)
    assert took < 60, f"the runner took {took:.0f} s"


@pytest.mark.parametrize(  # kill -INT <runner>; Ctrl-C in a terminal (the runner's whole foreground group); SIGTERM
    ("signum", "target", "status"),
    [(signal.SIGINT, "pid", 130), (signal.SIGINT, "group", 130), (signal.SIGTERM, "pid", 143)],
)
def test_interrupt_stops_every_running_example_and_prints_the_summary(sandbox, hanging, signum, target, status):
    """-j 2: hang and hang2 run when the signal comes: both groups are stopped; skipped is listed as not run."""
    info_paths = [hanging(name="hang"), hanging(name="hang2")]
    proc = runner(sandbox, "-j", "2", "good", "hang", "hang2", "skipped", started=True)
    try:
        infos = [wait_for(path) for path in info_paths]
        assert all(running(info["grandchild"]) for info in infos)
        (os.killpg if target == "group" else os.kill)(proc.pid, signum)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == status and "Traceback" not in stdout + stderr, stdout + stderr
    assert "PASS" in summary_row(stdout, "good")
    for name in ("hang", "hang2"):
        row = summary_row(stdout, name)
        assert " INT " in row and "interrupted" in row and "step 1 done, now hanging" in row
        assert ("by SIGTERM" in row) == (signum == signal.SIGTERM)
    assert "RUN   skipped" not in stdout  # never started; no summary row either: the counts add up without it
    assert stdout.rstrip().endswith("1 passed, 0 failed, 0 skipped, 2 interrupted; not run: skipped")
    for info in infos:
        assert_all_stopped(info)
