"""Client processes for bench.log_clients: 8 producers and one LogWriter, each in a process of its own.

Producers in threads of one process would share its GIL, and a record's envelope, its future and the
batching thread are Python work: the aggregate would measure one core's Python, not the log. So each
producer is a process (spawned: a fresh interpreter, no gRPC threads forked) with a BookKeeper client of
its own, and the LogWriter they are compared to is a process too (same cost of being one). A worker
takes commands from its queue until it gets None:

- ("produce", log, records, size): open a producer of `log`, wait at the barrier with the others, send
  `records` records of `size` bytes as fast as it can, flush; answer (start, end) on CLOCK_MONOTONIC
  (system-wide, so the parent takes the aggregate over max(end) - min(start)).
- ("paced", log, rate, records, size): the same at `rate` records/s (open loop); answer each record's
  commit latency: from its scheduled send to its future's Position (its batch's ledger in the log).
- ("write", log, records, size): one LogWriter (envelope 1, as a producer's records) appends the same
  records pipelined and waits for every acknowledgement; answer (start, end).
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
import traceback
from concurrent.futures import Future
from typing import Any

Command = tuple[Any, ...] | None


def worker(uri: str, commands: Any, results: Any, barrier: Any) -> None:
    """The loop of one worker process; every answer is (kind, payload) or ("error", traceback)."""
    from bkledger.client import BookKeeper

    try:
        with BookKeeper(uri) as bk:
            while (command := commands.get()) is not None:
                try:
                    results.put(_handle(bk, command, barrier))
                except Exception:          # the parent reports it; the worker stays for the next command
                    results.put(("error", traceback.format_exc()))
                    barrier.abort()
    except Exception:
        results.put(("error", traceback.format_exc()))


def _handle(bk: Any, command: tuple[Any, ...], barrier: Any) -> tuple[str, Any]:
    kind = command[0]
    if kind == "produce":
        return kind, _produce(bk, barrier, *command[1:])
    if kind == "paced":
        return kind, _paced(bk, barrier, *command[1:])
    if kind == "write":
        return kind, _write(bk, *command[1:])
    raise ValueError(f"unknown command {kind!r}")


def _produce(bk: Any, barrier: Any, log: str, records: int, size: int) -> tuple[float, float]:
    value = os.urandom(size)
    with bk.open_log_producer(log) as producer:
        barrier.wait(120)
        start = time.monotonic()
        futures = [producer.send(value) for _ in range(records)]
        producer.flush()
        for future in futures:
            future.result(0)            # settled by flush: raises if the record was not committed
        return start, time.monotonic()


def _paced(bk: Any, barrier: Any, log: str, rate: float, records: int, size: int) -> list[float]:
    value = os.urandom(size)
    latencies: list[float] = []
    lock = threading.Lock()

    def done_at(scheduled: float) -> Any:
        def callback(future: Future[Any]) -> None:
            if future.exception() is None:
                with lock:
                    latencies.append(time.monotonic() - scheduled)
        return callback

    with bk.open_log_producer(log) as producer:
        barrier.wait(120)
        start = time.monotonic()
        futures = []
        for i in range(records):
            scheduled = start + i / rate
            time.sleep(max(0.0, scheduled - time.monotonic()))    # pacing the open loop, not a wait
            future = producer.send(value)
            future.add_done_callback(done_at(scheduled))
            futures.append(future)
        producer.flush()
        for future in futures:
            future.result(0)
    with lock:
        return list(latencies)


def _write(bk: Any, log: str, records: int, size: int) -> tuple[float, float]:
    value = os.urandom(size)
    with bk.open_log_writer(log, envelope=1) as writer:
        start = time.monotonic()
        futures = [writer.append_async(value) for _ in range(records)]
        for future in futures:
            future.result(120)
        return start, time.monotonic()


class Workers:
    """`count` producer processes sharing a barrier, and one writer process; `stop()` ends them."""

    def __init__(self, uri: str, count: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.barrier = ctx.Barrier(count)
        self.results: Any = ctx.Queue()
        self.queues: list[Any] = [ctx.Queue() for _ in range(count + 1)]
        self.procs = [ctx.Process(target=worker, args=(uri, q, self.results, self.barrier), daemon=True)
                      for q in self.queues]
        for proc in self.procs:
            proc.start()

    def producers(self, command: tuple[Any, ...], timeout: float) -> list[Any]:
        """Give every producer process `command`; their answers."""
        self.barrier.reset()
        for queue in self.queues[:-1]:
            queue.put(command)
        return self._answers(len(self.queues) - 1, timeout)

    def writer(self, command: tuple[Any, ...], timeout: float) -> Any:
        self.queues[-1].put(command)
        return self._answers(1, timeout)[0]

    def _answers(self, count: int, timeout: float) -> list[Any]:
        deadline = time.monotonic() + timeout
        answers = []
        for _ in range(count):
            kind, payload = self.results.get(timeout=max(0.1, deadline - time.monotonic()))
            if kind == "error":
                raise RuntimeError(f"a client process failed:\n{payload}")
            answers.append(payload)
        return answers

    def stop(self) -> None:
        for queue in self.queues:
            queue.put(None)
        for proc in self.procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
                proc.join(10)
