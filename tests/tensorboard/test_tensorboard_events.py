#!/usr/bin/env python3
"""The tensorboard callback's event file, read back by TensorBoard's own reader; see CMakeLists.txt
beside this. Usage: test_tensorboard_events.py WRITE_EVENTS_PROGRAM"""

import json
import math
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile

SKIP = 77
READER = "tensorboard.backend.event_processing.event_accumulator"
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print("FAIL:", what)


def has_tensorboard():
    try:
        __import__(READER)
        return True
    except ImportError:
        return False


def ensure_tensorboard():
    """Returns when this interpreter can import TensorBoard's reader; else re-runs this script
    under a virtual environment that has it, installing TensorBoard there first. Exits with SKIP
    when it cannot be installed."""
    if has_tensorboard():
        return
    if os.environ.get("CONVOY_TENSORBOARD_REEXEC"):
        print(f"SKIPPED: the virtual environment's Python still cannot import {READER}")
        sys.exit(SKIP)
    venv = os.environ.get("CONVOY_TENSORBOARD_VENV") or os.path.join(
        tempfile.gettempdir(), "convoy-tensorboard-venv")
    python = os.path.join(venv, "bin", "python")
    probe = [python, "-c", f"import {READER}"]
    if not (os.path.exists(python) and subprocess.run(probe, capture_output=True).returncode == 0):
        print(f"installing tensorboard into {venv} (pip)", flush=True)
        shutil.rmtree(venv, ignore_errors=True)
        steps = [[sys.executable, "-m", "venv", venv],
                 [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                  "tensorboard"]]
        for step in steps:
            try:
                done = subprocess.run(step, capture_output=True, text=True, timeout=240)
            except (OSError, subprocess.TimeoutExpired) as e:
                print(f"SKIPPED: cannot install tensorboard ({' '.join(step)}: {e})")
                sys.exit(SKIP)
            if done.returncode != 0:
                print(f"SKIPPED: cannot install tensorboard ({' '.join(step)} exited "
                      f"{done.returncode}):\n{done.stdout}{done.stderr}")
                sys.exit(SKIP)
    env = dict(os.environ, CONVOY_TENSORBOARD_REEXEC="1")
    sys.stdout.flush()
    os.execve(python, [python] + sys.argv, env)


def close(a, b, rel):
    return math.isclose(a, b, rel_tol=rel, abs_tol=rel)


def records(path, masked_crc32c):
    """Every record of a TFRecord file, each CRC checked with TensorBoard's CRC32C."""
    out = []
    with open(path, "rb") as f:
        data = f.read()
    at = 0
    while at < len(data):
        check(at + 12 <= len(data), f"a whole record header at byte {at}")
        header = data[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack("<I", data[at + 8:at + 12])
        check(header_crc == masked_crc32c(header), f"the length CRC of the record at byte {at}")
        body = data[at + 12:at + 12 + length]
        (body_crc,) = struct.unpack("<I", data[at + 12 + length:at + 16 + length])
        check(body_crc == masked_crc32c(body), f"the data CRC of the record at byte {at}")
        out.append(body)
        at += 16 + length
    check(at == len(data), "the file ends after its last record")
    return out


def main():
    program = sys.argv[1]
    ensure_tensorboard()
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.compat.proto import event_pb2
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    root = os.environ.get("CONVOY_TEST_TMP") or tempfile.gettempdir()
    os.makedirs(root, exist_ok=True)
    work = tempfile.mkdtemp(prefix="tensorboard-", dir=root)
    try:
        logdir = os.path.join(work, "logs")
        run = subprocess.run([program, logdir], capture_output=True, text=True, timeout=120)
        print(run.stdout + run.stderr)
        if run.returncode != 0:
            print(f"FAIL: {program} exited {run.returncode}")
            return 1
        with open(os.path.join(logdir, "expected.json")) as f:
            expected = json.load(f)
        files = [n for n in os.listdir(logdir) if n.startswith("events.out.tfevents.")]
        check(len(files) == 1, f"one event file in {logdir}, got {files}")
        if not files:
            return 1
        name = files[0]
        check(re.fullmatch(r"events\.out\.tfevents\.\d{10}\." + re.escape(socket.gethostname()),
                           name) is not None,
              f"the file name events.out.tfevents.<unix time>.<hostname>, got {name}")
        path = os.path.join(logdir, name)

        raw = records(path, masked_crc32c)
        first = event_pb2.Event.FromString(raw[0])
        check(first.file_version == "brain.Event:2", f"the first event's file_version: {first}")

        acc = ea.EventAccumulator(path, size_guidance={ea.SCALARS: 0, ea.HISTOGRAMS: 0})
        acc.Reload()
        tags = acc.Tags()
        print("scalars:", tags["scalars"])
        print("histograms:", tags["histograms"])

        def scalars(tag, want):  # want: [(step, value)]
            if tag not in tags["scalars"]:
                check(False, f"scalar tag {tag}")
                return
            got = [(e.step, e.value) for e in acc.Scalars(tag)]
            check([s for s, _ in got] == [s for s, _ in want],
                  f"{tag} steps {[s for s, _ in got]} == {[s for s, _ in want]}")
            for (step, value), (_, value_wanted) in zip(got, want):
                check(close(value, value_wanted, 1e-6),
                      f"{tag} at step {step}: {value} == {value_wanted}")

        intervals = expected["intervals"]
        check(len(intervals) == 8, f"8 intervals of 5 steps in 40, got {len(intervals)}")
        scalars("loss", [(r["step"], r["loss"]) for r in intervals])
        scalars("learning_rate", [(r["step"], r["lr"]) for r in intervals])
        scalars("samples_per_second", [(r["step"], r["samples_per_s"]) for r in intervals])
        evaluations = expected["evaluations"]
        check([r["step"] for r in evaluations] == [20, 40], f"evaluations at 20, 40: {evaluations}")
        scalars("validation/loss", [(r["step"], r["loss"]) for r in evaluations])
        scalars("validation/accuracy", [(r["step"], r["accuracy"]) for r in evaluations])

        steps = [h["step"] for h in expected["histograms"]]
        check(steps == [10, 20, 30, 40], f"histogram steps {steps}")
        variables = expected["histograms"][0]["weights"]
        check(len(variables) == 4, f"two layers' kernels and biases: {sorted(variables)}")
        check(sorted(expected["histograms"][0]["gradients"]) == sorted(variables),
              "a gradient for every variable")
        want_tags = sorted(list(variables) + [v + "/gradient" for v in variables])
        check(sorted(tags["histograms"]) == want_tags,
              f"histogram tags {sorted(tags['histograms'])} == {want_tags}")
        for tag in want_tags:
            if tag not in tags["histograms"]:
                continue
            events = acc.Histograms(tag)
            check([e.step for e in events] == steps, f"{tag} steps {[e.step for e in events]}")
            kind, variable = ("gradients", tag[:-len("/gradient")]) if tag.endswith(
                "/gradient") else ("weights", tag)
            for event, at_step in zip(events, expected["histograms"]):
                h = event.histogram_value
                count, total = at_step[kind][variable]
                where = f"{tag} at step {event.step}"
                check(h.num == count, f"{where}: num {h.num} == {count} elements")
                check(sum(h.bucket) == count, f"{where}: bucket counts add up to {count}")
                check(len(h.bucket) == len(h.bucket_limit), f"{where}: a limit for every bucket")
                check(list(h.bucket_limit) == sorted(h.bucket_limit), f"{where}: limits ascend")
                check(h.min <= h.max, f"{where}: min {h.min} <= max {h.max}")
                check(close(h.sum, total, 1e-9), f"{where}: sum {h.sum} == {total}")
                # Each value lies below its bucket's limit: the lowest limit is above the minimum.
                first_full = next(i for i, c in enumerate(h.bucket) if c > 0)
                check(h.bucket_limit[first_full] > h.min, f"{where}: min inside its bucket")
            # A gradient is not its variable: the sums differ somewhere.
        grads_differ = any(
            at_step["gradients"][v][1] != at_step["weights"][v][1]
            for at_step in expected["histograms"] for v in variables)
        check(grads_differ, "gradient histograms hold gradients, not weights")
    finally:
        if not os.environ.get("CONVOY_KEEP_TMP"):
            shutil.rmtree(work, ignore_errors=True)
    checks = "all checks passed" if not failures else f"{len(failures)} checks failed"
    print(f"tensorboard_events: {checks}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
