"""Run every example in this repository and summarise the results.

An example is any top-level folder holding a ``test.py``. Each one runs in its own
subprocess, with its folder as the working directory, because symbolic registrations
(``register_custom_op_symbolic``, ``onnx.defs.register_schema``, loaded C++ ops) are
global to a process: two examples sharing one interpreter could pass or fail because
of each other.

    python run_all.py                      # every example
    python run_all.py --list               # what would run
    python run_all.py autograd_function    # only the ones named (./NAME and NAME/ work too)
    python run_all.py --out /tmp/models    # example NAME writes under /tmp/models/NAME
    python run_all.py --timeout 600        # stop an example after 600 s (default: 1200) and go on
    python run_all.py -v                   # each example's whole output, as it runs (test.py -v)

Each example runs in its own process group. A timeout stops the example and every process it
started (SIGTERM, then SIGKILL 3 s later), reports it as FAIL with the last lines it printed, and
the run goes on with the next example. Ctrl-C (or SIGTERM, SIGHUP) stops the running example the
same way (a second Ctrl-C skips the 3 s), prints the summary so far with that example marked INT
and the ones not run, and exits.

Exit status: 0 when nothing failed (skips are not failures), 1 when an example failed or timed
out, 2 for a bad command line (an unknown example name, a --timeout that is not a positive
number, an empty --out), 130 after Ctrl-C (128 + the signal number after SIGTERM or SIGHUP).
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parent
SKIP_EXIT_CODE = 77  # the exit status an example uses for "cannot run here", as in automake
REASON_LINES = 3  # how many of an example's last output lines explain a SKIP or FAIL
GRACE_SECONDS = 3.0  # after SIGTERM, how long an example's processes get before SIGKILL
STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


class StopRequest:
    """The signals that ask the runner to stop (Ctrl-C is SIGINT), as a flag the waiting loops read:
    a handler that only records the signal cannot interrupt the runner halfway through starting or
    stopping an example, so no example is ever left running unwatched."""

    def __init__(self) -> None:
        self.signals: list[int] = []

    def __call__(self, signum, frame) -> None:
        self.signals.append(signum)

    def __bool__(self) -> bool:
        return bool(self.signals)


STOP = StopRequest()


def discover(root: pathlib.Path = ROOT) -> list[str]:
    """The examples: top-level folders that hold a test.py, sorted by name."""
    return sorted(
        path.name
        for path in root.iterdir()
        if path.is_dir() and not path.name.startswith(".") and (path / "test.py").is_file()
    )


def normalise(name: str, examples: list[str], root: pathlib.Path = ROOT) -> str:
    """An example named as on a shell prompt: `x`, `./x`, `x/`, or a path to its folder."""
    plain = pathlib.PurePath(name).as_posix()
    if plain in examples:
        return plain
    folder = pathlib.Path(name).resolve()
    if folder.parent == root and folder.name in examples:
        return folder.name
    return plain


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text!r}")
    return value


def non_empty_path(text: str) -> pathlib.Path:
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "must not be empty (it would write into the example folders)"
        )
    return pathlib.Path(text)


def last_lines(text: str, count: int = REASON_LINES) -> str:
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    return " | ".join(lines[-count:])


def verdict(text: str, word: str) -> str:
    """An example's own last `SKIP: why` (or `FAIL: why`) line, without the word: the whole reason on
    one line. Where it printed none (it crashed, or was stopped), its last lines."""
    said = [line.strip() for line in text.splitlines() if line.startswith(f"{word}: ")]
    return said[-1].removeprefix(f"{word}: ") if said else last_lines(text)


def process_table() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, process group, state) of every process, from /proc; {} where there is none."""
    table = {}
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            state, ppid, pgrp = (
                stat.read_text().rsplit(")", 1)[1].split()[:3]
            )  # after "pid (command)"
        except (OSError, ValueError):
            continue  # it ended while we looked
        table[int(stat.parent.name)] = (int(ppid), int(pgrp), state)
    return table


def tree_groups(pid: int, table: dict[int, tuple[int, int, str]]) -> set[int]:
    """The process groups of pid's descendants. Most share the example's group; some tools start their
    own (ninja runs each compiler in a new group), and those must be stopped too."""
    children: dict[int, list[int]] = {}
    for child, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(child)
    groups, todo = set(), list(children.get(pid, []))
    while todo:
        child = todo.pop()
        groups.add(table[child][1])
        todo += children.get(child, [])
    return groups


def live_groups(groups: set[int], table: dict[int, tuple[int, int, str]]) -> set[int]:
    """Those of groups that still have a running process. Zombies do not count: they have exited, and
    where pid 1 does not reap orphans (some containers) they stay in their group until it ends."""
    if table:
        return {pgrp for _, pgrp, state in table.values() if pgrp in groups and state not in "ZX"}
    alive = set()  # no /proc: a group with only zombies left counts as alive until the grace ends
    for pgid in groups:
        try:
            os.killpg(pgid, 0)
            alive.add(pgid)
        except ProcessLookupError:
            pass
        except PermissionError:
            alive.add(pgid)
    return alive


def signal_groups(groups: set[int], signum: int) -> None:
    for pgid in groups:
        try:
            os.killpg(pgid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def stop_group(proc: subprocess.Popen) -> None:
    """Stop the example and every process it started: SIGTERM to its process group (and to the groups its
    descendants started), SIGKILL to what is left after a grace, or at once on another Ctrl-C."""
    groups = {proc.pid} | tree_groups(
        proc.pid, process_table()
    )  # start_new_session: it leads its group
    signal_groups(groups, signal.SIGTERM)
    signals_before = len(STOP.signals)
    deadline = time.monotonic() + GRACE_SECONDS
    while True:
        proc.poll()
        table = process_table()
        new = tree_groups(proc.pid, table) - groups  # started while we waited
        signal_groups(new, signal.SIGTERM)
        groups |= new
        alive = live_groups(groups, table)
        if not alive or time.monotonic() > deadline or len(STOP.signals) > signals_before:
            break
        time.sleep(0.05)
    signal_groups(alive, signal.SIGKILL)
    proc.wait()


def run_example(
    name: str,
    root: pathlib.Path,
    out: pathlib.Path | None,
    timeout: float,
    verbose: bool = False,
) -> dict:
    """Run one example; status PASS, FAIL, SKIP, or INT when the runner was asked to stop meanwhile."""
    command = [sys.executable, "test.py"]
    if out is not None:
        command += ["--out", str((out / name).resolve())]
    if verbose:
        command.append("-v")
    env = dict(
        os.environ, PYTHONUNBUFFERED="1"
    )  # so the lines printed before a hang reach the summary
    lines: list[str] = []

    def read(
        stream,
    ) -> None:  # output as it comes, so a hang or Ctrl-C loses nothing printed before
        for raw in iter(stream.readline, b""):
            line = raw.decode(errors="replace")
            lines.append(line)
            if verbose:
                sys.stdout.write(line)
                sys.stdout.flush()

    start = time.monotonic()
    proc = subprocess.Popen(
        command,
        cwd=root / name,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: stop it and all its children at once
    )
    reader = threading.Thread(target=read, args=(proc.stdout,), daemon=True)
    reader.start()
    deadline = start + timeout
    while proc.poll() is None and not STOP and time.monotonic() < deadline:
        try:
            proc.wait(timeout=min(0.1, max(deadline - time.monotonic(), 0.001)))
        except subprocess.TimeoutExpired:
            pass
    stopped = proc.returncode is None and bool(STOP)
    timed_out = proc.returncode is None and not stopped
    # Also when it exited by itself: whatever it left running is stopped (and then holds no pipe).
    stop_group(proc)
    reader.join(timeout=5)
    if (
        reader.is_alive()
    ):  # a process that escaped the tree (a daemon in a new session) holds the pipe open
        lines.append(
            f"[run_all: a process {name} started still holds its output open; not waiting for it]\n"
        )
    else:
        proc.stdout.close()  # not while the reader blocks on it: that would wait for the reader
    seconds = time.monotonic() - start
    output = "".join(lines)
    if stopped:
        signum = STOP.signals[0]
        by = "" if signum == signal.SIGINT else f" by {signal.Signals(signum).name}"
        status, reason = "INT", f"interrupted{by}: {last_lines(output)}"
    elif timed_out:
        status, reason = "FAIL", f"timed out after {timeout:g} s: {last_lines(output)}"
    elif proc.returncode == 0:
        status, reason = "PASS", ""
    elif proc.returncode == SKIP_EXIT_CODE:
        status, reason = "SKIP", verdict(output, "SKIP")
    else:
        status, reason = "FAIL", f"exit {proc.returncode}: {verdict(output, 'FAIL')}"
    return {"name": name, "status": status, "seconds": seconds, "reason": reason, "output": output}


def print_summary(results: list[dict], not_run: list[str]) -> None:
    width = max(len("example"), *(len(r["name"]) for r in results))
    print()
    print(f"{'example':<{width}}  result  seconds  reason")
    print(f"{'-' * width}  ------  -------  ------")
    for r in results:
        print(f"{r['name']:<{width}}  {r['status']:<6}  {r['seconds']:7.1f}  {r['reason']}")
    counts = {
        status: sum(r["status"] == status for r in results)
        for status in ("PASS", "FAIL", "SKIP", "INT")
    }
    closing = f"\n{counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped"
    if counts["INT"]:
        closing += f", {counts['INT']} interrupted"
    if not_run:  # after Ctrl-C
        closing += f"; not run: {', '.join(not_run)}"
    print(closing, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help="examples to run (default: all)")
    parser.add_argument(
        "--list", action="store_true", help="print the examples (the ones named, or all) and exit"
    )
    parser.add_argument(
        "--out",
        type=non_empty_path,
        metavar="DIR",
        help="write example NAME's models under DIR/NAME",
    )
    parser.add_argument(
        "--timeout",
        type=positive_seconds,
        default=1200,
        metavar="SECONDS",
        help="stop an example (and every process it started) after SECONDS, count it as failed and go on "
        "(a positive number; default: 1200)",
    )
    parser.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="run each example with -v (full graphs) and print its whole output as it runs",
    )
    args = parser.parse_args(argv)

    examples = discover()
    names = list(
        dict.fromkeys(normalise(name, examples) for name in args.names)
    )  # in order, once each
    unknown = [name for name in names if name not in examples]
    if unknown:
        print(
            f"unknown example(s): {', '.join(unknown)}; valid: {', '.join(examples)}",
            file=sys.stderr,
        )
        return 2
    selected = names or examples
    if args.list:
        print("\n".join(selected))
        return 0

    STOP.signals.clear()
    previous = {signum: signal.signal(signum, STOP) for signum in STOP_SIGNALS}
    try:
        results: list[dict] = []
        for name in selected:
            if STOP:  # between two examples: none is running
                break
            result = run_example(name, ROOT, args.out, args.timeout, args.verbose)
            results.append(result)
            if not args.verbose and result["status"] in ("FAIL", "INT"):
                print(result["output"].rstrip())
            print(f"{result['status']}  {name}  ({result['seconds']:.1f} s)", flush=True)
        print_summary(results, selected[len(results) :])
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if STOP:
        return 128 + STOP.signals[0]
    return 1 if any(r["status"] == "FAIL" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
