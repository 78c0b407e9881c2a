#!/usr/bin/env python3
"""tools/plot on metrics files from a small real computation; see CMakeLists.txt beside this."""

import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

PLOT = os.environ.get("CONVOY_PLOT") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "plot")
COLUMNS = ["epoch", "global_step", "elapsed_s", "loss", "samples_per_s", "lr", "val_loss",
           "val_accuracy"]
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print("FAIL:", what)


def train(lr, steps=120, batch=16, validate_every=10, seed=1):
    """Logistic regression on two Gaussian blobs by minibatch gradient descent; returns the metrics
    rows the library's logger would write (validation on a held-out set every few steps)."""
    rng = random.Random(seed)

    def blob(n):
        rows = []
        for _ in range(n):
            label = rng.random() < 0.5
            centre = 1.0 if label else -1.0
            rows.append(([rng.gauss(centre, 1.2), rng.gauss(centre, 1.2)], 1.0 if label else 0.0))
        return rows

    train_set, val_set = blob(400), blob(200)
    w, b = [0.0, 0.0], 0.0

    def loss_and_accuracy(rows):
        loss, right = 0.0, 0
        for x, y in rows:
            p = 1 / (1 + math.exp(-(w[0] * x[0] + w[1] * x[1] + b)))
            loss -= y * math.log(max(p, 1e-12)) + (1 - y) * math.log(max(1 - p, 1e-12))
            right += (p >= 0.5) == (y == 1.0)
        return loss / len(rows), right / len(rows)

    metrics = []
    for step in range(1, steps + 1):
        start = (step - 1) * batch % len(train_set)
        rows = train_set[start:start + batch]
        loss, _ = loss_and_accuracy(rows)
        gw, gb = [0.0, 0.0], 0.0
        for x, y in rows:
            p = 1 / (1 + math.exp(-(w[0] * x[0] + w[1] * x[1] + b)))
            gw = [gw[0] + (p - y) * x[0], gw[1] + (p - y) * x[1]]
            gb += p - y
        w = [w[0] - lr * gw[0] / batch, w[1] - lr * gw[1] / batch]
        b -= lr * gb / batch
        row = {"epoch": (step - 1) * batch // len(train_set), "global_step": step,
               "elapsed_s": step * 0.01, "loss": loss, "samples_per_s": 1600.0 + step,
               "lr": lr, "val_loss": None, "val_accuracy": None}
        if step % validate_every == 0:
            row["val_loss"], row["val_accuracy"] = loss_and_accuracy(val_set)
        metrics.append(row)
    return metrics


def write_csv(path, rows, columns=COLUMNS):
    with open(path, "w") as f:
        f.write(",".join(columns) + "\n")
        for r in rows:
            f.write(",".join("" if r[c] is None else repr(r[c]) for c in columns) + "\n")


def write_jsonl(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def plot(*args):
    return subprocess.run([sys.executable, PLOT, *args], capture_output=True, text=True,
                          timeout=60)


def png_size(path):
    """(width, height) from a PNG's IHDR, or None when the file is not a PNG."""
    with open(path, "rb") as f:
        head = f.read(24)
    if len(head) < 24 or head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", head[16:24])


def expect_png(result, path, size, what):
    check(result.returncode == 0, f"{what}: exit status {result.returncode}: {result.stderr}")
    check(os.path.exists(path) and os.path.getsize(path) > 2000,
          f"{what}: {path} missing or nearly empty")
    if os.path.exists(path):
        check(png_size(path) == size, f"{what}: {path} is {png_size(path)}, expected PNG {size}")


def expect_refusal(result, words, what):
    check(result.returncode == 2, f"{what}: exit status {result.returncode}, expected 2")
    line = result.stderr.strip()
    check(line.startswith("tools/plot: ") and all(w in line for w in words),
          f"{what}: stderr '{line}' does not name {words}")


def main():
    if shutil.which("gnuplot") is None:
        print("gnuplot is not installed (tools/dev installs gnuplot-nox); skipping")
        return 77
    root = os.environ.get("CONVOY_TEST_TMP") or tempfile.gettempdir()
    os.makedirs(root, exist_ok=True)
    work = tempfile.mkdtemp(prefix="plot-", dir=root)

    fast, slow = train(lr=0.5), train(lr=0.05)
    # The computation itself learned: validation accuracy rose well above chance.
    check(fast[-1]["val_accuracy"] > 0.7, f"the fixture did not learn: {fast[-1]}")
    check(fast[-1]["loss"] < fast[0]["loss"], "the fixture's loss did not fall")
    a, b = os.path.join(work, "fast.csv"), os.path.join(work, "slow.jsonl")
    write_csv(a, fast)
    write_jsonl(b, slow)

    out = os.path.join(work, "run.png")
    expect_png(plot("run", a, "-o", out), out, (1200, 560), "run on CSV")
    out = os.path.join(work, "run_json.png")
    expect_png(plot("run", b, "-o", out, "--x", "epoch"), out, (1200, 560), "run on JSON lines")
    out = os.path.join(work, "compare.png")
    expect_png(plot("compare", f"lr 0.5={a}", b, "-o", out, "--x", "time"), out, (1200, 480),
               "compare CSV with JSON lines")
    # -o defaults to the input's name with .png; run's x axis to the global step, compare's to the
    # elapsed time (a global step means different rows under synchronous and asynchronous runs)
    result = plot("run", a)
    expect_png(result, os.path.join(work, "fast.png"), (1200, 560), "run without -o")
    check("(x axis: global step)" in result.stdout, f"run's default axis: {result.stdout}")
    out = os.path.join(work, "compare_default.png")
    result = plot("compare", a, b, "-o", out)
    expect_png(result, out, (1200, 480), "compare without --x")
    check("(x axis: elapsed time (s))" in result.stdout, f"compare's default axis: {result.stdout}")

    empty = os.path.join(work, "empty.csv")
    open(empty, "w").close()
    expect_refusal(plot("run", empty, "-o", os.path.join(work, "x.png")), [empty, "empty"],
                   "an empty file")
    header_only = os.path.join(work, "header.csv")
    write_csv(header_only, [])
    expect_refusal(plot("run", header_only, "-o", os.path.join(work, "x.png")),
                   [header_only, "no rows"], "a header without rows")
    no_val = os.path.join(work, "no_val_loss.csv")
    write_csv(no_val, fast, [c for c in COLUMNS if c != "val_loss"])
    expect_refusal(plot("compare", a, no_val, "-o", os.path.join(work, "x.png")),
                   [no_val, "val_loss"], "a missing column")
    bad = os.path.join(work, "bad.csv")
    with open(bad, "w") as f:
        f.write(",".join(COLUMNS) + "\n0,1,0.1,oops,1,0.1,,\n")
    expect_refusal(plot("run", bad, "-o", os.path.join(work, "x.png")),
                   [bad, "loss", "oops"], "a field that is not a number")
    expect_refusal(plot("bench", a, "-o", os.path.join(work, "x.png")), [a, "benchmark"],
                   "a metrics file given as benchmark results")
    check(not os.path.exists(os.path.join(work, "x.png")), "a refused input still wrote a PNG")
    check(plot("--help").returncode == 0, "tools/plot --help did not exit 0")
    check(plot("draw", a).returncode == 2, "an unknown command did not exit 2")

    if not os.environ.get("CONVOY_KEEP_TMP"):
        shutil.rmtree(work, ignore_errors=True)
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
