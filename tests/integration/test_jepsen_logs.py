"""A Jepsen-style check of producers, transactions and cursors on real processes (issue 44 item 5).

Three producers (`bk.open_log_producer`) append self-describing records to log A; two consume-transform-
produce services read A with cursors and, per batch, append to B and C and acknowledge their cursor in one
`bk.transaction()`; a reader with a cursor records what it processed before each ack. Every worker is a
real process writing its history (invoke / ok / fail / info, `tests.integration.jepsen.history`). A seeded
nemesis kills (-9) and pauses (SIGSTOP/SIGCONT) workers and bookies at random moments, and loses
ZooKeeper's answers to workers' commits (applied, but seen as a connection loss). After healing, the
checker (`tests.integration.jepsen.checker`) reads every log to its end and finds no lost acknowledged
record, no duplicate, nothing of a failed transaction, no torn transaction, no cursor ahead of what its
consumer processed, and services whose cursors agree with their outputs; and, once healed, every worker
stops within a bound when asked (a producer's flush, a transaction's commit never hang).

    JEPSEN_SEED=1234 JEPSEN_SECONDS=300 pytest tests/integration/test_jepsen_logs.py    # replay, longer
"""

from __future__ import annotations

import json
import os
import random
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from bkledger.client import BookKeeper
from bkledger.client.log.cursors import read_cursor
from tests.integration.jepsen import checker
from tests.integration.jepsen.history import read_histories
from tests.integration.jepsen.nemesis import Nemesis, Worker
from tests.integration.jepsen.worker import ENSEMBLE
from tests.integration.zk_drop_proxy import DropProxy

DEFAULT_SECONDS = 20.0
PRODUCERS = ("p0", "p1", "p2")
SERVICES = ("svc0", "svc1")
READERS = ("rd0",)


def seed_and_seconds() -> tuple[int, float]:
    seed = int(os.environ.get("JEPSEN_SEED") or random.SystemRandom().randrange(1 << 32))
    return seed, float(os.environ.get("JEPSEN_SECONDS") or DEFAULT_SECONDS)


def workers(uri: str, zk_port: int, tmp: Path, logs: tuple[str, str, str]) -> list[Worker]:
    """The workers, each reaching ZooKeeper through a DropProxy of its own (the nemesis loses answers)."""
    a, b, c = logs
    roles = [*(("producer", n, [a]) for n in PRODUCERS), *(("service", n, [a, b, c]) for n in SERVICES),
             *(("reader", n, [a]) for n in READERS)]
    made = []
    for role, name, args in roles:
        proxy = DropProxy(zk_port)
        via = re.sub(r":\d+/", f":{proxy.port}/", uri, count=1)
        made.append(Worker(role, name, args, tmp / f"{name}.jsonl", via, proxy))
    return made


def errors_seen(output: str) -> dict[str, int]:
    """How many times a worker met each error it retried (its stderr: `what: ErrorType: message`)."""
    found = re.findall(r"^\w+: (\w+Error): ", output, flags=re.MULTILINE)
    return dict(Counter(found))


def read_log(bk: BookKeeper, name: str) -> list[checker.Stored]:
    """Every record of the log, to its end, decoded (None: not a record of this test)."""
    if name not in bk.list_logs():
        return []
    out = []
    with bk.open_log_reader(name) as reader:
        for record in reader.read(timeout=1.5):
            try:
                value = json.loads(record.value)
            except ValueError:
                value = None
            out.append(checker.Stored((record.ledger_id, record.entry_id), value))
    return out


def observe(bk: BookKeeper, logs: tuple[str, str, str], note: Callable[[str], None]) -> checker.Observed:
    """What the cluster holds after healing: the three logs read to their ends, the cursors of A."""
    a, b, c = logs
    cursors = {}
    for name in (*SERVICES, *READERS):
        got = read_cursor(bk.store, a, name)
        pos = None if got is None else got[0].position
        cursors[name] = None if pos is None else (pos.ledger_id, pos.entry_id)
    read = {}
    for name in logs:
        started = time.monotonic()
        read[name] = read_log(bk, name)
        note(f"read {len(read[name])} records of {name} in {time.monotonic() - started:.1f} s")
    return checker.Observed(read[a], read[b], read[c], cursors, frozenset(SERVICES))


def test_producers_transactions_and_cursors_survive_the_nemesis(cluster_factory, bk_factory, zookeeper,
                                                                tmp_path: Path):
    """R27: under kill -9 and SIGSTOP of producers, services, readers and bookies, no acknowledged record
    or transaction is lost, nothing is duplicated, nothing of a failed transaction is visible, B and C hold
    a transaction together or not at all, and no cursor is ahead of what its consumer processed."""
    seed, seconds = seed_and_seconds()
    print(f"jepsen seed={seed} seconds={seconds} (JEPSEN_SEED={seed} replays the nemesis)")
    cluster = cluster_factory(3)
    uri = cluster.metadata_service_uri
    bk = bk_factory(uri)
    tag = uuid.uuid4().hex[:8]
    logs = (f"jepsen-a-{tag}", f"jepsen-b-{tag}", f"jepsen-c-{tag}")
    bk.open_log_producer(logs[0], ensemble_size=ENSEMBLE).close()             # creates A before its readers start
    crew = workers(uri, zookeeper.port, tmp_path, logs)
    nemesis = Nemesis(random.Random(seed), cluster, crew)
    try:
        for worker in crew:
            worker.start()
        for worker in crew:
            worker.wait_ready(120.0)                            # six interpreters start slowly under load
        nemesis.note("all workers ready")
        nemesis.run(seconds)
        time.sleep(3.0)                                         # healed: let everyone make progress
        nemesis.note("stopping the workers")
    finally:
        clean = {w.name: w.stop(45.0) for w in crew}
        for worker in crew:
            if worker.proxy is not None:
                worker.proxy.close()
    events = read_histories([w.history for w in crew])
    nemesis.note("workers stopped")
    found = checker.check(events, observe(bk, logs, nemesis.note))
    nemesis.note("logs read and checked")
    summary = checker.summary(events)
    errors = {w.name: errors_seen(w.output()) for w in crew}
    report = (f"seed={seed} summary={summary} clean stops={clean}\nerrors the workers retried: {errors}\n"
              "nemesis:\n  " + "\n  ".join(nemesis.actions))
    print(report)
    assert not found, f"{len(found)} anomalies:\n" + "\n".join(map(str, found[:30])) + "\n" + report
    assert summary.get("send", Counter())["ok"] > 0 and summary.get("txn", Counter())["ok"] > 0, report
    assert all(clean.values()), f"a worker did not stop within 45 s of SIGTERM (a hang):\n{report}"
