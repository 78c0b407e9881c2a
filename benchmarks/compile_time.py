#!/usr/bin/env python3
"""bench_compile_time: what including convoy costs the compiler.

Compiles small files that include only a few headers, each several times, and prints the best wall
time and the best peak memory (the compiler's maximum resident set size) of each as a table, then
one JSON line per file. The reference file includes what a typical program that serialises with
cereal includes anyway (<vector>, <string>, <iostream>, <cereal/cereal.hpp>); every figure comes
with its ratio to the reference compiled in the same run, which is the figure to compare across
machines. Peak memory does not depend on the machine's load; wall time does, so run it on an idle
machine and keep the best of several repeats (the default is 3).

    benchmarks/compile_time.py                       # g++, -std=c++20 -O2 -fopenmp, 3 repeats
    benchmarks/compile_time.py --cxx clang++-14 --repeats 5 --json out.json
    benchmarks/compile_time.py --header convoy/io/weights.hpp   # one more row
    benchmarks/compile_time.py --before b7fdd7b                 # each row also against that commit

It is never a timed test: nothing here fails because a compile is slow.
"""

import argparse
import json
import os
import pathlib
import shlex
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent

# name -> the headers its file includes. The reference comes first; the ratios divide by it.
REFERENCE = ("reference", ["vector", "string", "iostream", "cereal/cereal.hpp"])
CASES = [
    ("umbrella", ["convoy/convoy.hpp"]),
    ("strategy+trainer", ["convoy/strategy.hpp", "convoy/train/trainer.hpp"]),
]


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="bench_compile_time",
        description="Compile time and peak memory of files that include convoy headers, "
        "with a reference compiled in the same run.")
    p.add_argument("--cxx", default=os.environ.get("CXX", "g++"),
                   help="the C++ compiler (default: $CXX, else g++)")
    p.add_argument("--flags", default="-std=c++20 -O2 -fopenmp",
                   help="compile flags (default: %(default)s)")
    p.add_argument("--include", action="append", default=[], metavar="DIR",
                   help="one more include directory (repeatable); convoy's include/ is always "
                   "given")
    p.add_argument("--header", action="append", default=[], metavar="HEADER",
                   help="one more row: a file including only HEADER (say convoy/io/weights.hpp)")
    p.add_argument("--repeats", type=int, default=3,
                   help="compiles of each file; the best is kept (default: %(default)s)")
    p.add_argument("--before", metavar="COMMIT",
                   help="also compile each file against the headers of COMMIT (git archive of its "
                   "include/, with the Thrust headers and define it needed if it used Thrust), "
                   "alternating with the current ones, and report the ratio after / before")
    p.add_argument("--quick", action="store_true", help="one compile of each file")
    p.add_argument("--json", metavar="FILE", help="also write the JSON lines to FILE")
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error(f"--repeats {args.repeats}: give a count of at least 1")
    if args.quick:
        args.repeats = 1
    return args


def compile_once(command):
    """Runs the compiler; returns (wall seconds, peak resident MB of the compiler's processes).
    wait4 reports the largest resident set of the driver and the cc1plus it waited for."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.stderr.write(output.decode(errors="replace"))
        sys.exit(f"bench_compile_time: '{shlex.join(command)}' failed with status "
                 f"{proc.returncode}; the output above says why")
    return wall, usage.ru_maxrss / 1024.0  # Linux reports KiB


def thrust_flags(include_dir):
    """What a tree whose host math used Thrust needed (before the OpenMP loops): the CUDA toolkit's
    CCCL and Thrust's OpenMP device system, as its CMake target added them."""
    host_math = include_dir / "convoy" / "math" / "host.hpp"
    if "thrust/" not in host_math.read_text():
        return []
    cccl = pathlib.Path("/usr/local/cuda/include/cccl")
    return ["-DTHRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_OMP"] + (
        [f"-I{cccl}"] if (cccl / "thrust").is_dir() else [])


def command_for(args, work, name, headers, include_dir):
    source = work / ("".join(c if c.isalnum() else "_" for c in name) + ".cpp")
    source.write_text("".join(f"#include <{h}>\n" for h in headers) + "int main() {}\n")
    command = [args.cxx, *shlex.split(args.flags), f"-I{include_dir}", *thrust_flags(include_dir)]
    command += [f"-I{d}" for d in args.include]
    return command + ["-c", str(source), "-o", str(work / "out.o")]


def measure(args, work, name, headers, before_dir=None):
    """Best of args.repeats compiles; with before_dir, the same file against those headers too,
    one compile of each in turn, so both see the same machine."""
    now = command_for(args, work, name, headers, ROOT / "include")
    then = command_for(args, work, name, headers, before_dir) if before_dir else None
    runs, before = [], []
    for _ in range(args.repeats):
        runs.append(compile_once(now))
        if then:
            before.append(compile_once(then))
    row = {"name": name, "headers": headers,
           "seconds": min(r[0] for r in runs), "peak_mb": min(r[1] for r in runs)}
    if then:
        row["before_seconds"] = min(r[0] for r in before)
        row["before_peak_mb"] = min(r[1] for r in before)
        row["seconds_vs_before"] = row["seconds"] / row["before_seconds"]
        row["peak_mb_vs_before"] = row["peak_mb"] / row["before_peak_mb"]
    return row


def extract_include(commit, work):
    """include/ of `commit` (git archive), under work/before; exits with a message on failure."""
    target = work / "before"
    target.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "include"],
                             capture_output=True)
    if archive.returncode != 0:
        sys.exit(f"bench_compile_time: --before {commit}: git archive failed: "
                 f"{archive.stderr.decode(errors='replace').strip()}")
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    return target / "include"


def main(argv):
    args = parse_args(argv)
    cases = CASES + [(h, [h]) for h in args.header]
    with tempfile.TemporaryDirectory(prefix="convoy-compile-time-") as tmp:
        work = pathlib.Path(tmp)
        before_dir = extract_include(args.before, work) if args.before else None
        reference = measure(args, work, *REFERENCE)
        rows = [reference] + [measure(args, work, name, headers, before_dir)
                              for name, headers in cases]
    for row in rows:
        row["seconds_ratio"] = row["seconds"] / reference["seconds"]
        row["peak_mb_ratio"] = row["peak_mb"] / reference["peak_mb"]

    print(f"compiler: {args.cxx} {args.flags}, best of {args.repeats}; "
          "ratios are to the reference compiled in the same run")
    labels = [", ".join(f"<{h}>" for h in row["headers"]) for row in rows]
    width = max(len(label) for label in labels + ["file includes"])
    header = f"{'file includes':<{width}} {'wall s':>8} {'x ref':>7} {'peak MB':>9} {'x ref':>7}"
    if args.before:
        header += f" {'wall s before':>14} {'after/before':>13} {'MB before':>10} {'after/before':>13}"
    print(header)
    for row, label in zip(rows, labels):
        line = (f"{label:<{width}} {row['seconds']:8.2f} {row['seconds_ratio']:7.2f} "
                f"{row['peak_mb']:9.0f} {row['peak_mb_ratio']:7.2f}")
        if "before_seconds" in row:
            line += (f" {row['before_seconds']:14.2f} {row['seconds_vs_before']:13.2f}"
                     f" {row['before_peak_mb']:10.0f} {row['peak_mb_vs_before']:13.2f}")
        print(line)
    extra = {"before": args.before} if args.before else {}
    lines = [json.dumps({"benchmark": "compile_time", "compiler": args.cxx, "flags": args.flags,
                         "repeats": args.repeats, **extra, **row}) for row in rows]
    print("\n".join(lines))
    if args.json:
        pathlib.Path(args.json).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
