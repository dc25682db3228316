"""Log writer leases in ZooKeeper: ephemeral znodes that say "a live writer appends to this ledger".

A lease is `{root}/logwriters/<log>/<ledger_id>` (path from `client.meta.layout`), created EPHEMERAL by the
writer's ZooKeeper session, so it disappears when that session ends: when the writer's process dies, after
the session timeout. Its data is a small JSON object naming the holder (host, pid, since). Like Pulsar's
and DistributedLog's writer locks, it is only a liveness signal: the log's ledger list (CAS) and fencing
stay what decides who writes. No policy here: `client.log.liveness` decides what a lease means.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping

from bkledger.client.meta.errors import MetadataFormatError, MetadataStoreError, NoSuchNodeError, ZNodeExistsError
from bkledger.client.meta.store import MetadataStore


def lease_path(store: MetadataStore, log: str, ledger_id: int) -> str:
    return store.layout.log_writer_lease(log, ledger_id)


def hold(store: MetadataStore, log: str, ledger_id: int, holder: Mapping[str, str | int]) -> None:
    """Create this session's lease on `ledger_id` of `log` (a lease already there is kept)."""
    with contextlib.suppress(ZNodeExistsError):
        store.create(lease_path(store, log, ledger_id), json.dumps(dict(holder), sort_keys=True).encode(),
                     ephemeral=True, makepath=True)


def release(store: MetadataStore, log: str, ledger_id: int) -> None:
    """Delete the lease (absent already: nothing to do)."""
    with contextlib.suppress(NoSuchNodeError):
        store.delete(lease_path(store, log, ledger_id))


def holder(store: MetadataStore, log: str, ledger_id: int) -> dict[str, str] | None:
    """Who holds the lease on `ledger_id` of `log`, or None if nobody does (no live writer there)."""
    got = store.get(lease_path(store, log, ledger_id))
    if got is None:
        return None
    try:
        data = json.loads(got[0].decode() or "{}")
    except ValueError as exc:
        raise MetadataFormatError(f"log writer lease of {log!r} ledger {ledger_id} is not JSON: {exc}") from exc
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def forget_log(store: MetadataStore, log: str) -> None:
    """Remove the log's (empty) lease directory once the log is deleted; live leases are left alone."""
    with contextlib.suppress(NoSuchNodeError, MetadataStoreError):
        store.delete(store.layout.log_writers + "/" + log)
