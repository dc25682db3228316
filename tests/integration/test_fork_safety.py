"""A process holding a client forks safely (issue 46, item 3; reference wave3.md section O).

A process with a BookKeeper client forks whenever it starts a SparkSession (PySpark launches the JVM
through `subprocess` with a `preexec_fn`) or a `multiprocessing` child (the default start method on Linux).
gRPC's fork handlers used to make such a child die with SIGSEGV while appends were in flight. The scenario
runs in a process of its own (`python -m tests.integration.test_fork_safety URI`), so that bkledger is
imported first, as in a user's program, and a crash or a hang there cannot take pytest with it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FORK_PARK_MAX_S = 30.0
FORKS = 20
BOUND = 240.0        # the whole scenario, SparkSession included (about 30 s here when the machine is idle)


@pytest.mark.integration
def test_fork_children_and_a_spark_session_while_appending(cluster_factory):
    """Issue 46: while a thread appends to a log, 20 multiprocessing fork children exit 0 (each finds
    the inherited client refusing at once with ClientForkedError), a SparkSession starts in the same
    process, and the appends go on in the parent."""
    cluster = cluster_factory(3)
    env = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}   # as a user's shell has it
    proc = subprocess.run([sys.executable, "-m", "tests.integration.test_fork_safety", cluster.metadata_service_uri],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=BOUND, check=False)
    assert proc.returncode == 0, f"scenario failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-4000:]}"
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["exit_codes"] == [0] * FORKS
    assert report["child_saw"] == ["ClientForkedError"] * FORKS
    assert report["appends_after_spark"] > report["appends_before_spark"]
    assert report["append_error"] is None


def _child(queue: object, writer: object) -> None:
    """A fork child: the inherited client must refuse at once, typed (never hang, never crash)."""
    from bkledger.client.errors import ClientForkedError

    try:
        writer.append(b"from the child", timeout=5)      # type: ignore[attr-defined]
        saw = "appended"
    except ClientForkedError:
        saw = "ClientForkedError"
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        saw = repr(exc)
    queue.put(saw)                                       # type: ignore[attr-defined]


def _spark() -> object:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    return (SparkSession.builder.master("local[1]").appName("bkledger-fork-test")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .getOrCreate())


def main(uri: str) -> None:
    import multiprocessing

    from bkledger.client import BookKeeper  # first: before anything imports grpc

    bk = BookKeeper(uri)
    writer = bk.open_log_writer("forked", create=True)
    appended = [0]
    failure: list[str] = []
    stop = threading.Event()

    def append_loop() -> None:
        try:
            while not stop.is_set():
                writer.append(b"x" * 100, timeout=30)
                appended[0] += 1
        except BaseException as exc:  # noqa: BLE001 - reported
            failure.append(repr(exc))

    thread = threading.Thread(target=append_loop, daemon=True)
    thread.start()
    while appended[0] < 10 and not failure:
        time.sleep(0.01)
    ctx = multiprocessing.get_context("fork")
    codes, saw = [], []
    for _ in range(FORKS):
        queue = ctx.Queue()
        child = ctx.Process(target=_child, args=(queue, writer))
        child.start()
        child.join(30)
        codes.append(child.exitcode)
        saw.append(queue.get(timeout=1) if child.exitcode == 0 else "died")
    before = appended[0]
    session = _spark()
    session.range(3).count()                         # type: ignore[attr-defined]
    spark_done = appended[0]
    deadline = time.monotonic() + 30
    while appended[0] < spark_done + 10 and not failure and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    thread.join(30)
    session.stop()                                   # type: ignore[attr-defined]
    writer.close()
    bk.close()
    print(json.dumps({"exit_codes": codes, "child_saw": saw, "appends_before_spark": before,
                      "appends_after_spark": appended[0], "append_error": failure[0] if failure else None}))


if __name__ == "__main__":
    main(sys.argv[1])


def test_fork_parks_the_client_loop_and_the_child_refuses_at_once():
    """Issue 46: at fork the client loop is parked (no callback of it runs while the process is copied)
    and resumes in the parent; in the child the runtime refuses every use with ClientForkedError at once
    (never a hang: its loop thread was not copied) and stopping it there does nothing."""
    from bkledger.client.errors import ClientForkedError
    from bkledger.client.runtime import EventLoopThread

    async def answer() -> int:
        return 42

    runtime = EventLoopThread("fork-test")
    try:
        ticks: list[float] = []

        async def ticking() -> None:
            while True:
                ticks.append(time.monotonic())
                await asyncio.sleep(0.001)

        runtime.submit(ticking())
        _until(lambda: len(ticks) >= 3)
        runtime._park_for_fork()                             # what the before-fork hook does
        parked = len(ticks)
        time.sleep(0.05)                                     # an absence: nothing to await
        assert len(ticks) == parked, "the client loop ran while parked for a fork"
        runtime._resume_after_fork()
        _until(lambda: len(ticks) > parked)
        pid = os.fork()
        if pid == 0:                                         # the child: report through the exit code
            code = 3
            try:
                runtime.run(answer(), 1)
            except ClientForkedError:
                code = 0 if runtime.forked else 4
            runtime.stop()
            os._exit(code)
        forked_at = time.monotonic()
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert runtime.run(answer(), 5) == 42 and not runtime.forked     # the parent's loop goes on
        gaps = [b - a for a, b in zip(ticks, ticks[1:], strict=False)]
        _until(lambda: ticks[-1] > forked_at)
        assert max(gaps) < FORK_PARK_MAX_S
    finally:
        runtime.stop()


def _until(condition: object, bound: float = 5.0) -> None:
    deadline = time.monotonic() + bound
    while not condition():                                   # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.001)


def test_a_client_warns_when_grpc_came_first_with_fork_handlers_on():
    """Issue 46: gRPC reads GRPC_ENABLE_FORK_SUPPORT once, at its import; when a program imported grpc
    before bkledger without setting it, bkledger cannot turn the fork handlers off: its first client
    says so (and what to do) instead of letting a later fork crash unexplained. With bkledger first,
    no warning."""
    env = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    script = ("import grpc, logging; logging.basicConfig(); from bkledger.client.runtime import EventLoopThread; "
              "EventLoopThread().stop()")
    first = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=60, check=True)
    assert "GRPC_ENABLE_FORK_SUPPORT=0" in first.stderr
    script = ("import logging; logging.basicConfig(); from bkledger.client.runtime import EventLoopThread; "
              "import grpc; EventLoopThread().stop()")
    later = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=60, check=True)
    assert "GRPC_ENABLE_FORK_SUPPORT" not in later.stderr
