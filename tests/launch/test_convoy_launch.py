#!/usr/bin/env python3
"""Runs tools/convoy-launch on small Python programs, as real processes, and checks what each task
was given, how output comes back, and the exit status and timing of every way a run ends.

Usage: test_convoy_launch.py [unittest options]. CONVOY_LAUNCH names the launcher (default: the
one in this checkout); CONVOY_TEST_TMP the folder for temporary files; CONVOY_KEEP_TMP keeps them.
Every launch has a hard limit, so a hung launcher fails the test instead of stalling it.
Standard library only; run by the ctest convoy_launch (label cluster).
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
from pathlib import Path

LAUNCHER = os.environ.get("CONVOY_LAUNCH") or str(
    Path(__file__).resolve().parents[2] / "tools" / "convoy-launch")
LIMIT = 20  # seconds any one launch may take before the test calls it hung

# Every task program starts with this: its role, and the folder it reports to (argv[1]).
PREAMBLE = """\
import json, os, signal, socket, subprocess, sys, time
from pathlib import Path
task = os.environ["CONVOY_TASK"]
kind, index = task.split(":")
index = int(index)
out = Path(sys.argv[1])
def report(name, text=""):
    tmp = out / (name + ".tmp")
    tmp.write_text(text)
    tmp.rename(out / name)  # whole files only, for a reader polling the folder
def wait_for(names):
    while not all((out / n).exists() for n in names):
        time.sleep(0.02)
"""


def process_gone(pid):
    """True when pid has ended (a zombie waiting for init counts as ended)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


class LaunchTest(unittest.TestCase):
    def setUp(self):
        base = os.environ.get("CONVOY_TEST_TMP") or None
        if base:
            os.makedirs(base, exist_ok=True)
        self.dir = Path(tempfile.mkdtemp(prefix="convoy_launch_", dir=base))
        if "CONVOY_KEEP_TMP" not in os.environ:
            self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)
        self.reports = self.dir / "reports"
        self.reports.mkdir()

    def program(self, body):
        """The command line of a task program: PREAMBLE, then body, reporting to self.reports."""
        path = self.dir / "task.py"
        path.write_text(PREAMBLE + textwrap.dedent(body))
        return [sys.executable, str(path), str(self.reports)]

    def launch(self, options, command):
        """Runs the launcher to its end; returns (status, stdout, stderr, seconds)."""
        started = time.monotonic()
        # Without a run token of the caller's: each launch draws its own.
        env = {k: v for k, v in os.environ.items() if k != "CONVOY_RUN_TOKEN"}
        done = subprocess.run([sys.executable, LAUNCHER, *options, "--", *command],
                              capture_output=True, text=True, timeout=LIMIT, env=env)
        return done.returncode, done.stdout, done.stderr, time.monotonic() - started

    def assert_gone(self, pids):
        deadline = time.monotonic() + 3
        while not all(process_gone(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual([p for p in pids if not process_gone(p)], [], "processes left running")

    # ---- what each task gets ------------------------------------------------------------------

    def test_every_task_gets_its_tf_config_and_free_distinct_ports(self):
        command = self.program("""
            config = json.loads(os.environ["TF_CONFIG"])
            host, port = config["cluster"][kind][index].rsplit(":", 1)
            with socket.socket() as s:  # the port is free: this task can listen on it
                s.bind((host, int(port)))
                s.listen()
                report(task + ".json", json.dumps({"config": config, "task": task}))
                workers = len(config["cluster"]["worker"])
                if kind == "ps":  # a ps serves until every worker and the chief said goodbye
                    wait_for([f"worker:{i}.json" for i in range(workers)] + ["chief:0.json"])
        """)
        status, _, err, _ = self.launch(["--ps", "2", "--workers", "3", "--chief"], command)
        self.assertEqual(status, 0, err)
        names = ["ps:0", "ps:1", "worker:0", "worker:1", "worker:2", "chief:0"]
        self.assertEqual(sorted(p.name for p in self.reports.iterdir()),
                         sorted(n + ".json" for n in names))
        cluster = None
        for name in names:
            got = json.loads((self.reports / (name + ".json")).read_text())
            self.assertEqual(got["task"], name)
            kind, index = name.split(":")
            self.assertEqual(got["config"]["task"], {"type": kind, "index": int(index)})
            cluster = cluster or got["config"]["cluster"]
            self.assertEqual(got["config"]["cluster"], cluster, "every task sees one cluster")
        self.assertEqual({k: len(v) for k, v in cluster.items()}, {"ps": 2, "worker": 3, "chief": 1})
        addresses = [a for v in cluster.values() for a in v]
        self.assertTrue(all(a.startswith("127.0.0.1:") for a in addresses), addresses)
        self.assertEqual(len(set(addresses)), len(addresses), "ports must be distinct")
        # Below the kernel's ephemeral range, where no outgoing connection or bind to port 0 can
        # take a port before its task binds it.
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
        first = max(1024, low - 12000)
        if low - first >= 1000:
            ports = [int(a.rsplit(":", 1)[1]) for a in addresses]
            self.assertTrue(all(first <= p < low for p in ports), (ports, low))
        self.assertNotIn("stopping", err, "the ps tasks exited by themselves")

    def test_every_task_of_a_run_gets_its_run_token(self):
        command = self.program("""
            report(task + ".token", os.environ["CONVOY_RUN_TOKEN"])
        """)
        tokens = []
        for _ in range(2):
            for old in self.reports.iterdir():
                old.unlink()
            status, _, err, _ = self.launch(["--ps", "1", "--workers", "2"], command)
            self.assertEqual(status, 0, err)
            run = {(self.reports / f"{n}.token").read_text()
                   for n in ("ps:0", "worker:0", "worker:1")}
            self.assertEqual(len(run), 1, "one token for every task of a run")
            tokens.append(run.pop())
        self.assertRegex(tokens[0], "^[0-9a-f]{32}$")
        self.assertNotEqual(tokens[0], tokens[1], "each run draws its own")
        # One given in the environment (a run launched from several machines) is passed on.
        done = subprocess.run([sys.executable, LAUNCHER, "--workers", "1", "--", *command],
                              capture_output=True, text=True, timeout=LIMIT,
                              env=dict(os.environ, CONVOY_RUN_TOKEN="shared-by-hand"))
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual((self.reports / "worker:0.token").read_text(), "shared-by-hand")

    def test_print_config_starts_nothing(self):
        command = self.program('report("started")')
        status, out, err, _ = self.launch(["--print-config", "--ps", "1", "--workers", "2",
                                           "--port-base", "23000"], command)
        self.assertEqual(status, 0, err)
        lines = out.splitlines()
        self.assertEqual([l.split(" ", 1)[0] for l in lines], ["ps:0", "worker:0", "worker:1"])
        for line, (kind, index) in zip(lines, [("ps", 0), ("worker", 0), ("worker", 1)]):
            config = json.loads(line.split("TF_CONFIG=", 1)[1])
            self.assertEqual(config, {
                "cluster": {"ps": ["127.0.0.1:23000"],
                            "worker": ["127.0.0.1:23001", "127.0.0.1:23002"]},
                "task": {"type": kind, "index": index}})
        time.sleep(0.2)
        self.assertEqual(list(self.reports.iterdir()), [])

    # ---- output ---------------------------------------------------------------------------------

    def test_output_lines_are_prefixed_and_whole(self):
        command = self.program("""
            for i in range(300):  # many writes racing the other tasks', each line in one piece
                print(f"{task} out {i} " + "x" * 200, flush=True)
                print(f"{task} err {i} " + "y" * 200, file=sys.stderr, flush=True)
            sys.stdout.write(task + " partial")  # no newline: written when the task exits
        """)
        status, out, err, _ = self.launch(["--ps", "1", "--workers", "2", "--grace", "2"],
                                          command)
        self.assertEqual(status, 0, err)
        for stream, text, fill in (("out", out, "x"), ("err", err, "y")):
            counts = {}
            for line in text.splitlines():
                if stream == "err" and line.startswith("convoy-launch: "):
                    continue
                m = re.fullmatch(rf"\[(\w+:\d)\] (\w+:\d) {stream} (\d+) {fill}{{200}}", line) \
                    or re.fullmatch(r"\[(\w+:\d)\] (\w+:\d) partial()", line)
                self.assertIsNotNone(m, f"std{stream} line not prefixed or broken: {line!r}")
                self.assertEqual(m.group(1), m.group(2), "prefix names another task")
                counts[m.group(1)] = counts.get(m.group(1), 0) + 1
            expected = 301 if stream == "out" else 300
            self.assertEqual(counts, {"ps:0": expected, "worker:0": expected,
                                      "worker:1": expected})

    # ---- how a run ends -------------------------------------------------------------------------

    def test_ps_tasks_that_do_not_exit_are_stopped_after_the_workers_succeed(self):
        command = self.program("""
            if kind == "ps":
                time.sleep(60)
        """)
        status, _, err, seconds = self.launch(["--ps", "1", "--workers", "2", "--grace", "0.5"],
                                              command)
        self.assertEqual(status, 0, err)
        self.assertIn("the workers succeeded; stopping ps:0", err)
        self.assertLess(seconds, 5)

    def test_a_failing_worker_stops_the_others_and_gives_its_status(self):
        command = self.program("""
            if kind == "worker" and index == 1:
                wait_for(["ps:0", "worker:0"])
                sys.exit(3)
            # ps:0 also starts a child: stopping a task stops its whole process group
            child = subprocess.Popen(["sleep", "60"]) if kind == "ps" else None
            report(task, f"{os.getpid()} {child.pid if child else ''}")
            time.sleep(60)
        """)
        status, _, err, seconds = self.launch(["--ps", "1", "--workers", "2", "--grace", "2"],
                                              command)
        self.assertEqual(status, 3, err)
        self.assertLess(seconds, 5)
        self.assertIn("convoy-launch: worker:1 exited with code 3; stopping the other tasks", err)
        pids = [int(p) for n in ("ps:0", "worker:0")
                for p in (self.reports / n).read_text().split()]
        self.assertEqual(len(pids), 3)
        self.assert_gone(pids)

    def test_a_failed_task_is_started_again_while_it_has_restarts_left(self):
        # worker:1 fails on its first start (exit 3), is killed by SIGKILL on its second, and
        # succeeds on its third: two restarts, with the same TF_CONFIG each time.
        command = self.program("""
            starts = out / f"{task}.starts"
            with open(starts, "a") as f:
                f.write(os.environ["TF_CONFIG"] + " " + os.environ["CONVOY_RUN_TOKEN"] + "\\n")
            n = len(starts.read_text().splitlines())
            if kind == "worker" and index == 1 and n == 1:
                sys.exit(3)
            if kind == "worker" and index == 1 and n == 2:
                os.kill(os.getpid(), signal.SIGKILL)
            if kind == "worker" and index == 1:
                report("worker:1 trained")
            if kind == "worker" and index == 0:
                wait_for(["worker:1 trained"])  # a run still going: worker 0 waits for it
            if kind == "ps":
                time.sleep(60)
        """)
        status, _, err, seconds = self.launch(
            ["--ps", "1", "--workers", "2", "--grace", "1", "--max-restarts", "2"], command)
        self.assertEqual(status, 0, err)
        self.assertIn("convoy-launch: worker:1 exited with code 3; starting it again "
                      "(restart 1 of 2)", err)
        self.assertIn("convoy-launch: worker:1 was killed by signal 9 (SIGKILL); starting it "
                      "again (restart 2 of 2)", err)
        configs = (self.reports / "worker:1.starts").read_text().splitlines()
        self.assertEqual(len(configs), 3)
        self.assertEqual(len(set(configs)), 1)  # the same task, the same ports, the same run
        self.assertEqual(len((self.reports / "worker:0.starts").read_text().splitlines()), 1)
        self.assertLess(seconds, 10)

    def test_a_task_that_fails_after_the_others_succeeded_is_not_restarted(self):
        command = self.program("""
            if kind == "worker" and index == 1:
                with open(out / "starts", "a") as f:
                    f.write("x\\n")
                wait_for(["worker:0 done"])
                time.sleep(0.3)  # worker 0 has exited 0 by now
                sys.exit(6)
            if kind == "worker":
                report("worker:0 done")
                sys.exit(0)
            time.sleep(60)
        """)
        status, _, err, seconds = self.launch(
            ["--ps", "1", "--workers", "2", "--grace", "1", "--max-restarts", "3"], command)
        self.assertEqual(status, 6, err)
        self.assertIn("worker:1 exited with code 6; stopping the other tasks", err)
        self.assertNotIn("starting it again", err)
        self.assertEqual(len((self.reports / "starts").read_text().splitlines()), 1)
        self.assertLess(seconds, 6)

    def test_a_task_out_of_restarts_stops_the_run_with_its_status(self):
        command = self.program("""
            if kind == "worker" and index == 1:
                with open(out / "starts", "a") as f:
                    f.write("x\\n")
                sys.exit(4)
            time.sleep(60)
        """)
        status, _, err, seconds = self.launch(
            ["--ps", "1", "--workers", "2", "--grace", "1", "--max-restarts", "1"], command)
        self.assertEqual(status, 4, err)
        self.assertIn("worker:1 exited with code 4; starting it again (restart 1 of 1)", err)
        self.assertIn("worker:1 exited with code 4; stopping the other tasks", err)
        self.assertEqual(len((self.reports / "starts").read_text().splitlines()), 2)
        self.assertLess(seconds, 6)

    def test_a_task_that_ignores_sigterm_is_killed_after_the_grace_period(self):
        command = self.program("""
            if kind == "ps":
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                report(task, str(os.getpid()))
                time.sleep(60)
            wait_for(["ps:0"])
            sys.exit(5)
        """)
        status, _, err, seconds = self.launch(["--ps", "1", "--workers", "1", "--grace", "1"],
                                              command)
        self.assertEqual(status, 5, err)
        self.assertGreaterEqual(seconds, 1)
        self.assertLess(seconds, 6)
        self.assert_gone([int((self.reports / "ps:0").read_text())])

    def test_a_task_killed_by_a_signal_gives_128_plus_the_signal(self):
        command = self.program("""
            if kind == "worker":
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(60)
        """)
        status, _, err, seconds = self.launch(["--ps", "1", "--workers", "1", "--grace", "2"],
                                              command)
        self.assertEqual(status, 128 + signal.SIGKILL, err)
        self.assertIn("worker:0 was killed by signal 9 (SIGKILL)", err)
        self.assertLess(seconds, 5)

    def test_timeout_stops_everything_with_124(self):
        command = self.program("time.sleep(60)")
        status, _, err, seconds = self.launch(["--ps", "1", "--workers", "2", "--timeout", "1",
                                               "--grace", "1"], command)
        self.assertEqual(status, 124, err)
        self.assertIn("timed out after 1 s", err)
        self.assertGreaterEqual(seconds, 1)
        self.assertLess(seconds, 5)

    def test_sigterm_to_the_launcher_is_passed_to_every_task(self):
        command = self.program("""
            signal.signal(signal.SIGTERM, lambda *_: (report(task + ".term"), sys.exit(0)))
            report(task)
            time.sleep(60)
        """)
        launcher = subprocess.Popen(
            [sys.executable, LAUNCHER, "--ps", "1", "--workers", "2", "--grace", "2", "--",
             *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            names = ["ps:0", "worker:0", "worker:1"]
            deadline = time.monotonic() + LIMIT
            while not all((self.reports / n).exists() for n in names):
                self.assertLess(time.monotonic(), deadline, "the tasks never started")
                self.assertIsNone(launcher.poll(), "the launcher ended early")
                time.sleep(0.05)
            launcher.send_signal(signal.SIGTERM)
            _, err = launcher.communicate(timeout=LIMIT)
        finally:
            if launcher.poll() is None:
                launcher.kill()
                launcher.wait()
        self.assertEqual(launcher.returncode, 128 + signal.SIGTERM, err)
        self.assertIn("received SIGTERM; passing it to every task", err)
        for name in names:
            self.assertTrue((self.reports / (name + ".term")).exists(), f"{name} got no SIGTERM")

    # ---- options --------------------------------------------------------------------------------

    def test_bad_options_are_refused_with_status_2(self):
        command = self.program('report("started")')
        cases = [
            (["--ps", "-1", "--", *command], "--ps: -1 is below the minimum"),
            (["--workers", "0", "--", *command], "--workers: 0 is below the minimum"),
            (["--workers", "two", "--", *command], "'two' is not a whole number"),
            (["--timeout", "-3", "--", *command], "--timeout"),
            (["--max-restarts", "-1", "--", *command], "--max-restarts: -1 is below the minimum"),
            (["--port-base", "65534", "--workers", "4", "--", *command], "would pass 65535"),
            (["--frobnicate", "--", *command], "unrecognized arguments: --frobnicate"),
            (["--workers", "2", *command], "missing '--'"),
            (["--workers", "2", "--"], "missing the program"),
        ]
        for argv, message in cases:
            with self.subTest(argv=argv[:4]):
                done = subprocess.run([sys.executable, LAUNCHER, *argv], capture_output=True,
                                      text=True, timeout=LIMIT)
                self.assertEqual(done.returncode, 2, done.stderr)
                self.assertIn(message, done.stderr)
                self.assertIn("usage: convoy-launch", done.stderr)
        time.sleep(0.2)
        self.assertEqual(list(self.reports.iterdir()), [], "a refused launch started a task")

    def test_workers_alone_by_default(self):
        # A collective (comm::Gloo) runs under "--workers N" as it stands: no ps task unless asked.
        status, out, err, _ = self.launch(["--print-config", "--workers", "2"],
                                          self.program('report("started")'))
        self.assertEqual(status, 0, err)
        lines = out.splitlines()
        self.assertEqual([l.split(" ", 1)[0] for l in lines], ["worker:0", "worker:1"])
        for line in lines:
            self.assertNotIn("ps", json.loads(line.split("TF_CONFIG=", 1)[1])["cluster"])

    def test_help(self):
        done = subprocess.run([sys.executable, LAUNCHER, "--help"], capture_output=True,
                              text=True, timeout=LIMIT)
        self.assertEqual(done.returncode, 0)
        for option in ("--ps", "--workers", "--chief", "--port-base", "--timeout", "--grace",
                       "--print-config"):
            self.assertIn(option, done.stdout)

    def test_a_program_that_cannot_start_gives_127(self):
        status, _, err, _ = self.launch(["--workers", "1"], [str(self.dir / "no-such-program")])
        self.assertEqual(status, 127)
        self.assertIn("cannot start", err)


if __name__ == "__main__":
    unittest.main()
