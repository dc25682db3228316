"""The metadata store: ledger metadata, ledger ids, the bookie registry and cookies in ZooKeeper.

Mirrors BookKeeper's ZooKeeper metadata driver: `initnewcluster` (root, available, readonly,
INSTANCEID in one multi-op; LAYOUT; cookies; idgen), the ledger id generators (ZkLedgerIdGenerator and
LongZkLedgerIdGenerator), the ledger manager (create fails if the znode exists, every update is a
compare-and-swap on the znode version, R2, with THE one CAS update loop `update_ledger`), the bookie
registration manager (ephemeral znodes under `available/` and `available/readonly/`) and cookies (R24).
Paths come from `client.meta.layout`, bytes from `client.meta.serde`, the session, retries and the
generic znode helpers (paths relative to the ledgers root) from `client.meta.zksession`.
Blocking and thread-safe.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from bkledger.client.meta import layout as lay
from bkledger.client.meta import serde
from bkledger.client.meta.errors import (
    LayoutMismatchError,
    LedgerExistsError,
    MetadataFormatError,
    MetadataStoreError,
    MetadataVersionError,
    NoSuchLedgerError,
    NoSuchNodeError,
    RegistrationAbandonedError,
    UpdateConflictError,
)
from bkledger.client.meta.zkauth import ZkAuth
from bkledger.client.meta.zksession import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Watch,
    ZkSession,
    ZnodeStat,
)
from bkledger.client.protocol.metadata import LedgerMetadata
from bkledger.proto import formats_pb2 as fpb

_SEQ_LIMIT = 2**31 - 1          # ZooKeeper's sequence counter is a signed 32-bit int
_HOB_KEEP = 3                   # LongZkLedgerIdGenerator keeps the newest 3 HOB directories
DEFAULT_UPDATE_ATTEMPTS = 100
METADATA_BATCH = 1000           # ledgers whose metadata one pipelined read asks ZooKeeper for at once

__all__ = ["DEFAULT_UPDATE_ATTEMPTS", "MetadataStore", "Watch"]


class MetadataStore(ZkSession):
    """Ledger metadata, ledger ids, bookie registry and cookies in ZooKeeper under one ledgers root."""

    def __init__(self, metadata_service_uri: str, session_timeout: float = 10.0,
                 connect_timeout: float = 15.0, auth: ZkAuth | None = None) -> None:
        super().__init__(metadata_service_uri, session_timeout, connect_timeout, auth)
        self._manager = self.uri.ledger_manager or lay.DEFAULT_LEDGER_MANAGER
        self.layout = lay.ZkLayout(self.uri.root, self._manager)
        self._instance_id: str | None = None
        self._hob: int | None = None

    def start(self) -> MetadataStore:
        """Connect and take the ledger manager from LAYOUT if the cluster has one (LayoutMismatchError)."""
        if self._started:
            return self
        self._connect()
        try:
            stored = self._read_layout()
            if stored is not None:
                self._adopt_layout(stored)
        except BaseException:
            self.close()
            raise
        return self

    def __enter__(self) -> MetadataStore:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def ledger_manager_type(self) -> lay.LedgerManagerType:
        return self._manager

    # ---- cluster ----------------------------------------------------------------------------
    def _read_layout(self) -> lay.LedgerManagerType | None:
        got = self._get(self.layout.layout)
        if got is None:
            return None
        try:
            return lay.parse_layout_text(got[0])
        except ValueError as exc:
            raise MetadataFormatError(f"{self.layout.layout}: {exc}") from exc

    def _adopt_layout(self, stored: lay.LedgerManagerType) -> None:
        wanted = self.uri.ledger_manager
        if wanted is not None and wanted is not stored:
            raise LayoutMismatchError(
                f"the cluster at {self.uri.root} uses the {stored.value} ledger manager (its LAYOUT znode) "
                f"but metadataServiceUri asks for {wanted.value}: use zk+{stored.value}:// or zk://")
        with self._lock:
            self._manager = stored
            self.layout = lay.ZkLayout(self.uri.root, stored)

    def init_cluster(self) -> str:
        """Create the cluster's znodes if missing (idempotent, safe to race); returns the instance id."""
        root, layout = self.uri.root, self.layout
        parent = root.rsplit("/", 1)[0]
        if parent:
            self._call(f"create {parent}", self._zk.ensure_path_async, parent)
        if self._get(layout.instance_id) is None:
            self._create_instance(root, layout)
        for path in (layout.available, layout.readonly, layout.cookies, layout.idgen, layout.idgen_long):
            self._ensure(path)
        with contextlib.suppress(NodeExistsError):
            self._create_maybe(layout.layout, lay.layout_text(self._manager))
        stored = self._read_layout()
        if stored is None:
            raise MetadataStoreError(f"{layout.layout} vanished right after it was created")
        self._adopt_layout(stored)
        return self.instance_id()

    def _create_instance(self, root: str, layout: lay.ZkLayout) -> None:
        """BookKeeper's initNewCluster multi-op: root, available, available/readonly, INSTANCEID at once."""
        instance = str(uuid.uuid4()).encode("ascii")

        def multi() -> Any:
            txn = self._zk.transaction()
            if not self._answer(self._zk.exists_async(root)):
                txn.create(root, b"", acl=self._acl(root))
                txn.create(layout.available, b"", acl=self._acl(layout.available))
                txn.create(layout.readonly, b"", acl=self._acl(layout.readonly))
            txn.create(layout.instance_id, instance, acl=self._acl(layout.instance_id))
            return txn.commit_async()

        results = list(self._call("initialize the cluster", multi))
        if not any(isinstance(r, Exception) for r in results):
            return
        # Someone created part of it meanwhile (or an older run left a root without INSTANCEID).
        self._ensure(root)
        with contextlib.suppress(NodeExistsError):
            self._create_maybe(layout.instance_id, instance)

    def instance_id(self) -> str:
        """The cluster's INSTANCEID (a UUID string); MetadataStoreError if the cluster is not initialized."""
        if self._instance_id is None:
            got = self._get(self.layout.instance_id)
            if got is None:
                raise MetadataStoreError(
                    f"no cluster at {self.uri.root} ({self.layout.instance_id} is missing): "
                    "initialize it first (bkledger local up, or MetadataStore.init_cluster)")
            self._instance_id = got[0].decode("utf-8").strip()
        return self._instance_id

    # ---- ledger ids -------------------------------------------------------------------------
    def new_ledger_id(self) -> int:
        """A unique ledger id from ZooKeeper sequential znodes (R1), as BookKeeper's id generators.

        flat / legacyhierarchical / hierarchical: ZkLedgerIdGenerator, the sequence number of
        `idgen/ID-` (31-bit ids). longhierarchical: LongZkLedgerIdGenerator, `(hob << 32) | seq` where
        `idgen-long/HOB-<hob>` is a persistent sequential directory and seq that of `HOB-<hob>/ID-`
        inside it; a new HOB directory is made when seq reaches 2^31-1 (63-bit ids, the newest 3 kept).
        """
        if self._manager is lay.LedgerManagerType.LONG_HIERARCHICAL:
            return self._new_long_id()
        seq = self._sequence(self.layout.idgen)
        if seq < 0 or seq >= _SEQ_LIMIT:
            raise MetadataStoreError(f"{self.layout.idgen} ran out of 31-bit ids: use longhierarchical")
        return seq

    def _sequence(self, parent: str, makepath: bool = True) -> int:
        """Create and delete an ephemeral sequential `parent/ID-`; its sequence number."""
        path = self._create_maybe(f"{parent}/{lay.IDGEN_PREFIX}", b"", ephemeral=True, sequence=True,
                                  makepath=makepath)
        with contextlib.suppress(MetadataStoreError, NoNodeError):
            self._delete_maybe(path, -1)
        return int(path.rsplit("/", 1)[1][len(lay.IDGEN_PREFIX):])

    def _new_long_id(self) -> int:
        for _ in range(8):
            hob = self._current_hob()
            try:
                seq = self._sequence(f"{self.layout.idgen_long}/{lay.HOB_PREFIX}{hob:010d}", makepath=False)
            except NoNodeError:           # the HOB directory was garbage-collected by another client
                self._hob = None
                continue
            if 0 <= seq < _SEQ_LIMIT:
                return (hob << 32) | seq
            self._next_hob(hob)
        raise MetadataStoreError(f"could not allocate a ledger id under {self.layout.idgen_long}")

    def _hob_dirs(self) -> list[int]:
        self._ensure(self.layout.idgen_long)
        names = self._call("list HOBs", self._zk.get_children_async, self.layout.idgen_long)
        return sorted(int(n[len(lay.HOB_PREFIX):]) for n in names
                      if n.startswith(lay.HOB_PREFIX) and n[len(lay.HOB_PREFIX):].isdigit())

    def _current_hob(self) -> int:
        with self._lock:
            if self._hob is not None:
                return self._hob
        hobs = self._hob_dirs()
        hob = hobs[-1] if hobs else self._next_hob(-1)
        with self._lock:
            self._hob = hob
        return hob

    def _next_hob(self, full: int) -> int:
        """Start a new HOB directory after `full` (or the first one); drop all but the newest three."""
        hobs = self._hob_dirs()
        if hobs and hobs[-1] > full:
            hob = hobs[-1]
        else:
            path = self._create_maybe(f"{self.layout.idgen_long}/{lay.HOB_PREFIX}", b"", sequence=True)
            hob = int(path.rsplit("/", 1)[1][len(lay.HOB_PREFIX):])
            hobs.append(hob)
        for old in sorted(hobs)[:-_HOB_KEEP]:
            with contextlib.suppress(NoNodeError, NotEmptyError, MetadataStoreError):
                self._delete_maybe(f"{self.layout.idgen_long}/{lay.HOB_PREFIX}{old:010d}", -1)
        with self._lock:
            self._hob = hob
        return hob

    # ---- ledgers ----------------------------------------------------------------------------
    def ledger_path(self, ledger_id: int) -> str:
        return self.layout.ledger(ledger_id)

    def create_ledger(self, md: LedgerMetadata) -> int:
        """Store the metadata of a new ledger; LedgerExistsError if the id is taken. Returns version 0."""
        path = self.layout.ledger(md.ledger_id)
        data = serde.serialize(md)
        self.check_size(path, data, _metadata_why(md))
        try:
            self._create_maybe(path, data)
        except NodeExistsError:
            raise LedgerExistsError(f"ledger {md.ledger_id} already exists ({path})") from None
        return 0

    def read_ledger(self, ledger_id: int) -> tuple[LedgerMetadata, int]:
        """(metadata, znode version); NoSuchLedgerError if the ledger has no metadata."""
        got = self._get(self.layout.ledger(ledger_id))
        if got is None:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist (no metadata in ZooKeeper)")
        return serde.deserialize(ledger_id, got[0]), int(got[1].version)

    def read_ledgers(self, ledger_ids: list[int]) -> list[LedgerMetadata | None]:
        """The metadata of many ledgers, read concurrently (None for a ledger that does not exist)."""
        got = self.get_many([self.layout.ledger(lid) for lid in ledger_ids])
        return [None if g is None else serde.deserialize(lid, g[0]) for lid, g in zip(ledger_ids, got, strict=True)]

    def read_ledgers_versioned(self, ledger_ids: list[int]) -> list[tuple[LedgerMetadata, int] | None]:
        """(metadata, znode version) of many ledgers, read in one pipelined batch (None: no such ledger)."""
        got = self.get_many([self.layout.ledger(lid) for lid in ledger_ids])
        return [None if g is None else (serde.deserialize(lid, g[0]), g[1])
                for lid, g in zip(ledger_ids, got, strict=True)]

    def write_ledger(self, md: LedgerMetadata, expected_version: int) -> int:
        """CAS the metadata at `expected_version`; MetadataVersionError if it changed. The new version."""
        path, data = self.layout.ledger(md.ledger_id), serde.serialize(md)
        self.check_size(path, data, _metadata_why(md))
        try:
            return self._set_maybe(path, data, expected_version)
        except (NoNodeError, NoSuchNodeError):
            raise NoSuchLedgerError(f"ledger {md.ledger_id} does not exist (deleted?)") from None

    def update_ledger(self, ledger_id: int, fn: Callable[[LedgerMetadata], LedgerMetadata | None], *,
                      max_attempts: int = DEFAULT_UPDATE_ATTEMPTS) -> tuple[LedgerMetadata, int]:
        """The CAS update loop: read, `fn(current)`, CAS; on a lost race re-read and call `fn` again.

        `fn` returns the new metadata, or None (or the same value) when no change is needed; it may raise
        to abort (the exception propagates, nothing is written). Returns the stored (metadata, version).
        A set that lost its connection counts as done if the stored value equals what it wrote; like
        BookKeeper's MetadataUpdateLoop this assumes `fn` states a target (close, replace a bookie), so
        an equal value written by someone else means the same thing. UpdateConflictError after
        `max_attempts` lost races.
        """
        md, version = self.read_ledger(ledger_id)
        for attempt in range(max_attempts):
            new = fn(md)
            if new is None or new == md:
                return md, version
            if new.ledger_id != ledger_id:
                raise ValueError(f"update of ledger {ledger_id} returned metadata of ledger {new.ledger_id}")
            try:
                return new, self.write_ledger(new, version)
            except MetadataVersionError:
                time.sleep(random.uniform(0, min(0.001 * 2**attempt, 0.05)))
                md, version = self.read_ledger(ledger_id)
        raise UpdateConflictError(f"ledger {ledger_id}: metadata changed under us {max_attempts} times in a "
                                  "row; gave up (retry later)")

    def delete_ledger(self, ledger_id: int, expected_version: int = -1) -> None:
        """Delete the metadata (-1: any version); NoSuchLedgerError if absent, MetadataVersionError on CAS."""
        try:
            self._delete_maybe(self.layout.ledger(ledger_id), expected_version)
        except NoNodeError:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist") from None

    def delete_ledgers(self, ledger_ids: list[int]) -> list[int]:
        """Delete the metadata of many ledgers (any version) in one pipelined batch; the ids that existed.
        One at a time, each waited two ZooKeeper round trips: 15 of a 26 s compaction of 10,000 ledgers."""
        gone = self.delete_many([self.layout.ledger(lid) for lid in ledger_ids])
        return [lid for lid, existed in zip(ledger_ids, gone, strict=True) if existed]

    def list_ledgers(self, above: int = -1) -> list[int]:
        """Every ledger id under the root (above `above`), sorted: walks the manager's tree, skipping special
        znodes and the subtrees that hold only ids <= `above`."""
        found: list[int] = []
        self._walk(self.uri.root, [], found, above)
        return sorted(i for i in found if i > above)

    def ledgers_with_metadata(self, above: int = -1) -> Iterator[tuple[int, LedgerMetadata]]:
        """(ledger id, metadata) of every ledger (above `above`), in id order; one deleted between the
        listing and its read is skipped. Read in pipelined batches of METADATA_BATCH: one at a time, each
        read waited a ZooKeeper round trip (0.47 ms a ledger here; minutes at a million ledgers)."""
        ids = self.list_ledgers(above)
        for start in range(0, len(ids), METADATA_BATCH):
            batch = ids[start:start + METADATA_BATCH]
            for ledger_id, md in zip(batch, self.read_ledgers(batch), strict=True):
                if md is not None:
                    yield ledger_id, md

    def _walk(self, path: str, parts: list[str], found: list[int], above: int) -> None:
        try:
            names = self._call(f"list {path}", self._zk.get_children_async, path)
        except NoNodeError:
            return
        if not parts:
            names = [n for n in names if not lay.is_special_znode(n)]
        found.extend(lay.ledger_ids_in(parts, (n for n in names if n.startswith(lay.LEDGER_PREFIX)), self._manager))
        for name in names:
            if not name.startswith(lay.LEDGER_PREFIX) and lay.is_tree_level_name(name, len(parts), self._manager):
                if above >= 0 and lay.subtree_max_id([*parts, name], self._manager) <= above:
                    continue
                self._walk(f"{path}/{name}", [*parts, name], found, above)

    def watch_ledger(self, ledger_id: int,
                     callback: Callable[[LedgerMetadata | None, int], None]) -> Watch:
        """Call `callback(metadata, version)` now and on every change; (None, -1) once it is deleted."""
        handle = Watch()

        def on_change(data: bytes | None, stat: ZnodeStat | None) -> bool:
            if handle.cancelled:
                return False
            if data is None or stat is None:
                callback(None, -1)
            else:
                callback(serde.deserialize(ledger_id, data), int(stat.version))
            return True

        self._zk.DataWatch(self.layout.ledger(ledger_id), on_change)
        return handle

    # ---- bookie registry --------------------------------------------------------------------
    def register_bookie(self, bookie_id: str, info: Mapping[str, str | int], readonly: bool = False,
                        wait_stale: float | None = None, given_up: Callable[[], bool] | None = None) -> None:
        """Register as writable (`available/<id>`) or read-only (`available/readonly/<id>`), ephemeral.

        The new node is created before the other one is deleted, as BookKeeper switches modes. A node
        left by an earlier session of the same bookie is waited for (up to `wait_stale`, default the
        session timeout) to expire; after that, MetadataStoreError ("bookie already registered"). The
        wait also ends, with RegistrationAbandonedError, once `given_up()` is true (the bookie is stopping).
        """
        target, other = self.layout.bookie(bookie_id, readonly), self.layout.bookie(bookie_id, not readonly)
        data = _service_info(bookie_id, info)
        deadline = time.monotonic() + (self.session_timeout + 1.0 if wait_stale is None else wait_stale)
        while True:
            got = self._get(target)
            if got is not None and got[1].ephemeralOwner == self.session_id:
                if got[0] != data:
                    self._set_maybe(target, data, -1)
                break
            if got is None:
                try:
                    self._create_maybe(target, data, ephemeral=True)
                    break
                except NodeExistsError:
                    continue
            if time.monotonic() > deadline:
                raise MetadataStoreError(
                    f"bookie {bookie_id} is already registered at {target} by another ZooKeeper session "
                    "(another process with this bookie id is running?)")
            if given_up is not None and given_up():
                raise RegistrationAbandonedError(
                    f"bookie {bookie_id}: stopped while {target} of an earlier session waited to expire")
            time.sleep(0.05)
        self._delete_own(other)

    def _delete_own(self, path: str) -> None:
        got = self._get(path)
        if got is not None and got[1].ephemeralOwner == self.session_id:
            with contextlib.suppress(NoNodeError, BadVersionError, MetadataVersionError):
                self._delete_maybe(path, int(got[1].version))

    def unregister_bookie(self, bookie_id: str) -> None:
        """Remove this session's registration of the bookie (writable and read-only)."""
        for readonly in (False, True):
            self._delete_own(self.layout.bookie(bookie_id, readonly))

    def registered_session(self, bookie_id: str) -> int | None:
        """The ZooKeeper session that holds the bookie's registration (writable or read-only), if any."""
        for readonly in (False, True):
            got = self._get(self.layout.bookie(bookie_id, readonly))
            if got is not None:
                return int(got[1].ephemeralOwner)
        return None

    def is_registered(self, bookie_id: str) -> bool:
        """Whether this session holds a registration (writable or read-only) of the bookie."""
        for readonly in (False, True):
            got = self._get(self.layout.bookie(bookie_id, readonly))
            if got is not None and got[1].ephemeralOwner == self.session_id:
                return True
        return False

    def writable_bookies(self) -> list[str]:
        return sorted(n for n in self.children(self.layout.available) if n != lay.READONLY)

    def readonly_bookies(self) -> list[str]:
        return sorted(self.children(self.layout.readonly))

    def bookie_info(self, bookie_id: str) -> dict[str, str] | None:
        """{"bookie_id", "host", "port", "readonly", **properties} of a registered bookie, else None."""
        for readonly in (False, True):
            got = self._get(self.layout.bookie(bookie_id, readonly))
            if got is not None:
                return {**_parse_service_info(bookie_id, got[0]), "readonly": str(readonly).lower()}
        return None

    def watch_bookies(self, callback: Callable[[list[str], list[str]], None]) -> Watch:
        """Call `callback(writable, readonly)` now and whenever either set of registrations changes."""
        handle = Watch()
        lock = threading.Lock()
        state: dict[str, list[str]] = {}

        def watcher(key: str) -> Callable[[list[str]], bool]:
            def on_children(names: list[str]) -> bool:
                if handle.cancelled:
                    return False
                with lock:
                    state[key] = sorted(n for n in names if n != lay.READONLY)
                    if len(state) == 2:
                        callback(list(state["w"]), list(state["r"]))
                return True
            return on_children

        self._ensure(self.layout.readonly)
        self._zk.ChildrenWatch(self.layout.available, watcher("w"))
        self._zk.ChildrenWatch(self.layout.readonly, watcher("r"))
        return handle

    # ---- cookies (R24) ----------------------------------------------------------------------
    def cookie_bookies(self) -> list[str]:
        """Every bookie that has a cookie: each one that ever joined and was not decommissioned."""
        return sorted(self.children(self.layout.cookies))

    def read_cookie(self, bookie_id: str) -> tuple[bytes, int] | None:
        """(cookie bytes, znode version) or None when the bookie has no cookie in ZooKeeper."""
        return self.get(self.layout.cookie(bookie_id))

    def write_cookie(self, bookie_id: str, data: bytes, expected_version: int | None) -> int:
        """Create (expected_version None) or CAS the cookie; MetadataVersionError on a conflict."""
        path = self.layout.cookie(bookie_id)
        if expected_version is None:
            try:
                self._create_maybe(path, data)
            except NodeExistsError:
                raise MetadataVersionError(f"bookie {bookie_id} already has a cookie in ZooKeeper") from None
            return 0
        try:
            return self._set_maybe(path, data, expected_version)
        except (NoNodeError, NoSuchNodeError):
            raise MetadataVersionError(f"bookie {bookie_id} has no cookie in ZooKeeper to update") from None

    def delete_cookie(self, bookie_id: str, expected_version: int = -1) -> None:
        with contextlib.suppress(NoSuchNodeError):
            self.delete(self.layout.cookie(bookie_id), expected_version)


def _metadata_why(md: LedgerMetadata) -> str:
    custom = sum(len(k.encode("utf-8")) + len(v) for k, v in md.custom_metadata.items())
    return (f"the metadata of ledger {md.ledger_id} ({custom} bytes of custom metadata, "
            f"{len(md.fragments)} fragments)")


def _service_info(bookie_id: str, info: Mapping[str, str | int]) -> bytes:
    """BookieServiceInfoFormat bytes: host and port from `info`, the other keys as properties."""
    host = str(info.get("host") or bookie_id.rsplit(":", 1)[0])
    try:
        port = int(info.get("port") or bookie_id.rsplit(":", 1)[1])
    except (IndexError, ValueError):
        raise ValueError(f"bookie {bookie_id}: give info['port'] (or use a host:port bookie id)") from None
    props = {str(k): str(v) for k, v in info.items() if k not in ("host", "port", "bookie_id", "readonly")}
    msg = fpb.BookieServiceInfoFormat(bookie_id=bookie_id, host=host, port=port, properties=props)
    return msg.SerializeToString(deterministic=True)


def _parse_service_info(bookie_id: str, data: bytes) -> dict[str, str]:
    """The registration data; a node without (parseable) data falls back to the host:port bookie id."""
    msg = fpb.BookieServiceInfoFormat()
    with contextlib.suppress(Exception):
        msg.ParseFromString(data)
    host, _, port = bookie_id.rpartition(":")
    return {
        **dict(msg.properties),
        "bookie_id": bookie_id,
        "host": msg.host or host,
        "port": str(msg.port) if msg.port else port,
    }
