"""Run every example in this repository and summarise the results.

An example is any top-level folder holding a ``test.py``. Each runs in its own subprocess, in its folder, since
symbolic registrations (``register_custom_op_symbolic``, ``onnx.defs.register_schema``, loaded C++ ops) are
global to a process: two examples sharing one interpreter could pass or fail because of each other.

    python run_all.py                      # every example, as many at once as this process may use CPUs
    python run_all.py --list               # what would run
    python run_all.py autograd_function    # only the ones named (./NAME and NAME/ work too)
    python run_all.py -j 1                 # one example at a time
    python run_all.py --out /tmp/models    # example NAME writes under /tmp/models/NAME
    python run_all.py --timeout 600        # stop an example after 600 s (default: 1200) and go on
    python run_all.py -v                   # each example's whole output, as it runs (test.py -v; -j 1 unless given)

An example's start is a line `RUN   NAME`, its end `PASS  NAME  (12.3 s)` (or FAIL, SKIP, INT), after its output
if it failed or was interrupted (every one's, with -v and -j above 1): one block, which no other example's lines
break. The summary keeps the order given; a failure's reason is the example's last `FAIL: ` line, else the
exception line of its traceback. Each example runs in its own process group, with its own timeout, which stops
the group (SIGTERM, then SIGKILL 3 s later; ninja passes the SIGTERM on to its compilers' groups), counts it as
FAIL with the last lines it printed, and the run goes on. Ctrl-C (or SIGTERM, SIGHUP) stops every running example
so (a second Ctrl-C skips the 3 s), prints the summary so far with those marked INT and the ones not run, and exits.

Exit status: 0 when nothing failed (skips are not failures), 1 when an example failed or timed out, 2 for a bad
command line (an unknown example name, a --timeout that is not a positive number, a -j below 1, an empty --out),
130 after Ctrl-C (128 + the signal number after SIGTERM or SIGHUP).
"""

from __future__ import annotations

import argparse
import concurrent.futures
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
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
STOP: list[int] = []  # stop signals received (Ctrl-C is SIGINT), for the waiting loops: nothing is cut off halfway
PRINTING = threading.Lock()  # held while one example's lines are printed


def discover(root: pathlib.Path = ROOT) -> list[str]:
    """The examples: top-level folders that hold a test.py, sorted by name."""
    return sorted(p.name for p in root.iterdir() if not p.name.startswith(".") and (p / "test.py").is_file())


def normalise(name: str, examples: list[str], root: pathlib.Path = ROOT) -> str:
    """An example named as on a shell prompt: `x`, `./x`, `x/`, or a path to its folder."""
    plain, folder = pathlib.PurePath(name).as_posix(), pathlib.Path(name).resolve()
    found = plain not in examples and folder.parent == root and folder.name in examples
    return folder.name if found else plain


def cpu_count() -> int:
    """The CPUs this process may use: its affinity (os.process_cpu_count() from Python 3.13), else all."""
    if hasattr(os, "process_cpu_count"):
        return os.process_cpu_count() or 1
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def last_lines(text: str, count: int = REASON_LINES) -> str:
    return " | ".join([line.rstrip() for line in text.splitlines() if line.strip()][-count:])


def verdict(text: str, word: str) -> str:
    """Its last `SKIP: why` (`FAIL: why`) line without the word, else its traceback's exception line or last lines."""
    said = [line.strip() for line in text.splitlines() if line.startswith(f"{word}: ")]
    if said:
        return said[-1].removeprefix(f"{word}: ")
    _, crashed, traceback = text.rpartition("Traceback (most recent call last):")
    unindented = [line for line in traceback.splitlines()[1:] if line.strip() and not line[0].isspace()]
    return unindented[0].rstrip() if crashed and unindented else last_lines(text)


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the example's process group, SIGKILL to what is left after a grace (at once on another Ctrl-C),
    then a wait until the group is empty. A zombie counts: where pid 1 reaps no orphans, each wait runs out."""
    signals_before, stages = len(STOP), ((signal.SIGTERM, GRACE_SECONDS), (signal.SIGKILL, 2))  # then: till gone
    for signum, deadline in ((signum, time.monotonic() + grace) for signum, grace in stages):
        try:
            os.killpg(proc.pid, signum)  # start_new_session: the group's id is the example's pid
            while time.monotonic() < deadline and (signum == signal.SIGKILL or len(STOP) == signals_before):
                time.sleep(0.05)
                proc.poll()  # reaps the example once it ends
                os.killpg(proc.pid, 0)  # ProcessLookupError once the group is empty
        except OSError:
            break  # nothing left to stop
    proc.wait()


def run_example(name: str, out, timeout: float, verbose=False, live=False) -> dict:
    """Run one example: PASS, FAIL, SKIP, or INT (the runner was asked to stop); LIVE prints its lines as they come."""
    command = [sys.executable, "test.py", *(["-v"] if verbose else [])]
    if out is not None:
        command += ["--out", str(pathlib.Path(out, name).resolve())]
    env = dict(os.environ, PYTHONUNBUFFERED="1")  # so the lines printed before a hang reach the summary
    lines: list[str] = []

    def read(stream) -> None:  # output as it comes, so a hang or Ctrl-C loses nothing printed before
        with stream:
            for raw in iter(stream.readline, b""):
                lines.append(raw.decode(errors="replace"))
                if live:
                    print(lines[-1], end="", flush=True)

    start = time.monotonic()
    proc = subprocess.Popen(  # in a session of its own: a group to stop at once, and no Ctrl-C from the terminal
        command, cwd=ROOT / name, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True)
    reader = threading.Thread(target=read, args=(proc.stdout,), daemon=True)
    reader.start()
    while proc.poll() is None and not STOP and time.monotonic() < start + timeout:
        time.sleep(0.05)
    stopped, timed_out = proc.returncode is None and bool(STOP), proc.returncode is None and not STOP
    stop_group(proc)  # also when it exited by itself: whatever it left running in its group
    reader.join(timeout=5)
    if reader.is_alive():  # a process that left the group (a daemon in a new session) holds the pipe open
        lines.append(f"[run_all: a process {name} started still holds its output open; not waiting for it]\n")
    output = "".join(lines)
    if stopped:
        by = "" if STOP[0] == signal.SIGINT else f" by {signal.Signals(STOP[0]).name}"
        status, reason = "INT", f"interrupted{by}: {last_lines(output)}"
    elif timed_out:
        status, reason = "FAIL", f"timed out after {timeout:g} s: {last_lines(output)}"
    elif proc.returncode in (0, SKIP_EXIT_CODE):
        status, reason = ("SKIP", verdict(output, "SKIP")) if proc.returncode else ("PASS", "")
    else:
        status, reason = "FAIL", f"exit {proc.returncode}: {verdict(output, 'FAIL')}"
    return {"name": name, "status": status, "seconds": time.monotonic() - start, "reason": reason, "output": output}


def run_examples(names: list[str], args, jobs: int) -> dict[str, dict]:
    """Run NAMES, up to JOBS at once (no two C++ builds share a build folder: each example has its own)."""
    live = args.verbose and jobs == 1

    def say(*texts: str) -> None:  # together: no other example's lines come between them
        with PRINTING:
            print("\n".join(text for text in texts if text), flush=True)

    def run_one(name: str) -> dict | None:
        if STOP:
            return None
        say(f"RUN   {name}")
        result = run_example(name, args.out, args.timeout, args.verbose, live)
        shown = not live and (args.verbose or result["status"] in ("FAIL", "INT"))
        block = f"---- {name} printed:\n{result['output'].rstrip()}" if shown else ""
        say(block, f"{result['status']}  {name}  ({result['seconds']:.1f} s)")
        return result

    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:  # the main thread waits; signal handlers run
        return {result["name"]: result for result in pool.map(run_one, names) if result}


def print_summary(results: list[dict], not_run: list[str]) -> None:
    width = max([len("example"), *(len(r["name"]) for r in results)])
    print(f"\n{'example':<{width}}  result  seconds  reason\n{'-' * width}  ------  -------  ------")
    for r in results:
        print(f"{r['name']:<{width}}  {r['status']:<6}  {r['seconds']:7.1f}  {r['reason']}")
    counts = {status: sum(r["status"] == status for r in results) for status in ("PASS", "FAIL", "SKIP", "INT")}
    closing = f"\n{counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped"
    closing += f", {counts['INT']} interrupted" if counts["INT"] else ""
    closing += f"; not run: {', '.join(not_run)}" if not_run else ""  # after Ctrl-C
    print(closing, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", metavar="NAME", help="examples to run (default: all)")
    parser.add_argument("--list", action="store_true", help="print the examples (the ones named, or all) and exit")
    parser.add_argument("--out", metavar="DIR", help="write example NAME's models under DIR/NAME")
    parser.add_argument("--timeout", type=float, default=1200, metavar="SECONDS",
                        help="stop an example (and every process it started) after SECONDS, count it as failed "
                        "and go on (a positive number; default: 1200)")
    parser.add_argument("-j", "--jobs", type=int, metavar="N", help="run up to N examples at once "
                        f"(default: {cpu_count()}, the CPUs this process may use; 1 with -v)")
    parser.add_argument("--verbose", "-v", action="store_true",
                        help="run each example with -v (full graphs) and print its whole output (as it runs, -j 1)")
    args = parser.parse_args(argv)
    if args.out is not None and not args.out.strip():
        parser.error("argument --out: must not be empty (it would write into the example folders)")
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        parser.error(f"argument --timeout: must be a positive number of seconds, not {args.timeout}")
    if args.jobs is not None and args.jobs < 1:
        parser.error(f"argument -j/--jobs: must be at least 1, not {args.jobs}")

    examples = discover()
    names = list(dict.fromkeys(normalise(name, examples) for name in args.names))  # in order, once each
    unknown = [name for name in names if name not in examples]
    if unknown:
        print(f"unknown example(s): {', '.join(unknown)}; valid: {', '.join(examples)}", file=sys.stderr)
        return 2
    selected = names or examples
    if args.list:
        print("\n".join(selected))
        return 0

    STOP.clear()
    previous = {signum: signal.signal(signum, lambda signum, frame: STOP.append(signum)) for signum in STOP_SIGNALS}
    try:
        results = run_examples(selected, args, args.jobs or (1 if args.verbose else cpu_count()))
        ran = [results[name] for name in selected if name in results]  # in the order given, not finishing order
        print_summary(ran, [name for name in selected if name not in results])
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if STOP:
        return 128 + STOP[0]
    return 1 if any(r["status"] == "FAIL" for r in ran) else 0


if __name__ == "__main__":
    sys.exit(main())
