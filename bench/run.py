"""Run every ``bench/*_bench.py`` script, in name order, each in its own process.

Usage: ``.venv/bin/python bench/run.py [--quick] [NAME ...]``. With names (e.g. ``ingest``),
only those benches run. ``--quick`` is passed to the scripts that accept it (their source
mentions ``--quick``); the others run as they are. Each script prints its own figures and
writes ``bench/results/<name>.json``; this runner prints a one-line status per script and
exits 1 when any script failed (a missed target is not a failure: the figures say so).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small inputs where a bench supports it")
    parser.add_argument("names", nargs="*", help="only these benches (e.g. ingest correlate)")
    args = parser.parse_args()
    scripts = sorted(BENCH.glob("*_bench.py"))
    if args.names:
        scripts = [s for s in scripts if s.name.removesuffix("_bench.py") in args.names]
    statuses = []
    for script in scripts:
        command = [sys.executable, str(script)]
        if args.quick and "--quick" in script.read_text(encoding="utf-8"):
            command.append("--quick")
        print(f"=== {script.name} {' '.join(command[2:])}", flush=True)
        started = time.perf_counter()
        code = subprocess.call(command, cwd=BENCH.parent)
        statuses.append((script.name, code, time.perf_counter() - started))
    print()
    for name, code, seconds in statuses:
        print(f"{name:<28} {'ok' if code == 0 else f'FAILED (exit {code})':<18} {seconds:8.1f} s")
    return 0 if all(code == 0 for _, code, _ in statuses) else 1


if __name__ == "__main__":
    sys.exit(main())
