"""The nemesis of the Jepsen-style test: seeded (`random.Random(seed)`), it kills (-9) and pauses
(SIGSTOP, later SIGCONT) worker processes and bookies at random moments, and loses ZooKeeper's answer
to a worker's next multi-operation (its commit: applied, but the worker sees a connection loss; each
worker reaches ZooKeeper through its own `DropProxy`), one fault at a time, and heals
each: a killed worker is started again (next incarnation), a killed bookie restarted and awaited, a
paused process continued (some pauses outlast the workers' ZooKeeper session). At most one bookie is
faulty at once, so with 3 bookies the workers' ledgers (ensemble 2, ack quorum 2) can always be placed:
progress stays possible. No fault outlasts the run by more than a moment. Every action is logged in
`actions` (printed when the check fails) so a run can be read next to the histories."""

from __future__ import annotations

import dataclasses
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bkledger.bookie.local.cluster import LocalCluster
from tests.integration.zk_drop_proxy import DropProxy

ROOT = Path(__file__).resolve().parents[3]


@dataclasses.dataclass
class Worker:
    """One worker process of the test, restarted under the same name with a new incarnation."""

    role: str
    name: str
    args: list[str]
    history: Path
    uri: str
    proxy: DropProxy | None = None             # the worker's way to ZooKeeper (`uri` names its port)
    incarnation: int = 0
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.incarnation += 1
        out = open(self.history.with_suffix(".out"), "ab")     # noqa: SIM115 - the child's stdout and stderr
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.jepsen.worker", self.role, self.uri, str(self.history),
             self.name, str(self.incarnation), *self.args],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        out.close()

    def output(self) -> str:
        path = self.history.with_suffix(".out")
        return path.read_text(errors="replace") if path.exists() else ""

    def wait_ready(self, timeout: float) -> None:
        """Until this incarnation printed READY (its client is up); AssertionError after `timeout`."""
        deadline = time.monotonic() + timeout
        while self.output().count("READY") < self.incarnation:
            assert self.proc is not None and self.proc.poll() is None, f"{self.name} exited:\n{self.output()}"
            assert time.monotonic() < deadline, f"{self.name} not ready within {timeout} s:\n{self.output()}"
            time.sleep(0.1)

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(30)

    def stop(self, timeout: float) -> bool:
        """SIGCONT + SIGTERM (a clean stop: producers flush); kill -9 after `timeout`. True if clean."""
        if self.proc is None or self.proc.poll() is not None:
            return True
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
            return True
        except subprocess.TimeoutExpired:
            self.kill()
            return False


@dataclasses.dataclass
class Nemesis:
    rng: random.Random
    cluster: LocalCluster
    workers: list[Worker]
    actions: list[str] = dataclasses.field(default_factory=list)
    start: float = dataclasses.field(default_factory=time.monotonic)

    def note(self, what: str) -> None:
        self.actions.append(f"{time.monotonic() - self.start:7.2f}s (at {time.time():.2f}) {what}")

    def run(self, seconds: float) -> None:
        """Faults one after another until `seconds` have passed; each fault healed before the next."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(self.rng.uniform(0.3, 1.5))
            fault, heal = self.pick()
            fault()
            time.sleep(max(0.3, min(self.hold(), deadline - time.monotonic())))
            heal()

    def hold(self) -> float:
        """How long a fault lasts: mostly short; one in four longer than the workers' ZooKeeper session
        (6 s: a paused worker's session expires) and than the add timeout (3 s: a paused bookie is
        replaced in its ensembles)."""
        return self.rng.uniform(6.5, 9.0) if self.rng.random() < 0.25 else self.rng.uniform(0.3, 2.5)

    def pick(self) -> tuple[Callable[[], None], Callable[[], None]]:
        kind = self.rng.choice(["kill-worker", "kill-worker", "pause-worker", "lose-answer", "kill-bookie",
                                "pause-bookie"])
        if kind == "lose-answer":
            worker = self.rng.choice([w for w in self.workers if w.proxy is not None] or self.workers)
            return lambda: self._lose_answer(worker), lambda: self._answer_again(worker)
        if kind.endswith("worker"):
            worker = self.rng.choice(self.workers)
            if kind == "kill-worker":
                return lambda: self._kill_worker(worker), lambda: self._start_worker(worker)
            return (lambda: self._signal_worker(worker, signal.SIGSTOP),
                    lambda: self._signal_worker(worker, signal.SIGCONT))
        index = self.rng.randrange(len(self.cluster.bookies))
        if kind == "kill-bookie":
            return lambda: self._kill_bookie(index), lambda: self._start_bookie(index)
        return (lambda: self._signal_bookie(index, signal.SIGSTOP),
                lambda: self._signal_bookie(index, signal.SIGCONT))

    def _kill_worker(self, worker: Worker) -> None:
        self.note(f"kill -9 {worker.name}.{worker.incarnation}")
        worker.kill()

    def _start_worker(self, worker: Worker) -> None:
        worker.start()
        self.note(f"start {worker.name}.{worker.incarnation}")

    def _signal_worker(self, worker: Worker, sig: int) -> None:
        self.note(f"{signal.Signals(sig).name} {worker.name}.{worker.incarnation}")
        worker.signal(sig)

    def _lose_answer(self, worker: Worker) -> None:
        if worker.proxy is not None:
            self.note(f"lose the answer to the next multi of {worker.name}.{worker.incarnation}")
            worker.proxy.dropped.clear()
            worker.proxy.arm(lambda: None)

    def _answer_again(self, worker: Worker) -> None:
        if worker.proxy is not None:
            worker.proxy.armed = None
            lost = worker.proxy.dropped.is_set()
            self.note(f"answers to {worker.name} pass again ({'one was lost' if lost else 'none was lost'})")

    def _kill_bookie(self, index: int) -> None:
        self.note(f"kill -9 bookie {index}")
        self.cluster.kill_bookie(index)

    def _start_bookie(self, index: int) -> None:
        self.cluster.start_bookie(index)
        self.cluster.wait_registered(90.0)
        self.note(f"bookie {index} restarted and registered")

    def _signal_bookie(self, index: int, sig: int) -> None:
        self.note(f"{signal.Signals(sig).name} bookie {index}")
        self.cluster.signal_bookie(index, sig)
