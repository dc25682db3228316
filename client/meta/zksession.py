"""One ZooKeeper session over kazoo: connection, bounded retries, "maybe written" writes, generic znode ops.

The base of the metadata store (BookKeeper's ZooKeeper client wrapper, `ZooKeeperClient` with its
retry policy). Reads retry through connection loss until a deadline; a non-idempotent write that
lost its connection is treated as "maybe written": the session re-reads and decides from what is
stored. Generic helpers (`get`, `cas`, `create`, `delete`, `children`, `exists`) take paths relative
to the ledgers root ("logs/orders"); a path starting with "/" is an absolute ZooKeeper path. Blocking
and thread-safe (kazoo's client is). Only `client/meta/` imports kazoo.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    KazooException,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    SessionExpiredError,
    UnimplementedError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat
from kazoo.retry import KazooRetry

from bkledger.client.meta.errors import (
    MetadataAccessDeniedError,
    MetadataStoreError,
    MetadataVersionError,
    NoSuchNodeError,
    ZNodeExistsError,
    ZNodeTooLargeError,
)
from bkledger.client.meta.multiread import MAX_PATHS, MultiRead, ReadError
from bkledger.client.meta.uri import MetadataServiceUri, parse_metadata_service_uri
from bkledger.client.meta.zkauth import ZkAuth
from bkledger.client.meta.zklog import KazooChatter, ZkTrouble
from bkledger.client.meta.zkpoll import PollingHandler

_LOST = (ConnectionLoss, OperationTimeoutError, SessionExpiredError)
JUTE_MAXBUFFER = 0xFFFFF        # ZooKeeper's default jute.maxbuffer: the largest request a server reads
REQUEST_MARGIN = 16 * 1024      # room for the request's header, path and ACL around the data
INTERRUPT_POLL_S = 0.1          # how often a request waiting for an answer looks at `interrupt()`
OP_OVERHEAD = 64                # per operation of a multi: type, version, flags, ACL
#: beyond kazoo's own bound on closing its connection (max(10 s, the session timeout)): how long `close()`
#: waits for kazoo's event threads, which kazoo joins without a bound (a watch callback that never returns
#: held every close, and the process's stop, for ever)
CLOSE_MARGIN_S = 5.0

log = logging.getLogger("bkledger.zookeeper")
# the kazoo errors and types that the rest of client/meta handles are re-exported from here
__all__ = [
    "BadVersionError", "NoNodeError", "NodeExistsError", "NotEmptyError", "Watch", "ZkOp", "ZkSession",
    "ZnodeStat",
]


@dataclasses.dataclass(frozen=True)
class ZkOp:
    """One operation of a multi-operation transaction: kind is "create", "set", "delete" or "check";
    `version` -1 means any version (set, delete, check)."""

    kind: str
    path: str
    data: bytes = b""
    version: int = -1

    @property
    def request_bytes(self) -> int:
        return len(self.path.encode("utf-8")) + len(self.data) + OP_OVERHEAD


class Watch:
    """A handle on a watch; `cancel()` stops further callbacks (kazoo drops it at the next event)."""

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ZkSession:
    """A kazoo session bound to the ledgers root of one metadata service URI."""

    def __init__(self, metadata_service_uri: str, session_timeout: float = 10.0,
                 connect_timeout: float = 15.0, auth: ZkAuth | None = None) -> None:
        """`auth`: digest credentials for the session and, if it says so, ACLs on what it creates."""
        self.uri: MetadataServiceUri = parse_metadata_service_uri(metadata_service_uri)
        self.session_timeout = float(session_timeout)
        self.connect_timeout = float(connect_timeout)
        self.auth = auth
        self.trouble = ZkTrouble(self.uri.hosts, self.session_timeout)    # one line per outage (zklog)
        self._zk = KazooClient(
            hosts=self.uri.hosts, timeout=self.session_timeout, handler=PollingHandler(),
            connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0),
            auth_data=auth.auth_data if auth else None,
            default_acl=auth.owner_acl if auth and auth.enable_acl else None,
            logger=KazooChatter(self.trouble),
        )
        self._zk.add_listener(self._on_state)
        self._interrupted = threading.Event()
        self._retry = KazooRetry(max_tries=-1, delay=0.02, backoff=2, max_delay=0.5,
                                 deadline=max(2.0 * self.session_timeout, 5.0), interrupt=self._interrupted.is_set)
        self._lock = threading.Lock()
        self._started = False
        self.close_timeout = max(10.0, self.session_timeout) + CLOSE_MARGIN_S
        self.close_stuck = False        # True once a close gave up waiting for kazoo's threads
        self.multi_read = True          # False once the server did not know multiRead (ZooKeeper < 3.6)
        self.max_request_bytes = JUTE_MAXBUFFER - REQUEST_MARGIN   # lower it in tests; raise with jute.maxbuffer

    # ---- lifecycle ------------------------------------------------------------------------
    def _connect(self) -> None:
        """Connect, bounded by connect_timeout and ended early by `interrupt()` (a bookie stopped while it
        starts with ZooKeeper away). A closed session cannot be started again."""
        connected = self._zk.start_async()
        deadline = time.monotonic() + self.connect_timeout
        while not connected.wait(INTERRUPT_POLL_S):
            if self._interrupted.is_set() or time.monotonic() >= deadline:
                break
        if not self._zk.connected:
            with contextlib.suppress(KazooException):
                self._zk.stop()
            self._zk.close()
            if self._interrupted.is_set():
                raise MetadataStoreError(f"stopped connecting to ZooKeeper at {self.uri.hosts}{self.trouble.why()} "
                                         "(interrupted: the process is stopping)")
            raise MetadataStoreError(
                f"cannot connect to ZooKeeper at {self.uri.hosts} within {self.connect_timeout:.0f}s"
                f"{self.trouble.why()}: is it running (bkledger local up) and is metadataServiceUri right?")
        self._started = True

    def _on_state(self, state: str) -> None:
        """kazoo's state listener (its event thread): a connection ends an outage's trouble."""
        if state == "CONNECTED":
            self.trouble.connected()

    def close(self) -> None:
        """Close the session: its ephemeral znodes (bookie registrations) go away now. Returns within
        `close_timeout`: kazoo joins its event threads without a bound, so it runs on a thread of its own,
        and a close that does not finish in time is logged, `close_stuck` is set, and the caller goes on
        (the session then ends at the server when its timeout passes, or with the process)."""
        if not self._started:
            return
        self._started = False
        failed: list[BaseException] = []
        closer = threading.Thread(target=self._stop_kazoo, args=(failed,), name="zk-close", daemon=True)
        closer.start()
        closer.join(self.close_timeout)
        if failed:
            raise failed[0]
        if closer.is_alive():
            self.close_stuck = True
            log.error("closing the ZooKeeper session to %s did not finish within %.0f s: a watch callback is "
                      "stuck on kazoo's event thread; going on without it (the session ends at the server "
                      "within its timeout, %.0f s)", self.uri.hosts, self.close_timeout, self.session_timeout)

    def _stop_kazoo(self, failed: list[BaseException]) -> None:
        try:
            with contextlib.suppress(KazooException):
                self._zk.stop()
            self._zk.close()
        except BaseException as exc:  # noqa: BLE001 - raised again by close() in the caller's thread
            failed.append(exc)

    def interrupt(self) -> None:
        """Stop waiting: a request waiting for ZooKeeper to come back, and every later one, fails with
        MetadataStoreError within INTERRUPT_POLL_S instead of at the retry deadline (2 x the session
        timeout). For a process that is stopping."""
        self._interrupted.set()

    @property
    def connected(self) -> bool:
        """Whether the session is connected to a server right now (kazoo's CONNECTED state)."""
        return bool(self._started and self._zk.connected)

    @property
    def session_id(self) -> int:
        client_id = self._zk.client_id
        return int(client_id[0]) if client_id else 0

    # ---- plumbing ---------------------------------------------------------------------------
    def _acl(self, path: str) -> Any:
        """The ACL of a new znode (None: the session's default, see client.meta.zkauth)."""
        return self.auth.acl_for(path, self.uri.root) if self.auth else None

    def _abs(self, path: str) -> str:
        if path.startswith("/"):
            return path.rstrip("/") or "/"
        if not path:
            return self.uri.root
        return f"{self.uri.root}/{path.strip('/')}"

    def _answer(self, pending: Any) -> Any:
        """The answer to a kazoo request (`*_async`), waited for at most session_timeout. kazoo's blocking
        calls wait without a bound, and a request made while the session is reconnecting stays queued until
        it connects: with ZooKeeper gone, a call (an autorecovery daemon withdrawing its auditor vote on
        SIGTERM) never returned. No answer in time counts as connection loss: the request may still run
        once the session reconnects, so writes treat it as "maybe written", as for any connection loss.
        After `interrupt()` the wait ends within INTERRUPT_POLL_S, the same way."""
        deadline = time.monotonic() + self.session_timeout
        while True:
            try:
                return pending.get(timeout=max(0.0, min(INTERRUPT_POLL_S, deadline - time.monotonic())))
            except KazooTimeoutError:
                if self._interrupted.is_set():
                    raise ConnectionLoss(f"no answer from ZooKeeper at {self.uri.hosts}; stopped waiting "
                                         "(interrupted: the process is stopping)") from None
                if time.monotonic() >= deadline:
                    raise ConnectionLoss(f"no answer from ZooKeeper at {self.uri.hosts} within "
                                         f"{self.session_timeout:g}s") from None

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run an idempotent ZooKeeper request (`fn` returns kazoo's async result), retrying connection
        loss until the deadline."""
        if not self._started:
            raise MetadataStoreError(f"{what}: the metadata store is not started (call start())")
        try:
            return self._retry.copy()(lambda: self._answer(fn(*args, **kwargs)))
        except (NoNodeError, NodeExistsError, BadVersionError, NotEmptyError):
            raise
        except NoAuthError:
            raise self._denied(what) from None
        except KazooException as exc:
            raise MetadataStoreError(f"{what}: ZooKeeper at {self.uri.hosts} failed: {exc!r}") from exc

    def _once(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a non-idempotent request once (`fn` returns kazoo's async result); connection loss (also no
        answer within session_timeout) propagates for the caller to resolve."""
        if not self._started:
            raise MetadataStoreError(f"{what}: the metadata store is not started (call start())")
        try:
            return self._answer(fn(*args, **kwargs))
        except (NoNodeError, NodeExistsError, BadVersionError, NotEmptyError, *_LOST):
            raise
        except NoAuthError:
            raise self._denied(what) from None
        except KazooException as exc:
            raise MetadataStoreError(f"{what}: ZooKeeper at {self.uri.hosts} failed: {exc!r}") from exc

    def _denied(self, what: str) -> MetadataAccessDeniedError:
        who = f"user {self.auth.user!r}" if self.auth else "a session without credentials"
        return MetadataAccessDeniedError(
            f"{what}: ZooKeeper refused it (NoAuth): the znode's ACL does not allow {who}; set zkDigestUser and "
            "zkDigestPasswordPath to the cluster's ZooKeeper credentials (README: Security)")

    def _attempts(self) -> Iterator[int]:
        deadline = time.monotonic() + max(2.0 * self.session_timeout, 5.0)
        attempt = 0
        while True:
            yield attempt
            attempt += 1
            if self._interrupted.is_set():
                raise MetadataStoreError(f"ZooKeeper at {self.uri.hosts}: stopped retrying after {attempt} attempts "
                                         "(interrupted: the process is stopping)")
            if time.monotonic() > deadline:
                raise MetadataStoreError(f"ZooKeeper at {self.uri.hosts} unreachable{self.trouble.why()}; gave "
                                         f"up after {attempt} attempts: check that it runs and is reachable")
            time.sleep(min(0.02 * 2**attempt, 0.5))

    def _get(self, path: str) -> tuple[bytes, ZnodeStat] | None:
        try:
            data, stat = self._call(f"read {path}", self._zk.get_async, path)
        except NoNodeError:
            return None
        return bytes(data), stat

    def _create_maybe(self, path: str, data: bytes, *, ephemeral: bool = False, sequence: bool = False,
                      makepath: bool = True) -> str:
        """Create; after a connection loss, a node with our data (and session, if ephemeral) is ours."""
        self.check_size(path, data)
        for attempt in self._attempts():
            try:
                return str(self._once(f"create {path}", self._zk.create_async, path, data, acl=self._acl(path),
                                      ephemeral=ephemeral, sequence=sequence, makepath=makepath))
            except _LOST:
                continue
            except NodeExistsError:
                if attempt == 0 or sequence:
                    raise
                got = self._get(path)
                mine = got is not None and got[0] == data and got[1].version == 0 and (
                    not ephemeral or got[1].ephemeralOwner == self.session_id)
                if mine:
                    return path
                raise
        raise AssertionError("unreachable")

    def _set_maybe(self, path: str, data: bytes, version: int) -> int:
        """CAS setData. Connection loss = maybe written: re-read and decide. Returns the new version."""
        self.check_size(path, data)
        for _ in self._attempts():
            try:
                stat = self._once(f"write {path}", self._zk.set_async, path, data, version)
                return int(stat.version)
            except BadVersionError:
                raise MetadataVersionError(
                    f"{path} changed since version {version} was read; re-read and retry") from None
            except _LOST:
                got = self._get(path)
                if got is None:
                    raise NoSuchNodeError(f"{path} was deleted meanwhile") from None
                if got[0] == data and (version == -1 or got[1].version > version):
                    return int(got[1].version)
                if version != -1 and got[1].version != version:
                    raise MetadataVersionError(
                        f"{path} changed since version {version} was read; re-read and retry") from None
        raise AssertionError("unreachable")

    def check_size(self, path: str, data: bytes, why: str = "") -> None:
        """ZNodeTooLargeError unless ZooKeeper accepts `data` at `path` in one request."""
        size = len(path.encode("utf-8")) + len(data)
        if size > self.max_request_bytes:
            raise ZNodeTooLargeError(path, size, self.max_request_bytes, why)

    def multi(self, ops: list[ZkOp], verify: list[ZkOp] | None = None) -> None:
        """Run the operations as ONE transaction (ZooKeeper's multi): all or none.

        MetadataVersionError if a versioned op found another version, NoSuchNodeError / ZNodeExistsError
        for a missing / existing znode, ZNodeTooLargeError (before sending) if the request is too big.
        Connection loss = maybe written: the `verify` ops ("set" ops, by default every versioned set)
        decide: all stored with our data -> done; all still at their versions -> send again; else
        MetadataVersionError."""
        total = sum(op.request_bytes for op in ops)
        if total > self.max_request_bytes:
            big = max(ops, key=lambda op: op.request_bytes)
            raise ZNodeTooLargeError(big.path, total, self.max_request_bytes,
                                     f"one transaction of {len(ops)} operations (largest here: {len(big.data)} "
                                     "bytes)")
        checks = verify if verify is not None else [op for op in ops if op.kind == "set" and op.version >= 0]
        for _ in self._attempts():
            try:
                results = list(self._once("multi", self._commit, ops))
            except _LOST:
                stored = [self._get(op.path) for op in checks]
                if checks and all(g is not None and g[0] == op.data and g[1].version > op.version
                                  for g, op in zip(stored, checks, strict=True)):
                    return
                if all(g is not None and g[1].version == op.version for g, op in zip(stored, checks, strict=True)):
                    continue
                raise MetadataVersionError("a znode of this transaction changed meanwhile; re-read and retry"
                                           ) from None
            _raise_first(results, ops)
            return

    def _commit(self, ops: list[ZkOp]) -> Any:
        txn = self._zk.transaction()
        for op in ops:
            if op.kind == "create":
                txn.create(op.path, op.data)
            elif op.kind == "set":
                txn.set_data(op.path, op.data, op.version)
            elif op.kind == "delete":
                txn.delete(op.path, op.version)
            elif op.kind == "check":
                txn.check(op.path, op.version)
            else:
                raise ValueError(f"unknown transaction operation {op.kind!r}")
        return txn.commit_async()

    def get_many(self, paths: list[str], per_request: int = MAX_PATHS) -> list[tuple[bytes, int] | None]:
        """(data, version) of each znode (None if missing): `get_many_stat` without the rest of the stat."""
        return [None if r is None else (r[0], int(r[1].version)) for r in self.get_many_stat(paths, per_request)]

    def get_many_stat(self, paths: list[str], per_request: int = MAX_PATHS) -> list[tuple[bytes, ZnodeStat] | None]:
        """(data, stat) of each znode (None if missing), paths as for `get`: `per_request` per multiRead
        request (`client.meta.multiread`; fewer for large znodes, so that no reply is huge), the requests
        pipelined; one getData each, pipelined, from a server without multiRead. A request that meets
        connection loss (or no answer in time) is read again path by path, through the retry."""
        full = [self._abs(p) for p in paths]
        if not self._started:
            raise MetadataStoreError("read: the metadata store is not started (call start())")
        if not self.multi_read or len(full) < 2:
            return self._get_each(full)
        step = max(1, per_request)
        chunks = [full[i:i + step] for i in range(0, len(full), step)]
        pending = [self._multi_read_async(chunk) for chunk in chunks]
        out: list[tuple[bytes, ZnodeStat] | None] = []
        for chunk, result in zip(chunks, pending, strict=True):
            try:
                got = result.get(timeout=self.session_timeout)
            except (UnimplementedError, ValueError, struct.error):
                self.multi_read = False                    # an older server: one getData each from now on
                out += self._get_each(chunk)
                continue
            except (KazooException, KazooTimeoutError):
                out += [self._get(path) for path in chunk]
                continue
            for path, item in zip(chunk, got, strict=True):
                if isinstance(item, ReadError):
                    out.append(None if item.code == NoNodeError.code else self._get(path))
                else:
                    out.append(item)
        return out

    def _multi_read_async(self, paths: list[str]) -> Any:
        result = self._zk.handler.async_result()
        chroot = self._zk.chroot or ""
        self._zk._call(MultiRead([chroot + p for p in paths]), result)     # kazoo has no call of its own
        return result

    def _get_each(self, full: list[str]) -> list[tuple[bytes, ZnodeStat] | None]:
        pending = [self._zk.get_async(p) for p in full]
        out: list[tuple[bytes, ZnodeStat] | None] = []
        for path, result in zip(full, pending, strict=True):
            try:
                data, stat = result.get(timeout=self.session_timeout)
                out.append((bytes(data), stat))
            except NoNodeError:
                out.append(None)
            except (KazooException, KazooTimeoutError):
                out.append(self._get(path))                # retried one by one through connection loss
        return out

    def delete_many(self, paths: list[str]) -> list[bool]:
        """Delete each znode (any version) with the requests pipelined, as `get_many` reads: whether each
        existed. A request that meets connection loss (or no answer in time) is retried on its own, and
        counts as deleted if the znode is gone afterwards (the lost request may have deleted it)."""
        full = [self._abs(p) for p in paths]
        if not self._started:
            raise MetadataStoreError("delete: the metadata store is not started (call start())")
        pending = [self._zk.delete_async(p, -1) for p in full]
        out: list[bool] = []
        for path, result in zip(full, pending, strict=True):
            try:
                result.get(timeout=self.session_timeout)
                out.append(True)
            except NoNodeError:
                out.append(False)
            except NoAuthError:
                raise self._denied(f"delete {path}") from None
            except (KazooException, KazooTimeoutError):
                try:
                    self._delete_maybe(path, -1)
                    out.append(True)
                except NoNodeError:
                    out.append(False)
        return out

    def _delete_maybe(self, path: str, version: int) -> None:
        for attempt in self._attempts():
            try:
                self._once(f"delete {path}", self._zk.delete_async, path, version)
                return
            except _LOST:
                continue
            except NoNodeError:
                if attempt == 0:
                    raise
                return
            except BadVersionError:
                raise MetadataVersionError(f"{path} is not at version {version}; re-read and retry") from None

    def _ensure(self, path: str) -> None:
        self._call(f"create {path}", self._zk.ensure_path_async, path, acl=self._acl(path))

    # ---- generic helpers (paths relative to the root; "/..." absolute) ------------------------
    def get(self, path: str) -> tuple[bytes, int] | None:
        """(data, version) of the znode, or None if it does not exist."""
        got = self._get(self._abs(path))
        return None if got is None else (got[0], int(got[1].version))

    def owned_by_this_session(self, path: str) -> bool:
        """Whether the znode exists and is an ephemeral of this session."""
        got = self._get(self._abs(path))
        return got is not None and got[1].ephemeralOwner == self.session_id

    def cas(self, path: str, data: bytes, version: int) -> int:
        """setData if the znode is at `version` (-1: any); the new version.

        MetadataVersionError if it moved on, NoSuchNodeError if it does not exist.
        """
        try:
            return self._set_maybe(self._abs(path), data, version)
        except NoNodeError:
            raise NoSuchNodeError(f"{self._abs(path)} does not exist") from None

    def create(self, path: str, data: bytes = b"", ephemeral: bool = False, sequence: bool = False,
               makepath: bool = True) -> str:
        """Create the znode; returns its path (with the sequence suffix), relative if `path` was.

        ZNodeExistsError if it exists, NoSuchNodeError if the parent is missing and not makepath.
        """
        full = self._abs(path)
        try:
            made = self._create_maybe(full, data, ephemeral=ephemeral, sequence=sequence, makepath=makepath)
        except NodeExistsError:
            raise ZNodeExistsError(f"{full} already exists") from None
        except NoNodeError:
            raise NoSuchNodeError(f"the parent of {full} does not exist") from None
        if path.startswith("/"):
            return made
        return made[len(self.uri.root) + 1:]

    def delete(self, path: str, version: int = -1, recursive: bool = False) -> None:
        """Delete the znode at `version` (-1: any). NoSuchNodeError if absent; MetadataVersionError on CAS."""
        full = self._abs(path)
        if recursive:
            for child in self.children(full):
                with contextlib.suppress(NoSuchNodeError):
                    self.delete(f"{full}/{child}", -1, recursive=True)
        try:
            self._delete_maybe(full, version)
        except NoNodeError:
            raise NoSuchNodeError(f"{full} does not exist") from None
        except NotEmptyError:
            raise MetadataStoreError(f"{full} has children; delete them first (or recursive=True)") from None

    def children(self, path: str) -> list[str]:
        """Sorted child names; [] when the znode does not exist."""
        full = self._abs(path)
        try:
            return sorted(self._call(f"list {full}", self._zk.get_children_async, full))
        except NoNodeError:
            return []

    def watch_children(self, path: str, on_change: Callable[[], None]) -> Watch:
        """Call `on_change()` now and whenever the znode's children change (the znode is created if missing).

        Called on kazoo's event thread: keep it short (set an event). Survives connection loss; a session
        expiry re-arms it on the new session (kazoo's ChildrenWatch).
        """
        handle = Watch()
        full = self._abs(path)
        self._ensure(full)

        def on_children(_names: list[str]) -> bool:
            if handle.cancelled:
                return False
            on_change()
            return True

        self._zk.ChildrenWatch(full, on_children)
        return handle

    def watch_data(self, path: str, on_change: Callable[[], None]) -> Watch:
        """Call `on_change()` now and whenever the znode is created, changed or deleted (kazoo's DataWatch;
        called on kazoo's event thread: keep it short)."""
        handle = Watch()

        def on_data(_data: bytes | None, _stat: ZnodeStat | None) -> bool:
            if handle.cancelled:
                return False
            on_change()
            return True

        self._zk.DataWatch(self._abs(path), on_data)
        return handle

    def exists(self, path: str) -> bool:
        full = self._abs(path)
        return self._call(f"stat {full}", self._zk.exists_async, full) is not None


def _raise_first(results: list[Any], ops: list[ZkOp]) -> None:
    """Raise the typed error of the operation that failed a transaction, if one did."""
    for result, op in zip(results, ops, strict=False):
        if isinstance(result, BadVersionError):
            raise MetadataVersionError(f"{op.path} is not at version {op.version}; re-read and retry")
        if isinstance(result, NoNodeError):
            raise NoSuchNodeError(f"{op.path} does not exist ({op.kind})")
        if isinstance(result, NodeExistsError):
            raise ZNodeExistsError(f"{op.path} already exists")
        if isinstance(result, NotEmptyError):
            raise MetadataStoreError(f"{op.path} has children; cannot delete it")
    failed = [r for r in results if isinstance(r, Exception) and type(r).__name__ != "RolledBackError"]
    if failed:
        raise MetadataStoreError(f"transaction failed: {failed[0]!r}")
