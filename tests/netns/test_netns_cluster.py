#!/usr/bin/env python3
"""A parameter-server cluster across hosts, each host a Linux network namespace of its own.

The ps and the two workers each live in their own namespace with their own address
(10.77.0.1-3/24), joined by veth pairs to a bridge in a fourth, "switch" namespace; nothing is
added to the namespace this test starts in, and no packet leaves the four. Three runs of
examples/02_fashion_mnist (1 ps + 2 workers, TF_CONFIG, plaintext opted into with
--allow-plaintext or CURVE keys from convoy-keygen); in each, every task must exit 0, the ps must
say it serves 10.77.0.1 (in plaintext, opted in, or under CURVE) and end with every worker's
goodbye, and the chief must reach the accuracy floor:

  cut    --strategy ps-async with --heartbeat-ms: once worker 1 has trained a while, its switch
         port goes down (`ip link set ... down`), and comes back up after a few heartbeats. Both
         sides must log the loss (heartbeats), worker 1 must log that it reached the ps again,
         the run must finish with every task exiting 0, and worker 1 must have trained after the
         link came back;
  sync-cut  --strategy ps-sync with --heartbeat-ms, the same cut: the ps must drop worker 1 and
         say that worker 0 goes on alone (1 gradient a step), worker 0 must train on through the
         cut, worker 1 must rejoin the group once the link is back (the ps says so) and train
         again;
  curve  --strategy ps-sync --ps-keys DIR: CURVE on, two authorized worker keys.

And one of the two workers alone, with no ps, as a multi-worker collective over Gloo:

  gloo-cut  --strategy multiworker --allow-plaintext --exchange-timeout-ms 3000: once both train,
         worker 1's switch port goes down for good. Neither may hang: worker 1 must end with
         status 1 within the exchange timeout and some seconds more, saying it alone is not more
         than half of the group and naming worker 0 at its address (which it cannot reach);
         worker 0 must regroup alone (half of the group, with its rank 0), say it lost worker 1,
         and finish the run with status 0.
  gloo-heal  the same cut, the port up again once worker 0 trains on alone: worker 1, left
         behind, must knock at worker 0's board and join it, worker 0 must take it in, both must
         train together again and exit 0.

And two tasks whose peer's host name does not resolve (the namespace's resolver reads only
/etc/hosts, so no query leaves it):

  unresolved  a ps-sync worker whose ps host is unknown, and a multiworker rank 1 whose rank 0's
         host is unknown: each must end with status 1 within seconds, naming the peer and the
         host, not after its 60 s connect (or 120 s bootstrap) timeout.

Usage: test_netns_cluster.py FASHION_MNIST CONVOY_KEYGEN [RUN...] (RUN: cut, sync-cut,
curve, gloo-cut, gloo-heal, unresolved; default all). Needs root, iproute2's `ip` and network
namespaces; where any is missing it exits 77 (ctest: skipped) saying why. CONVOY_TEST_TMP names the
folder for keys and logs; CONVOY_KEEP_TMP keeps them. Namespaces are named convoy-netns-<pid>-*,
removed at the end however the test ends, and any left by a run that was killed (its pid gone) are
removed first. Every process runs under timeout(1) and every wait here is bounded.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

SKIP = 77
PREFIX = "convoy-netns-"
SUBNET = "10.77.0"
PORT = 2222  # each task listens in its own namespace: no other program can hold the port
TASKS = [("ps", 0, 1), ("worker", 0, 2), ("worker", 1, 3)]  # job, index, host part of the address
RUN_LIMIT = 60  # seconds one run may take (each process is killed by timeout(1) after this)
ACCURACY_FLOOR = 0.70  # 200-300 steps of batch 100 reach 0.75-0.80; chance is 0.10
HEARTBEAT_MS = 500
CUT_SECONDS = 3  # six heartbeats: both sides must notice
SYNC_CUT_STEPS = "10000"  # worker 0 alone did 2440 in the cut and reconnect; together ~660/s
GLOO_CUT_STEPS = 8000  # worker 0 trains on alone after the cut: a few seconds
# Worker 0 alone trains about 2000 steps a second (slower under load, which widens the margin):
# 12000 leave it training past twice the ~3 s from its regroup to worker 1's knock.
GLOO_HEAL_STEPS = 12000
GLOO_TIMEOUT_MS = 3000
# Host names under .invalid, which no resolver knows (RFC 6761); the test's resolver reads only
# /etc/hosts, so none is ever asked of a name server.
UNKNOWN_PS = "no-such-ps.invalid"
UNKNOWN_WORKER = "no-such-worker.invalid"
UNRESOLVED_LIMIT = 20  # seconds; a connect or bootstrap timeout would be 60 or 120


class Skip(Exception):
    pass


def ip(*args, check=True):
    """Runs `ip ARGS`; returns the completed process (raises on failure when check)."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


def root_links():
    """The interfaces of the namespace this test runs in, which it must leave as they are."""
    return sorted(line.split(":")[1].strip() for line in
                  ip("-o", "link", "show", check=False).stdout.splitlines() if ":" in line)


def remove_stale_namespaces():
    """Namespaces of earlier runs whose driver is gone (killed before its cleanup ran)."""
    listed = ip("netns", "list", check=False).stdout.split()
    for name in listed:
        m = re.fullmatch(re.escape(PREFIX) + r"(\d+)-\w+", name)
        if m and not Path(f"/proc/{m.group(1)}").exists():
            ip("netns", "del", name, check=False)
    for folder in Path("/etc/netns").glob(f"{PREFIX}*"):  # resolver files of resolver_of_files_only
        m = re.fullmatch(re.escape(PREFIX) + r"(\d+)-\w+", folder.name)
        if m and not Path(f"/proc/{m.group(1)}").exists():
            shutil.rmtree(folder, ignore_errors=True)


class Network:
    """The switch namespace with its bridge, and one namespace per task with its veth pair."""

    def __init__(self):
        self.run_id = f"{PREFIX}{os.getpid()}"
        self.switch = f"{self.run_id}-sw"
        self.hosts = {}  # (job, index) -> namespace
        self.ports = {}  # (job, index) -> the bridge port (in the switch namespace)
        self.made = []
        self.made_etc_netns = False  # /etc/netns did not exist: removed again at the end

    def add_namespace(self, name):
        ip("netns", "add", name)
        self.made.append(name)
        ip("-n", name, "link", "set", "lo", "up")

    def build(self):
        self.add_namespace(self.switch)
        ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        ip("-n", self.switch, "link", "set", "br0", "up")
        for job, index, host in TASKS:
            ns = f"{self.run_id}-{job}{index}"
            port = f"p-{job}{index}"
            self.add_namespace(ns)
            # Both ends are made in the switch namespace and one is moved: the root namespace never
            # holds either.
            ip("-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", "eth0",
               "netns", ns)
            ip("-n", self.switch, "link", "set", port, "master", "br0", "up")
            ip("-n", ns, "addr", "add", f"{SUBNET}.{host}/24", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")
            self.hosts[(job, index)] = ns
            self.ports[(job, index)] = port

    def link(self, task, state):
        ip("-n", self.switch, "link", "set", self.ports[task], state)

    def remove(self):
        for name in reversed(self.made):
            ip("netns", "del", name, check=False)
            shutil.rmtree(Path("/etc/netns") / name, ignore_errors=True)
        self.made.clear()
        if self.made_etc_netns:
            try:
                Path("/etc/netns").rmdir()
            except OSError:  # something else put a file there meanwhile: it stays
                pass


def tf_config(job, index):
    cluster = {
        "ps": [f'"{SUBNET}.{h}:{PORT}"' for j, _, h in TASKS if j == "ps"],
        "worker": [f'"{SUBNET}.{h}:{PORT}"' for j, _, h in TASKS if j == "worker"],
    }
    jobs = ",".join(f'"{name}":[{",".join(addresses)}]' for name, addresses in cluster.items())
    return f'{{"cluster":{{{jobs}}},"task":{{"type":"{job}","index":{index}}}}}'


def workers_only_config(index):
    """TF_CONFIG of a cluster of the two workers alone, as the source text's
    MultiWorkerMirroredStrategy example sets it."""
    workers = ",".join(f'"{SUBNET}.{h}:{PORT}"' for j, _, h in TASKS if j == "worker")
    return f'{{"cluster":{{"worker":[{workers}]}},"task":{{"type":"worker","index":{index}}}}}'


class Task:
    """One process in its namespace, its output collected line by line as it comes."""

    def __init__(self, net, job, index, command, config=None):
        self.name = f"{job}:{index}"
        env = dict(os.environ, TF_CONFIG=config or tf_config(job, index), OMP_NUM_THREADS="1",
                   OPENBLAS_NUM_THREADS="1")
        self.lines = []
        self.lock = threading.Lock()
        self.process = subprocess.Popen(
            ["ip", "netns", "exec", net.hosts[(job, index)], "timeout", "-k", "5",
             str(RUN_LIMIT), *command],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, start_new_session=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.process.stdout:
            with self.lock:
                self.lines.append(line.rstrip("\n"))

    def output(self):
        with self.lock:
            return list(self.lines)

    def wait_for(self, pattern, limit):
        """The first line matching pattern within `limit` seconds, or None."""
        deadline = time.monotonic() + limit
        while True:
            ended = self.process.poll() is not None
            if ended:
                self.reader.join(5)
            for line in self.output():
                if re.search(pattern, line):
                    return line
            if ended or time.monotonic() >= deadline:
                return None
            time.sleep(0.05)

    def finish(self, limit):
        try:
            status = self.process.wait(limit)
        except subprocess.TimeoutExpired:
            self.kill()
            status = self.process.wait(5)
        self.reader.join(5)
        return status

    def kill(self):
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class Failure(Exception):
    pass


def check(condition, message, tasks):
    if condition:
        return
    logs = "\n".join(f"[{t.name}] {line}" for t in tasks for line in t.output())
    raise Failure(f"{message}\n--- output ---\n{logs}")


def run_cluster(net, program, options, during=None):
    """Starts ps:0, worker:0, worker:1 with `options`; `during(tasks)` runs while they train.
    Returns the tasks once every one has ended; fails unless each exited 0."""
    tasks = []
    try:
        for job, index, _ in TASKS:
            tasks.append(Task(net, job, index, [program, *options]))
        if during:
            during(tasks)
        started = time.monotonic()
        statuses = [t.finish(max(1.0, RUN_LIMIT + 10 - (time.monotonic() - started)))
                    for t in tasks]
    finally:
        for t in tasks:
            t.kill()
    for t, status in zip(tasks, statuses):
        check(status == 0, f"{t.name} exited with status {status}", tasks)
    return tasks


def accuracy(task, tasks):
    line = task.wait_for(r"^test accuracy: ", 0)
    check(line is not None, f"{task.name} printed no test accuracy", tasks)
    return float(line.split()[-1])


def expect_trained(tasks, mode):
    ps, chief = tasks[0], tasks[1]
    check(ps.wait_for(rf"convoy: ps:0 serving .* on tcp://{SUBNET}\.1:{PORT} .*; {re.escape(mode)}",
                      0) is not None, f"the ps did not say it serves {SUBNET}.1 with {mode}", tasks)
    check(ps.wait_for(r"convoy: ps:0 done: every worker said goodbye", 0) is not None,
          "the ps did not end with every worker's goodbye", tasks)
    value = accuracy(chief, tasks)
    check(value >= ACCURACY_FLOOR, f"test accuracy {value} is below {ACCURACY_FLOOR}", tasks)
    return value


def cut_worker_1(net, marks):
    """The `during` of a cut run: once worker 1 has trained, its link goes down for CUT_SECONDS
    and comes back; marks["lines"] is then how many lines worker 1 had written."""
    def cut(tasks):
        worker = tasks[2]
        check(worker.wait_for(r"After \d+ training steps", 30) is not None,
              "worker 1 did not train before the cut", tasks)
        net.link(("worker", 1), "down")
        time.sleep(CUT_SECONDS)
        net.link(("worker", 1), "up")
        marks["lines"] = len(worker.output())  # progress lines are flushed as they are written
    return cut


def expect_lines(tasks, expected):
    """Each (task, pattern, what) of `expected` is in its task's output; returns them shown."""
    shown = []
    for task, pattern, what in expected:
        line = task.wait_for(pattern, 0)
        check(line is not None, what, tasks)
        shown.append(f"[{task.name}] {line}")
    return shown


def trained_after(tasks, marks):
    after = [line for line in tasks[2].output()[marks["lines"]:]
             if re.search(r"After \d+ training steps", line)]
    check(len(after) > 0, "worker 1 trained no more after the link came back", tasks)


def worker_1_heard_of_the_cut(worker):
    return [(worker, rf"convoy: worker 1 lost ps:0 at {SUBNET}\.1:{PORT}: silent for over "
                     rf"{HEARTBEAT_MS} ms", "worker 1 did not log losing the ps"),
            (worker, rf"convoy: worker 1 reached ps:0 at {SUBNET}\.1:{PORT} again",
             "worker 1 did not log reaching the ps again")]


def cut_run(net, program):
    marks = {}
    # Worker 0 alone must not finish every global step while worker 1 is cut off and connects
    # again (the cut, then TCP's retransmission back-off: up to a few seconds more), or worker 1
    # returns to a ps that has ended. Alone it does about 1000 steps/s of this narrow model
    # (hidden 100) on an idle machine, so 12000 steps leave it at least 12 s of work; under load
    # it is slower, which only widens the margin. Both together take 6-8 s idle.
    tasks = run_cluster(net, program, ["--strategy", "ps-async", "--hidden", "100", "--steps",
                                       "12000", "--batch", "100", "--log-every", "250",
                                       "--allow-plaintext", "--heartbeat-ms", str(HEARTBEAT_MS)],
                        during=cut_worker_1(net, marks))
    ps, _, worker = tasks
    shown = expect_lines(tasks, [
        (ps, rf"convoy: ps:0 lost worker 1 at {SUBNET}\.3: silent for over {HEARTBEAT_MS} ms",
         "the ps did not log losing worker 1"), *worker_1_heard_of_the_cut(worker)])
    trained_after(tasks, marks)
    value = expect_trained(tasks, "plaintext (opted in)")
    return f"accuracy {value:.3f}; link down for {CUT_SECONDS} s:\n  " + "\n  ".join(shown)


def sync_cut_run(net, program):
    marks = {}
    # Synchronous: while worker 1 is cut off, the ps drops it and worker 0 trains alone, then
    # worker 1 rejoins. Worker 0 alone must not reach the last global step before worker 1 is
    # back: on an idle machine it trained 2440 steps in the 3 s cut and the 2.8 s worker 1 took to
    # reconnect, and the two together ~660 steps/s, so 10000 steps leave a margin of 3x alone and
    # take about 16 s; under load it is slower alone too, which only widens the margin.
    tasks = run_cluster(net, program, ["--strategy", "ps-sync", "--hidden", "100", "--steps",
                                       SYNC_CUT_STEPS, "--batch", "100", "--log-every", "250",
                                       "--allow-plaintext", "--heartbeat-ms", str(HEARTBEAT_MS)],
                        during=cut_worker_1(net, marks))
    ps, _, worker = tasks
    shown = expect_lines(tasks, [
        (ps, rf"convoy: ps:0 lost worker 1 at {SUBNET}\.3: silent for over {HEARTBEAT_MS} ms, "
             rf"or gone; it counts as departed under Synchronous, 1 worker\(s\) go on and step "
             rf"\d+ takes 1 gradient\(s\)", "the ps did not drop worker 1 and go on with worker 0"),
        *worker_1_heard_of_the_cut(worker),
        (ps, r"convoy: ps:0: worker 1 trains in the group again from step \d+ \(2 gradient\(s\) "
             r"a step\)", "the ps did not take worker 1 back into the group")])
    trained_after(tasks, marks)
    value = expect_trained(tasks, "plaintext (opted in)")
    return f"accuracy {value:.3f}; link down for {CUT_SECONDS} s:\n  " + "\n  ".join(shown)


def curve_run(net, program, keygen, keys):
    (keys / "workers").mkdir(parents=True)
    for name in ("ps", "workers/worker0", "workers/worker1"):
        made = subprocess.run([keygen, str(keys / name)], capture_output=True, text=True,
                              timeout=10)
        if made.returncode != 0:
            raise Failure(f"convoy-keygen {name} exited with status {made.returncode}: "
                          f"{made.stderr.strip()}")
    tasks = run_cluster(net, program, ["--strategy", "ps-sync", "--steps", "200", "--batch", "100",
                                       "--log-every", "100", "--ps-keys", str(keys)])
    value = expect_trained(tasks, "CURVE on, 2 authorized worker key(s)")
    return f"accuracy {value:.3f}"


def start_gloo_pair(net, program, steps, tasks):
    """Starts the two workers alone as a Gloo collective of `steps` steps into `tasks` and waits
    until worker 1 trains; False when the example has no convoy::gloo."""
    for index in (0, 1):
        tasks.append(Task(net, "worker", index,
                          [program, "--strategy", "multiworker", "--hidden", "100", "--steps",
                           str(steps), "--batch", "100", "--log-every", "250",
                           "--allow-plaintext", "--exchange-timeout-ms", str(GLOO_TIMEOUT_MS)],
                          config=workers_only_config(index)))
    if tasks[0].wait_for(r"has no convoy::gloo", 5) is not None:
        return False
    check(tasks[1].wait_for(r"After \d+ training steps", 30) is not None,
          "worker 1 did not train before the cut", tasks)
    return True


def gloo_cut_run(net, program):
    tasks = []
    try:
        if not start_gloo_pair(net, program, GLOO_CUT_STEPS, tasks):
            return "skipped: this build of the example has no convoy::gloo"
        net.link(("worker", 1), "down")
        cut = time.monotonic()
        lone = tasks[1].finish(GLOO_TIMEOUT_MS / 1000 + 20)
        lone_ended = time.monotonic() - cut
        chief = tasks[0].finish(GLOO_TIMEOUT_MS / 1000 + 90)
        chief_ended = time.monotonic() - cut
    finally:
        for t in tasks:
            t.kill()
        net.link(("worker", 1), "up")
    check(lone == 1, f"worker 1 exited with status {lone}, expected 1 (an error, not a hang ended "
          "by timeout(1) with 124)", tasks)
    check(chief == 0, f"worker 0 exited with status {chief}, expected 0: it goes on alone", tasks)
    alone = tasks[1].wait_for(
        rf"lost worker:0 at {SUBNET}\.2:\d+: 1 of 2 remain, not more than half", 0)
    check(alone is not None, "worker 1 did not stop as no quorum, naming worker 0", tasks)
    regrouped = tasks[0].wait_for(rf"the group of 2 lost worker:1 at {SUBNET}\.3:\d+; 1 go on", 0)
    check(regrouped is not None, "worker 0 did not say it goes on without worker 1", tasks)
    check(tasks[0].wait_for(r"test accuracy: ", 0) is not None, "worker 0 did not finish", tasks)
    return (f"worker 1 ended {lone_ended:.1f} s after the cut, worker 0 finished alone "
            f"{chief_ended:.1f} s after it:\n  [worker:1] {alone}\n  [worker:0] {regrouped}")


def gloo_heal_run(net, program):
    tasks = []
    try:
        if not start_gloo_pair(net, program, GLOO_HEAL_STEPS, tasks):
            return "skipped: this build of the example has no convoy::gloo"
        net.link(("worker", 1), "down")
        cut = time.monotonic()
        alone = tasks[0].wait_for(rf"the group of 2 lost worker:1 at {SUBNET}\.3:\d+; 1 go on",
                                  GLOO_TIMEOUT_MS / 1000 + 20)
        net.link(("worker", 1), "up")
        healed = time.monotonic() - cut
        check(alone is not None, "worker 0 did not go on alone after the cut", tasks)
        marks = len(tasks[1].output())
        statuses = [t.finish(RUN_LIMIT) for t in tasks]
    finally:
        for t in tasks:
            t.kill()
        net.link(("worker", 1), "up")
    for t, status in zip(tasks, statuses):
        check(status == 0, f"{t.name} exited with status {status}", tasks)
    shown = expect_lines(tasks, [
        (tasks[1], rf"convoy: worker:1 \(left behind by the group\) asks the group to take it in, "
                   rf"at {SUBNET}\.2:\d+", "worker 1 did not knock at worker 0's board"),
        (tasks[1], r"convoy: worker:1 joins as process 1 of 2", "worker 1 did not join"),
        (tasks[0], rf"convoy: the group of 1 takes in worker:1 at {SUBNET}\.3:\d+; 2 go on",
         "worker 0 did not take worker 1 in")])
    trained = [line for line in tasks[1].output()[marks:]
               if re.search(r"After \d+ training steps", line)]
    check(len(trained) > 0, "worker 1 trained no more after it joined again", tasks)
    return f"link up {healed:.1f} s after the cut:\n  " + "\n  ".join(shown)


def resolver_of_files_only(net, task):
    """Gives `task`'s namespace a name service switch that looks host names up in /etc/hosts
    alone (`ip netns exec` mounts /etc/netns/NAME/nsswitch.conf over /etc/nsswitch.conf): a name
    that is not there is unknown at once, as a DNS answer of 'no such name' makes it, and no query
    leaves the namespace. Returns the folder to remove afterwards."""
    folder = Path("/etc/netns") / net.hosts[task]
    if not folder.parent.exists():
        folder.parent.mkdir()
        net.made_etc_netns = True
    folder.mkdir(exist_ok=True)
    try:
        lines = Path("/etc/nsswitch.conf").read_text().splitlines()
    except OSError:
        lines = []
    lines = [line for line in lines if not line.startswith("hosts:")] + ["hosts: files"]
    (folder / "nsswitch.conf").write_text("\n".join(lines) + "\n")
    return folder


def unresolved_run(net, program):
    """A ps or a rank 0 whose host name does not resolve: the task must end at once with status 1,
    naming the peer and the host, instead of waiting out its connect or bootstrap timeout."""
    shown = []
    for what, job_index, config, options, peer, host in (
            ("a ps-sync worker", ("worker", 0),
             f'{{"cluster":{{"ps":["{UNKNOWN_PS}:{PORT}"],"worker":["{SUBNET}.2:{PORT}"]}},'
             f'"task":{{"type":"worker","index":0}}}}',
             ["--strategy", "ps-sync"], "ps:0", UNKNOWN_PS),
            ("a multiworker rank", ("worker", 1),
             f'{{"cluster":{{"worker":["{UNKNOWN_WORKER}:{PORT}","{SUBNET}.3:{PORT}"]}},'
             f'"task":{{"type":"worker","index":1}}}}',
             ["--strategy", "multiworker"], "rank 0", UNKNOWN_WORKER)):
        folder = resolver_of_files_only(net, job_index)
        task = None
        try:
            started = time.monotonic()
            task = Task(net, *job_index, [program, *options, "--steps", "10", "--batch", "100",
                                          "--allow-plaintext"], config=config)
            status = task.finish(UNRESOLVED_LIMIT)
            took = time.monotonic() - started
        finally:
            if task:
                task.kill()
            shutil.rmtree(folder, ignore_errors=True)
        if what == "a multiworker rank" and task.wait_for(r"has no convoy::gloo", 0) is not None:
            shown.append(f"{what}: skipped: this build of the example has no convoy::gloo")
            continue
        check(status == 1, f"{what} exited with status {status}, expected 1", [task])
        line = task.wait_for(rf"{re.escape(peer)}'s address '{re.escape(host)}:{PORT}' names host "
                             rf"'{re.escape(host)}', which does not resolve here", 0)
        check(line is not None, f"{what} did not name {peer}'s host", [task])
        check(took < UNRESOLVED_LIMIT - 5, f"{what} took {took:.1f} s to give up", [task])
        shown.append(f"{what} ended after {took:.1f} s: {line}")
    return "\n  " + "\n  ".join(shown)


def main():
    if len(sys.argv) < 3:
        print("usage: test_netns_cluster.py FASHION_MNIST CONVOY_KEYGEN [RUN...]", file=sys.stderr)
        return 2
    program, keygen, chosen = sys.argv[1], sys.argv[2], set(sys.argv[3:])
    if os.geteuid() != 0:
        print("test_netns_cluster: skipped: network namespaces need root")
        return SKIP
    if shutil.which("ip") is None or shutil.which("timeout") is None:
        print("test_netns_cluster: skipped: needs iproute2's ip and coreutils' timeout")
        return SKIP
    remove_stale_namespaces()
    net = Network()
    # The cleanup runs on SIGTERM and SIGINT too (ctest's timeout, Ctrl-C).
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: sys.exit(1))
    base = os.environ.get("CONVOY_TEST_TMP") or None
    if base:
        os.makedirs(base, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="convoy_netns_", dir=base))
    try:
        links = root_links()
        try:
            net.build()
        except RuntimeError as e:  # EPERM in a container without CAP_SYS_ADMIN, no veth module...
            print(f"test_netns_cluster: skipped: cannot make network namespaces: {e}")
            return SKIP
        if root_links() != links:
            print(f"test_netns_cluster: FAILED: the namespaces changed this one's interfaces: "
                  f"{links} became {root_links()}")
            return 1
        failed = 0
        for name, run in (("cut", lambda: cut_run(net, program)),
                          ("sync-cut", lambda: sync_cut_run(net, program)),
                          ("curve", lambda: curve_run(net, program, keygen, work / "keys")),
                          ("gloo-cut", lambda: gloo_cut_run(net, program)),
                          ("gloo-heal", lambda: gloo_heal_run(net, program)),
                          ("unresolved", lambda: unresolved_run(net, program))):
            if chosen and name not in chosen:
                continue
            started = time.monotonic()
            try:
                result = run()
                print(f"test_netns_cluster: {name}: passed in {time.monotonic() - started:.1f} s: "
                      f"{result}", flush=True)
            except Failure as e:
                failed += 1
                print(f"test_netns_cluster: {name}: FAILED after "
                      f"{time.monotonic() - started:.1f} s: {e}", flush=True)
        return 1 if failed else 0
    finally:
        net.remove()
        if "CONVOY_KEEP_TMP" not in os.environ:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
