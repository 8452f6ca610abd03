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

# An example that starts a grandchild (which ignores SIGTERM, so only SIGKILL stops it; in its own process
# group if OWN_GROUP, as ninja starts each compiler), prints a line without flushing (only PYTHONUNBUFFERED gets
# it to the runner before the kill), writes INFO (its pid and group, the grandchild's) and hangs.
HANGING_EXAMPLE = """\
import json, os, pathlib, subprocess, sys, time
INFO = pathlib.Path({info!r})
ready = INFO.with_suffix(".grandchild")
grandchild = subprocess.Popen([sys.executable, "-c", "import pathlib, signal, sys, time; "
    "signal.signal(signal.SIGTERM, signal.SIG_IGN); pathlib.Path(sys.argv[1]).touch(); time.sleep(600)", str(ready)],
    process_group=0 if {own_group!r} else None)
while not ready.exists():
    time.sleep(0.05)
print("step 1 done, now hanging")
info = {{"pid": os.getpid(), "pgid": os.getpgid(0), "grandchild": grandchild.pid}}
info["grandchild_pgid"] = os.getpgid(grandchild.pid)
INFO.with_suffix(".tmp").write_text(json.dumps(info))
INFO.with_suffix(".tmp").rename(INFO)
time.sleep(600)
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
    """hanging(own_group=False) adds the example `hang` to the sandbox and returns the path of its INFO file.
    Whatever the runner did, nothing of it is left running after the test."""
    info = sandbox / "hang.json"

    def add(own_group: bool = False) -> pathlib.Path:
        (sandbox / "hang").mkdir()
        (sandbox / "hang" / "test.py").write_text(
            HANGING_EXAMPLE.format(info=str(info), own_group=own_group)
        )
        return info

    yield add
    if info.exists():
        record = json.loads(info.read_text())
        for pid in (record["pid"], record["grandchild"]):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def runner(sandbox, *args):
    return subprocess.run(
        [sys.executable, "run_all.py", *args],
        cwd=sandbox,
        capture_output=True,
        text=True,
        timeout=120,
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


def test_timeout_and_help_are_documented():
    import run_all

    assert "--timeout" in run_all.__doc__ and "Ctrl-C" in run_all.__doc__
    proc = subprocess.run(
        [sys.executable, "run_all.py", "--help"], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0
    assert "--timeout SECONDS" in proc.stdout and "Ctrl-C" in proc.stdout


@pytest.mark.parametrize(
    "own_group", [False, True], ids=["grandchild in its group", "grandchild in a new group"]
)
def test_timeout_stops_the_whole_process_tree_and_keeps_its_output(sandbox, hanging, own_group):
    info_path = hanging(own_group)
    start = time.monotonic()
    proc = runner(sandbox, "--timeout", "4", "hang", "good")
    took = time.monotonic() - start
    info = json.loads(info_path.read_text())  # it was written before the hang
    assert (info["grandchild_pgid"] != info["pgid"]) == own_group
    assert proc.returncode == 1, proc.stdout + proc.stderr
    row = summary_row(proc.stdout, "hang")
    assert "FAIL" in row and "timed out after 4 s" in row
    assert "step 1 done, now hanging" in row  # printed unflushed just before the hang
    assert "PASS" in summary_row(proc.stdout, "good")  # the run went on
    assert proc.stdout.rstrip().endswith("1 passed, 1 failed, 0 skipped")
    assert not running(info["grandchild"]), (
        "the grandchild (which ignores SIGTERM) survived the timeout"
    )
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
def test_interrupt_stops_the_whole_process_tree_and_prints_the_summary(
    sandbox, hanging, signum, target, status
):
    proc = subprocess.Popen(
        [sys.executable, "run_all.py", "good", "hang", "skipped"],
        cwd=sandbox,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # so signalling the runner's group does not hit pytest
    )
    try:
        info = wait_for(hanging())
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
    assert stdout.rstrip().endswith(
        "1 passed, 0 failed, 0 skipped, 1 interrupted; not run: skipped"
    )
    assert not running(info["grandchild"]), "the grandchild (which ignores SIGTERM) survived"
    assert not running(info["pid"])
    assert live_group_members(info["pgid"]) == []
