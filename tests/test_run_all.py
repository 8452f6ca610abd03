"""The runner's contract, checked on throwaway examples in a temporary copy of the repository."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import EXAMPLES, ROOT

EXAMPLE_BODIES = {
    "good": "print('all checks passed')\nsys.exit(0)",
    "bad": "print('mismatch in step 2')\nsys.exit(1)",
    "skipped": "print('SKIP: no C++ compiler')\nsys.exit(77)",
}

# An example that starts a grandchild, prints a line without flushing (only PYTHONUNBUFFERED gets it to the runner
# before the kill), writes INFO (its pid and group, the grandchild's) and hangs. The grandchild writes its pid to
# READY and sleeps. UNDER_NINJA: ninja runs it, as it runs a compiler, in a process group of its own (ninja passes
# a SIGTERM on to that group); else it runs in the example's group and ignores SIGTERM: only SIGKILL stops it.
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
grandchild = int(ready.read_text())
info = {{"pid": os.getpid(), "pgid": os.getpgid(0), "helper": helper.pid, "grandchild": grandchild}}
info["grandchild_pgid"] = os.getpgid(grandchild)
INFO.with_suffix(".tmp").write_text(json.dumps(info))
INFO.with_suffix(".tmp").rename(INFO)
time.sleep(600)
"""

# Two examples that each wait (60 s at most) until the other has started too, then print 20 numbered lines (a
# pause of PAUSE s after each) and fail: they can only pass the wait when they run at the same time.
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

# A step that fails as OpenVINO's compile_model did on a CPU without the op: a message whose first line only says
# where the error was raised.
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
    for name, body in EXAMPLE_BODIES.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "test.py").write_text(
            textwrap.dedent(
                """\
                import pathlib, sys
                print("args:", sys.argv[1:])
                if "--out" in sys.argv:
                    out = pathlib.Path(sys.argv[sys.argv.index("--out") + 1])
                    out.mkdir(parents=True, exist_ok=True)
                    (out / "cwd.txt").write_text(str(pathlib.Path.cwd()))
                    with open(out / "runs.txt", "a") as runs:
                        runs.write("ran\\n")
                """
            )
            + body
            + "\n"
        )
    (tmp_path / "not_an_example").mkdir()  # a folder without test.py is not an example
    return tmp_path


@pytest.fixture
def hanging(sandbox):
    """hanging(under_ninja=False, name="hang") adds the example NAME to the sandbox and returns the path of its
    INFO file. Whatever the runner did, nothing of it is left running after the test."""
    infos = []

    def add(under_ninja: bool = False, name: str = "hang") -> pathlib.Path:
        if under_ninja:
            pytest.importorskip("ninja")
        infos.append(sandbox / f"{name}.json")
        (sandbox / name).mkdir()
        (sandbox / name / "test.py").write_text(HANGING_EXAMPLE.format(info=str(infos[-1]), under_ninja=under_ninja))
        return infos[-1]

    yield add
    for info in infos:
        if info.exists():
            record = json.loads(info.read_text())
            for pid in (record["pid"], record["helper"], record["grandchild"]):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def add_example(sandbox: pathlib.Path, name: str, source: str) -> None:
    (sandbox / name).mkdir()
    (sandbox / name / "test.py").write_text(source)


def runner(sandbox, *args):
    return subprocess.run(
        [sys.executable, "run_all.py", *args],
        cwd=sandbox,
        capture_output=True,
        text=True,
        timeout=120,
    )


def started_runner(sandbox, *args) -> subprocess.Popen:
    """The runner, started in a session of its own, so that signalling its group does not hit pytest."""
    return subprocess.Popen(
        [sys.executable, "run_all.py", *args], cwd=sandbox, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )


def wait_for(path: pathlib.Path, seconds: float = 60) -> dict:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} was not written within {seconds} s"
        time.sleep(0.05)
    return json.loads(path.read_text())


def running(pid: int) -> bool:
    """Whether pid is a live process. A zombie is not: here pid 1 may never reap an orphan."""
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in "ZX"


def live_group_members(pgid: int) -> list[int]:
    """The processes of group pgid that still run (zombies aside)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []
    members = []
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] not in "ZX":
            members.append(int(stat.parent.name))
    return members


def summary_of(stdout: str) -> str:
    assert "example  result  seconds  reason" in stdout, f"no summary in:\n{stdout}"
    return stdout.split("example  result  seconds  reason", 1)[1]


def summary_row(stdout: str, name: str) -> str:
    rows = [line for line in summary_of(stdout).splitlines() if line.startswith(f"{name} ")]
    assert len(rows) == 1, f"expected one summary row for {name} in:\n{stdout}"
    return rows[0]


def test_list_prints_discovered_examples(sandbox):
    proc = runner(sandbox, "--list")
    assert proc.returncode == 0
    assert proc.stdout.split() == ["bad", "good", "skipped"]


def test_list_in_repository_matches_discovery():
    proc = subprocess.run(
        [sys.executable, "run_all.py", "--list"], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0
    assert proc.stdout.split() == EXAMPLES


def test_list_with_names_lists_just_those_normalised_once_each_in_order(sandbox):
    proc = runner(
        sandbox, "--list", "skipped", "./good/", "skipped", "good", str(sandbox / "skipped")
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["skipped", "good"]


def test_list_with_an_unknown_name_exits_2(sandbox):
    proc = runner(sandbox, "--list", "good", "nosuch")
    assert proc.returncode == 2
    assert "nosuch" in proc.stderr
    assert proc.stdout == ""


def test_unknown_name_exits_2_and_lists_valid_ones(sandbox):
    proc = runner(sandbox, "good", "./nosuch/")
    assert proc.returncode == 2
    assert "nosuch" in proc.stderr
    for name in EXAMPLE_BODIES:
        assert name in proc.stderr
    assert "PASS" not in proc.stdout  # nothing ran


def test_failure_exits_1_and_the_others_still_run(sandbox):
    proc = runner(sandbox, "--out", str(sandbox / "out"))
    assert proc.returncode == 1, proc.stdout
    summary = summary_of(proc.stdout)
    assert "FAIL" in summary and "mismatch in step 2" in summary
    assert "PASS" in summary and "SKIP" in summary and "no C++ compiler" in summary
    assert proc.stdout.rstrip().endswith("1 passed, 1 failed, 1 skipped")
    # each example ran in its own folder and got OUT/<name>
    for name in EXAMPLE_BODIES:
        assert (sandbox / "out" / name / "cwd.txt").read_text() == str(sandbox / name)


def test_named_examples_only(sandbox):
    proc = runner(sandbox, "good", "skipped")
    assert proc.returncode == 0, proc.stdout  # a skip is not a failure
    assert "bad" not in proc.stdout
    assert proc.stdout.rstrip().endswith("1 passed, 0 failed, 1 skipped")


def test_names_are_normalised_and_each_runs_once(sandbox):
    proc = runner(sandbox, "./good", "good/", "good", "./good/", "--out", str(sandbox / "out"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (sandbox / "out" / "good" / "runs.txt").read_text() == "ran\n"
    assert proc.stdout.rstrip().endswith("1 passed, 0 failed, 0 skipped")


def test_verbose_is_passed_on_and_prints_the_whole_output(sandbox):
    quiet = runner(sandbox, "good")
    assert "args:" not in quiet.stdout  # a passing example's output is not shown without -v
    loud = runner(sandbox, "-v", "good")
    assert loud.returncode == 0
    assert "args: ['-v']" in loud.stdout
    assert loud.stdout.index("all checks passed") < loud.stdout.index("PASS  good")


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "abc", ""])
def test_timeout_must_be_a_positive_number(sandbox, value):
    proc = runner(sandbox, "--timeout", value, "good")
    assert proc.returncode == 2
    assert "--timeout" in proc.stderr and "Traceback" not in proc.stderr
    assert "passed" not in proc.stdout  # nothing ran


def test_empty_out_is_refused(sandbox):
    proc = runner(sandbox, "--out", "", "good")
    assert proc.returncode == 2
    assert "--out" in proc.stderr and "Traceback" not in proc.stderr
    assert not (sandbox / "good" / "good").exists()


@pytest.mark.parametrize("value", ["0", "-1", "1.5", "two", ""])
def test_jobs_must_be_a_whole_number_above_0(sandbox, value):
    proc = runner(sandbox, "-j", value, "good")
    assert proc.returncode == 2
    assert "-j" in proc.stderr and "Traceback" not in proc.stderr
    assert "passed" not in proc.stdout  # nothing ran


def test_timeout_jobs_and_help_are_documented():
    import run_all

    assert "--timeout" in run_all.__doc__ and "Ctrl-C" in run_all.__doc__ and "-j 1" in run_all.__doc__
    proc = subprocess.run([sys.executable, "run_all.py", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0
    assert "--timeout SECONDS" in proc.stdout and "Ctrl-C" in proc.stdout
    assert "-j N, --jobs N" in proc.stdout and f"(default: {run_all.cpu_count()}," in proc.stdout


def test_jobs_default_to_the_cpus_this_process_may_use():
    import run_all

    if hasattr(os, "process_cpu_count"):  # Python 3.13
        assert run_all.cpu_count() == os.process_cpu_count()
    else:
        assert run_all.cpu_count() == len(os.sched_getaffinity(0))


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


def test_each_example_says_when_it_starts(sandbox):
    proc = runner(sandbox, "-j", "1", "good", "skipped")
    lines = proc.stdout.splitlines()
    assert lines[:4] == ["RUN   good", lines[1], "RUN   skipped", lines[3]], proc.stdout
    assert lines[1].startswith("PASS  good  (") and lines[3].startswith("SKIP  skipped  (")


def test_a_crash_is_reported_by_the_exception_line_of_its_traceback(sandbox):
    """No FAIL line (a traceback, two chained exceptions): the reason is the last exception's line."""
    crash = """\
def load():
    try:
        {}["shape"]
    except KeyError as exc:
        raise ValueError("bad input shape (2, 3)") from exc
print("step 1 done")
load()
"""
    add_example(sandbox, "crash", crash)
    proc = runner(sandbox, "crash")
    assert proc.returncode == 1
    row = summary_row(proc.stdout, "crash")
    assert row.endswith("exit 1: ValueError: bad input shape (2, 3)"), row
    assert "KeyError" in proc.stdout  # the whole traceback is in its block


def test_an_openvino_error_is_reported_by_the_line_that_names_its_cause(sandbox):
    """OpenVINO's message starts with where the error was raised; the FAIL line (and so the summary) names the
    cause instead, and the block still shows the whole message."""
    add_example(sandbox, "ov_cpu", OPENVINO_EXAMPLE.format(root=str(ROOT), message=OPENVINO_MESSAGE))
    proc = runner(sandbox, "ov_cpu")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    cause = "unexpected RuntimeError: Unsupported operation of type: CstThreshold name: /op/cstThreshold"
    assert summary_row(proc.stdout, "ov_cpu").endswith(f"exit 1: {cause}"), proc.stdout
    assert f"FAIL: {cause}\n" in proc.stdout
    block = proc.stdout.split(f"FAIL: {cause}\n", 1)[1]
    for line in OPENVINO_MESSAGE.splitlines()[2:]:
        assert f"  {line}\n" in block, line
    assert "  Exception from src/inference/src/cpp/core.cpp:132:\n" in block  # nothing is lost


@pytest.mark.parametrize(
    "under_ninja", [False, True], ids=["grandchild in its group, ignoring SIGTERM", "grandchild under ninja"]
)
def test_timeout_stops_the_whole_process_group_and_keeps_its_output(sandbox, hanging, under_ninja):
    """The example's process group gets SIGTERM, and SIGKILL after the grace: a grandchild in it that ignores
    SIGTERM is killed all the same. A grandchild that ninja runs in a group of its own (as it runs a compiler) is
    stopped by the SIGTERM ninja passes on to that group."""
    info_path = hanging(under_ninja)
    start = time.monotonic()
    proc = runner(sandbox, "--timeout", "4", "hang", "good")
    took = time.monotonic() - start
    info = json.loads(info_path.read_text())  # it was written before the hang
    assert (info["grandchild_pgid"] != info["pgid"]) == under_ninja
    assert proc.returncode == 1, proc.stdout + proc.stderr
    row = summary_row(proc.stdout, "hang")
    assert "FAIL" in row and "timed out after 4 s" in row
    assert "step 1 done, now hanging" in row  # printed unflushed just before the hang
    assert "PASS" in summary_row(proc.stdout, "good")  # the run went on
    assert proc.stdout.rstrip().endswith("1 passed, 1 failed, 0 skipped")
    assert not running(info["grandchild"]), "the grandchild survived the timeout"
    assert not running(info["helper"]), "ninja (or the grandchild) survived the timeout"
    assert live_group_members(info["pgid"]) == []
    assert live_group_members(info["grandchild_pgid"]) == []
    assert took < 60, f"the runner took {took:.0f} s"


@pytest.mark.parametrize(
    ("signum", "target", "status"),
    [
        (signal.SIGINT, "pid", 130),  # kill -INT <runner>
        (signal.SIGINT, "group", 130),  # Ctrl-C in a terminal: the runner's whole foreground group
        (signal.SIGTERM, "pid", 143),
    ],
)
def test_interrupt_stops_the_whole_process_group_and_prints_the_summary(sandbox, hanging, signum, target, status):
    info_path = hanging()
    proc = started_runner(sandbox, "-j", "1", "good", "hang", "skipped")
    try:
        info = wait_for(info_path)
        assert running(info["grandchild"])
        if target == "group":
            os.killpg(proc.pid, signum)
        else:
            os.kill(proc.pid, signum)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == status, stdout + stderr
    assert "Traceback" not in stdout + stderr
    assert "PASS" in summary_row(stdout, "good")
    row = summary_row(stdout, "hang")
    assert " INT " in row and "interrupted" in row
    assert ("by SIGTERM" in row) == (signum == signal.SIGTERM)
    assert "step 1 done, now hanging" in row
    assert "skipped " not in summary_of(stdout)  # never started
    assert "RUN   skipped" not in stdout
    assert stdout.rstrip().endswith("1 passed, 0 failed, 0 skipped, 1 interrupted; not run: skipped")
    assert not running(info["grandchild"]), "the grandchild (which ignores SIGTERM) survived"
    assert not running(info["pid"])
    assert live_group_members(info["pgid"]) == []


def test_interrupt_stops_every_running_example(sandbox, hanging):
    """-j 2: Ctrl-C stops both running examples (each one's group: SIGTERM, then SIGKILL) and lists the one
    not run."""
    info_paths = [hanging(name="hang"), hanging(name="hang2")]
    proc = started_runner(sandbox, "-j", "2", "hang", "hang2", "good")
    try:
        infos = [wait_for(path) for path in info_paths]
        os.killpg(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, stdout + stderr
    for name in ("hang", "hang2"):
        row = summary_row(stdout, name)
        assert " INT " in row and "step 1 done, now hanging" in row
    assert stdout.rstrip().endswith("0 passed, 0 failed, 0 skipped, 2 interrupted; not run: good")
    for info in infos:
        assert not running(info["grandchild"]) and not running(info["pid"])
        assert live_group_members(info["pgid"]) == []
