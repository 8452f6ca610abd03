"""Run every example in this repository and summarise the results.

An example is any top-level folder holding a ``test.py``. Each one runs in its own
subprocess, with its folder as the working directory, because symbolic registrations
(``register_custom_op_symbolic``, ``onnx.defs.register_schema``, loaded C++ ops) are
global to a process: two examples sharing one interpreter could pass or fail because
of each other.

    python run_all.py                      # every example
    python run_all.py --list               # what would run
    python run_all.py autograd_function    # only the ones named
    python run_all.py --out /tmp/models    # example NAME writes under /tmp/models/NAME

Exit status: 0 when nothing failed (skips are not failures), 1 when an example failed,
2 for a bad command line (an unknown example name).
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent
SKIP_EXIT_CODE = 77  # the exit status an example uses for "cannot run here", as in automake
REASON_LINES = 3  # how many of an example's last output lines explain a SKIP or FAIL


def discover(root: pathlib.Path = ROOT) -> list[str]:
    """The examples: top-level folders that hold a test.py, sorted by name."""
    return sorted(
        path.name
        for path in root.iterdir()
        if path.is_dir() and not path.name.startswith(".") and (path / "test.py").is_file()
    )


def last_lines(text: str, count: int = REASON_LINES) -> str:
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    return " | ".join(lines[-count:])


def run_example(name: str, root: pathlib.Path, out: pathlib.Path | None, timeout: float) -> dict:
    folder = root / name
    command = [sys.executable, "test.py"]
    if out is not None:
        command += ["--out", str((out / name).resolve())]
    start = time.monotonic()
    try:
        proc = subprocess.run(
            command,
            cwd=folder,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        output = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        return {
            "name": name,
            "status": "FAIL",
            "seconds": time.monotonic() - start,
            "reason": f"timed out after {timeout:.0f} s",
            "output": output,
        }
    seconds = time.monotonic() - start
    if proc.returncode == 0:
        status, reason = "PASS", ""
    elif proc.returncode == SKIP_EXIT_CODE:
        status, reason = "SKIP", last_lines(proc.stdout)
    else:
        status, reason = "FAIL", f"exit {proc.returncode}: {last_lines(proc.stdout)}"
    return {"name": name, "status": status, "seconds": seconds, "reason": reason, "output": proc.stdout}


def print_summary(results: list[dict]) -> None:
    width = max(len("example"), *(len(r["name"]) for r in results))
    print()
    print(f"{'example':<{width}}  result  seconds  reason")
    print(f"{'-' * width}  ------  -------  ------")
    for r in results:
        print(f"{r['name']:<{width}}  {r['status']:<6}  {r['seconds']:7.1f}  {r['reason']}")
    counts = {status: sum(r["status"] == status for r in results) for status in ("PASS", "FAIL", "SKIP")}
    print(f"\n{counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="examples to run (default: all)")
    parser.add_argument("--list", action="store_true", help="print the examples and exit")
    parser.add_argument("--out", type=pathlib.Path, help="write example NAME's models under OUT/NAME")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds allowed per example (default: 1200)")
    parser.add_argument("--verbose", "-v", action="store_true", help="print each example's whole output")
    args = parser.parse_args(argv)

    examples = discover()
    if args.list:
        print("\n".join(examples))
        return 0
    unknown = [name.rstrip("/") for name in args.names if name.rstrip("/") not in examples]
    if unknown:
        print(f"unknown example(s): {', '.join(unknown)}; valid: {', '.join(examples)}", file=sys.stderr)
        return 2
    selected = [name.rstrip("/") for name in args.names] or examples

    results = []
    for name in selected:
        result = run_example(name, ROOT, args.out, args.timeout)
        results.append(result)
        if args.verbose or result["status"] == "FAIL":
            print(result["output"].rstrip())
        print(f"{result['status']}  {name}  ({result['seconds']:.1f} s)", flush=True)
    print_summary(results)
    return 1 if any(r["status"] == "FAIL" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
