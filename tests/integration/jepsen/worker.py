"""The Jepsen-style test's workers, each a real process that writes its history (`history`) as it goes:

    python -m tests.integration.jepsen.worker producer URI HISTORY NAME INCARNATION LOG_A
    python -m tests.integration.jepsen.worker service  URI HISTORY NAME INCARNATION LOG_A LOG_B LOG_C
    python -m tests.integration.jepsen.worker reader   URI HISTORY NAME INCARNATION LOG_A

- producer: `bk.open_log_producer(LOG_A, NAME)` (a stable producer id across restarts) sends records
  `{"w": "NAME.INCARNATION", "s": seq}`; each send is invoked, then ok (with its position), fail or info.
- service: reads A with the cursor NAME and, per batch, in ONE `bk.transaction()` appends each record's
  transform to B and C and acknowledges the cursor past the batch; it records the batch as processed
  first, then the transaction's invoke and outcome. After a failed or unknown transaction it re-opens its
  reader at the cursor (the batch is processed again, by a new transaction).
- reader: reads A with the cursor NAME, records each batch as processed, then acks it.

SIGTERM stops a worker cleanly (a producer flushes first); kill -9 and SIGSTOP are the nemesis's.
"""

from __future__ import annotations

import functools
import json
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from bkledger.client import BookKeeper
from bkledger.client.config import ClientConfig
from bkledger.client.errors import ClientClosedError
from bkledger.client.log.core.meta import Position
from bkledger.client.log.reader import LogReader
from bkledger.client.log.transaction import TransactionOutcomeUnknownError
from bkledger.client.meta.errors import MetadataStoreError
from tests.integration.jepsen.history import History

CLIENT = {"addEntryTimeoutSec": 3.0, "readTimeout": 3.0, "fenceTimeout": 3.0, "zkTimeout": 6.0}
ENSEMBLE = 2                    # ensemble 2, write and ack quorum 2: one bookie of 3 may be down
IN_FLIGHT = 100
SEND_PAUSE_S = 0.03
SERVICE_BATCH = 20
stopping = threading.Event()


def _on_term(*_: object) -> None:
    stopping.set()


def _pos(position: Position | None) -> list[int] | None:
    return None if position is None else [position.ledger_id, position.entry_id]


def _complain(what: str, exc: BaseException) -> None:
    """One stderr line per error a worker retries: `what: ErrorType: message | where` (the client's
    innermost frames, to tell a known retry from a new failure)."""
    frames = [f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in traceback.extract_tb(exc.__traceback__)]
    print(f"{what}: {type(exc).__name__}: {exc} | {' < '.join(reversed(frames[-4:]))}", file=sys.stderr, flush=True)


def _outcome(exc: BaseException) -> str:
    """fail if the producer's error says nothing was appended; info if ZooKeeper's answer was unknown."""
    return "info" if isinstance(exc, (MetadataStoreError, ClientClosedError)) else "fail"


def run_producer(bk: BookKeeper, hist: History, log_a: str) -> None:
    writer = f"{hist.worker}.{hist.incarnation}"
    producer = bk.open_log_producer(log_a, hist.worker, max_records=50, linger_ms=20, delivery_timeout_s=30.0,
                                    ensemble_size=ENSEMBLE, write_quorum=ENSEMBLE, ack_quorum=ENSEMBLE)
    slots = threading.Semaphore(IN_FLIGHT)

    def settled(op: str, fut: Future[Position]) -> None:
        slots.release()
        exc = fut.exception()
        if exc is None:
            hist.write("ok", "send", op=op, pos=_pos(fut.result()))
        else:
            hist.write(_outcome(exc), "send", op=op, error=f"{type(exc).__name__}: {exc}"[:300])

    seq = 0
    while not stopping.is_set():
        if not slots.acquire(timeout=0.5):
            continue
        op = f"{writer}.{seq}"
        hist.write("invoke", "send", op=op, id=[writer, seq])
        value = json.dumps({"w": writer, "s": seq}).encode()
        producer.send(value, key=writer.encode()).add_done_callback(functools.partial(settled, op))
        seq += 1
        time.sleep(SEND_PAUSE_S)
    producer.close(timeout=30.0)


def _retrying(what: str, call: Callable[[], LogReader]) -> LogReader:
    """Open a reader, again after a failure (a bookie down, ZooKeeper slow), until stopped."""
    while True:
        try:
            return call()
        except Exception as exc:    # noqa: BLE001 - logged, tried again: the nemesis causes these
            _complain(what, exc)
            if stopping.wait(0.3):
                raise SystemExit(0) from None


def _ids(batch: list[Any]) -> list[list[Any]]:
    out = []
    for record in batch:
        value = json.loads(record.value)
        out.append([value["w"], value["s"]])
    return out


def run_service(bk: BookKeeper, hist: History, log_a: str, log_b: str, log_c: str) -> None:
    cursor = hist.worker
    reader = _retrying("open", lambda: bk.open_log_reader(log_a, cursor=cursor))
    count = 0
    while not stopping.is_set():
        try:
            batch = reader.read_batch(SERVICE_BATCH, timeout=0.5)
        except Exception as exc:    # noqa: BLE001 - a read failed under the nemesis: start again at the cursor
            _complain("read", exc)
            reader.close()
            reader = _retrying("open", lambda: bk.open_log_reader(log_a, cursor=cursor))
            continue
        if not batch:
            continue
        ids, pos = _ids(batch), reader.position
        txid = f"{hist.worker}-{hist.incarnation}-{count}"
        count += 1
        hist.write("ok", "process", cursor=cursor, pos=_pos(pos), ids=ids)
        hist.write("invoke", "txn", op=txid, txid=txid, cursor=cursor, src=ids, ack=_pos(pos))
        if not _transaction(bk, hist, txid, cursor, ids, (log_a, log_b, log_c), pos):
            reader.close()
            reader = _retrying("open", lambda: bk.open_log_reader(log_a, cursor=cursor))
    reader.close()


def _transaction(bk: BookKeeper, hist: History, txid: str, cursor: str, ids: list[list[Any]],
                 logs: tuple[str, str, str], pos: Position | None) -> bool:
    """Run one transaction; True if it committed."""
    log_a, log_b, log_c = logs
    try:
        with bk.transaction(txid, ensemble_size=ENSEMBLE, write_quorum=ENSEMBLE, ack_quorum=ENSEMBLE) as tx:
            for rid in ids:
                for name, out in ((log_b, "B"), (log_c, "C")):
                    tx.append(name, json.dumps({"tx": txid, "svc": cursor, "src": rid, "out": out}).encode())
            assert pos is not None
            tx.ack(log_a, cursor, pos)
    except TransactionOutcomeUnknownError as exc:
        hist.write("info", "txn", op=txid, error=str(exc)[:300])
        return False
    except Exception as exc:    # noqa: BLE001 - every other error leaves nothing of the transaction applied
        hist.write("fail", "txn", op=txid, error=f"{type(exc).__name__}: {exc}"[:300])
        return False
    hist.write("ok", "txn", op=txid)
    return True


def run_reader(bk: BookKeeper, hist: History, log_a: str) -> None:
    cursor = hist.worker
    reader = _retrying("open", lambda: bk.open_log_reader(log_a, cursor=cursor))
    count = 0
    while not stopping.is_set():
        try:
            batch = reader.read_batch(100, timeout=0.5)
            if not batch:
                continue
            pos = reader.position
            hist.write("ok", "process", cursor=cursor, pos=_pos(pos), ids=_ids(batch))
            op = f"{hist.worker}.{hist.incarnation}.ack{count}"
            count += 1
            hist.write("invoke", "ack", op=op, cursor=cursor, pos=_pos(pos))
            reader.ack(pos)
            hist.write("ok", "ack", op=op)
        except Exception as exc:    # noqa: BLE001 - the ack's outcome is unknown; start again at the cursor
            _complain("reader", exc)
            reader.close()
            reader = _retrying("open", lambda: bk.open_log_reader(log_a, cursor=cursor))
    reader.close()


def main(argv: list[str]) -> None:
    role, uri, path, name, incarnation, *logs = argv
    signal.signal(signal.SIGTERM, _on_term)
    hist = History(Path(path), name, int(incarnation))
    bk = BookKeeper(uri, config=ClientConfig.from_options(CLIENT))
    print("READY", flush=True)
    try:
        if role == "producer":
            run_producer(bk, hist, logs[0])
        elif role == "service":
            run_service(bk, hist, logs[0], logs[1], logs[2])
        elif role == "reader":
            run_reader(bk, hist, logs[0])
        else:
            raise SystemExit(f"unknown role {role!r}")
    finally:
        print("STOPPED", flush=True)
        bk.close()
        hist.close()


if __name__ == "__main__":
    main(sys.argv[1:])
