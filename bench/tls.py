"""tls: replicated add throughput with TLS + client certificates, against plaintext in the same run.

Two clusters of three bookies on the same ZooKeeper and disk: the run's plaintext `cluster3` and a
`local up --secure` one (TLS with tlsClientAuthentication=true, ZooKeeper ACLs). One client, one ledger
(E=3 Qw=3 Qa=2), 1 KiB entries, fed by one thread in a closed loop (at most 20,000 adds in flight), for
the run's add time; the two are measured alternately (plaintext, TLS, plaintext, TLS outside tiny mode) and
the best round of each is kept, so a burst of load from elsewhere hurts both alike. The limit of the TLS
figure is the plaintext one: the ratio is what TLS costs (aim >= 0.8).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future

from bench.bookie_session import CONF_OVERRIDES
from bench.cluster3 import ACK_QUORUM, ENSEMBLE, ENTRY_SIZE, PASSWORD, WRITE_QUORUM, ClientSizes, cluster_session
from bench.core import MB, Context, Row, size_label
from bkledger.bookie.local.cluster import LocalCluster
from bkledger.client import BookKeeper
from bkledger.client.config import ClientConfig
from bkledger.client.ledger_handle import LedgerHandle

NAME = "tls"
IN_FLIGHT = 20_000
ACK_TIMEOUT = 120.0
_KEY = "tls_cluster"


def secure_cluster(ctx: Context) -> LocalCluster:
    """Three TLS bookies beside the run's plaintext cluster (same ZooKeeper, another root)."""
    found = ctx.shared.get(_KEY)
    if isinstance(found, LocalCluster):
        return found
    plain = cluster_session(ctx).cluster
    cluster = LocalCluster(ctx.data_dir / "tls-cluster")
    ctx.stack.callback(cluster.down)
    cluster.up(3, dict(CONF_OVERRIDES), zookeeper_port=plain.zk_port, root="/tls/ledgers", secure=True)
    ctx.shared[_KEY] = cluster
    return cluster


def _feed(handle: LedgerHandle, payload: bytes, deadline: float, done: list[int], last: list[Future[int]]) -> None:
    count, future = 0, None
    while time.perf_counter() < deadline:
        future = handle.add_entry_async(payload)
        count += 1
    done.append(count)
    if future is not None:
        last.append(future)


def adds_per_second(uri: str, options: Mapping[str, str], seconds: float) -> float:
    """Acknowledged adds/s of one ledger fed by one thread for `seconds` (connection set-up excluded)."""
    payload = os.urandom(ENTRY_SIZE)
    with BookKeeper(uri, config=ClientConfig.from_options({"maxOutstandingAdds": IN_FLIGHT, **options})) as bk:
        handle = bk.create_ledger(ENSEMBLE, WRITE_QUORUM, ACK_QUORUM, password=PASSWORD)
        handle.add_entry(payload)                       # connections (and TLS handshakes) are made here
        done: list[int] = []
        last: list[Future[int]] = []
        start = time.perf_counter()
        thread = threading.Thread(target=_feed, args=(handle, payload, start + seconds, done, last))
        thread.start()
        thread.join()
        for future in last:
            future.result(ACK_TIMEOUT)
        elapsed = time.perf_counter() - start
        handle.close()
        if handle.last_entry_id != done[0]:
            raise RuntimeError(f"ledger {handle.ledger_id} closed at entry {handle.last_entry_id}, "
                               f"{done[0] + 1} adds were acknowledged")
    return done[0] / elapsed


def run(ctx: Context) -> list[Row]:
    seconds = ClientSizes.of(ctx).add_seconds / (2 if ctx.settings.mode == "full" else 1)
    plain = cluster_session(ctx)
    secure = secure_cluster(ctx)
    rounds = 1 if ctx.settings.mode == "tiny" else 2
    plain_rates, tls_rates = [], []
    for _ in range(rounds):
        plain_rates.append(adds_per_second(plain.uri, {}, seconds))
        tls_rates.append(adds_per_second(secure.metadata_service_uri, secure.client_options, seconds))
    plain_best, tls_best = max(plain_rates), max(tls_rates)
    label = f"1 writer, E={ENSEMBLE} Qw={WRITE_QUORUM} Qa={ACK_QUORUM}, {size_label(ENTRY_SIZE)}"
    why = f"plaintext adds to 3 bookies, same run, best of {rounds} (aim >= 0.8)"
    return [
        Row(NAME, f"TLS + client certificates, {label}: entries/s", round(tls_best), "entries/s", round(plain_best),
            why),
        Row(NAME, f"TLS + client certificates, {label}: payload MB/s", tls_best * ENTRY_SIZE / MB, "MB/s",
            plain_best * ENTRY_SIZE / MB, why),
    ]
