"""Under-replication marks, replication locks and the auditor election in ZooKeeper (R31, R32).

Mirrors BookKeeper's ZkLedgerUnderreplicationManager and ZkLedgerAuditorManager, with the same layout
under the ledgers root:

- `underreplication/LAYOUT`: `LedgerRereplicationLayoutFormat` (type BASIC, version 1), text format;
- `underreplication/ledgers/<hhhh>/<hhhh>/<hhhh>/<hhhh>/urL<%010d id>`: one persistent znode per
  under-replicated ledger, the id split into four 16-bit hex groups; data = `UnderreplicatedLedgerFormat`
  (the missing replicas and a ctime in ms), protobuf text format as BookKeeper writes it;
- `underreplication/locks/urL<%010d id>`: EPHEMERAL lock of the replication worker working on it;
- `underreplication/auditorelection/V_<seq>`: EPHEMERAL_SEQUENTIAL votes (`AuditorVoteFormat`); the lowest
  sequence number is the auditor;
- `underreplication/disable`: exists = autorecovery disabled cluster-wide;
- `underreplication/lostBookieRecoveryDelay`: the auditor's delay in seconds, changeable at run time.

Everything goes through the store's generic znode helpers (paths relative to the ledgers root), so the
ephemeral nodes belong to that store's ZooKeeper session. Blocking and thread-safe.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time

from google.protobuf import text_format

from bkledger.client.meta.errors import MetadataVersionError, NoSuchNodeError, ZNodeExistsError
from bkledger.client.meta.store import MetadataStore
from bkledger.proto import formats_pb2 as fpb

UR = "underreplication"
UR_LEDGERS = f"{UR}/ledgers"
UR_LOCKS = f"{UR}/locks"
UR_ELECTION = f"{UR}/auditorelection"
UR_DISABLE = f"{UR}/disable"
UR_LAYOUT = f"{UR}/LAYOUT"
UR_DELAY = f"{UR}/lostBookieRecoveryDelay"
UR_PREFIX = "urL"
VOTE_PREFIX = "V_"
_LAYOUT_TEXT = b'type: "BASIC"\nversion: 1\n'


def hex_groups(ledger_id: int) -> list[str]:
    """The four 16-bit hex groups of a ledger id, high first (BookKeeper's getUrLedgerPath)."""
    if not 0 <= ledger_id < 2**64:
        raise ValueError(f"ledger id {ledger_id} out of range")
    text = f"{ledger_id:016x}"
    return [text[i:i + 4] for i in range(0, 16, 4)]


def mark_name(ledger_id: int) -> str:
    return f"{UR_PREFIX}{ledger_id:010d}"


def mark_path(ledger_id: int) -> str:
    return "/".join([UR_LEDGERS, *hex_groups(ledger_id), mark_name(ledger_id)])


def lock_path(ledger_id: int) -> str:
    return f"{UR_LOCKS}/{mark_name(ledger_id)}"


@dataclasses.dataclass(frozen=True)
class UnderReplicated:
    """One mark: the ledger, its missing replicas, when it was marked (ms) and the znode version."""

    ledger_id: int
    replicas: tuple[str, ...]
    ctime_ms: int
    version: int


def encode_mark(replicas: list[str] | tuple[str, ...], ctime_ms: int) -> bytes:
    msg = fpb.UnderreplicatedLedgerFormat(replica=sorted(set(replicas)), ctime=ctime_ms)
    return text_format.MessageToString(msg).encode()


def decode_mark(data: bytes) -> tuple[tuple[str, ...], int]:
    msg = fpb.UnderreplicatedLedgerFormat()
    with contextlib.suppress(text_format.ParseError, UnicodeDecodeError):
        text_format.Parse(data.decode(), msg)
    return tuple(msg.replica), int(msg.ctime)


class UnderReplicationManager:
    """The under-replication znodes of one cluster, through one metadata store (one ZooKeeper session)."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    def init(self) -> None:
        """Create the base znodes (idempotent)."""
        for path in (UR_LEDGERS, UR_LOCKS, UR_ELECTION):
            if not self.store.exists(path):
                with contextlib.suppress(ZNodeExistsError):
                    self.store.create(path, b"", makepath=True)
        if not self.store.exists(UR_LAYOUT):
            with contextlib.suppress(ZNodeExistsError):
                self.store.create(UR_LAYOUT, _LAYOUT_TEXT, makepath=True)

    # ---- marks ---------------------------------------------------------------------------
    def mark(self, ledger_id: int, replicas: list[str] | tuple[str, ...]) -> bool:
        """Mark the ledger under-replicated with these missing replicas (merged into an existing mark).

        Returns True when something was written.
        """
        path = mark_path(ledger_id)
        for _ in range(50):
            got = self.store.get(path)
            if got is None:
                try:
                    self.store.create(path, encode_mark(replicas, int(time.time() * 1000)), makepath=True)
                    return True
                except ZNodeExistsError:
                    continue
            old, ctime = decode_mark(got[0])
            merged = sorted(set(old) | set(replicas))
            if merged == sorted(old):
                return False
            try:
                self.store.cas(path, encode_mark(merged, ctime), got[1])
                return True
            except (MetadataVersionError, NoSuchNodeError):
                continue
        raise MetadataVersionError(f"{path}: could not merge the mark (too many concurrent changes)")

    def get_mark(self, ledger_id: int) -> UnderReplicated | None:
        got = self.store.get(mark_path(ledger_id))
        if got is None:
            return None
        replicas, ctime = decode_mark(got[0])
        return UnderReplicated(ledger_id, replicas, ctime, got[1])

    def list_marked(self) -> list[UnderReplicated]:
        """Every marked ledger, sorted by id (walks the four hex levels)."""
        out: list[UnderReplicated] = []
        self._walk(UR_LEDGERS, 0, out)
        return sorted(out, key=lambda m: m.ledger_id)

    def _walk(self, path: str, depth: int, out: list[UnderReplicated]) -> None:
        for name in self.store.children(path):
            child = f"{path}/{name}"
            if depth < 4:
                if len(name) == 4:
                    self._walk(child, depth + 1, out)
            elif name.startswith(UR_PREFIX) and name[len(UR_PREFIX):].isdigit():
                mark = self.get_mark(int(name[len(UR_PREFIX):]))
                if mark is not None:
                    out.append(mark)

    def unmark(self, ledger_id: int, version: int = -1) -> bool:
        """Delete the mark if still at `version` (-1: any). False if it changed or is gone."""
        path = mark_path(ledger_id)
        try:
            self.store.delete(path, version)
        except (MetadataVersionError, NoSuchNodeError):
            return False
        groups = hex_groups(ledger_id)
        for depth in range(4, 0, -1):   # prune empty parents, best effort (a racing create recreates them)
            parent = "/".join([UR_LEDGERS, *groups[:depth]])
            try:
                if self.store.children(parent):
                    break
                self.store.delete(parent, -1)
            except Exception:  # noqa: BLE001 - someone created a child meanwhile; leave it
                break
        return True

    # ---- locks ---------------------------------------------------------------------------
    def try_lock(self, ledger_id: int, owner: str) -> bool:
        """Take the ephemeral replication lock; False if another worker holds it."""
        data = fpb.LockDataFormat(bookie_id=owner).SerializeToString()
        try:
            self.store.create(lock_path(ledger_id), data, ephemeral=True, makepath=True)
            return True
        except ZNodeExistsError:
            return False

    def release_lock(self, ledger_id: int) -> None:
        with contextlib.suppress(NoSuchNodeError):
            self.store.delete(lock_path(ledger_id), -1)

    def lock_owner(self, ledger_id: int) -> str | None:
        got = self.store.get(lock_path(ledger_id))
        if got is None:
            return None
        msg = fpb.LockDataFormat()
        with contextlib.suppress(Exception):
            msg.ParseFromString(got[0])
        return msg.bookie_id or "?"

    # ---- cluster switches ----------------------------------------------------------------
    def is_enabled(self) -> bool:
        return not self.store.exists(UR_DISABLE)

    def set_enabled(self, enabled: bool) -> None:
        if enabled:
            with contextlib.suppress(NoSuchNodeError):
                self.store.delete(UR_DISABLE, -1)
        elif not self.store.exists(UR_DISABLE):
            with contextlib.suppress(ZNodeExistsError):
                self.store.create(UR_DISABLE, b"", makepath=True)

    def lost_bookie_recovery_delay(self, default: int) -> int:
        got = self.store.get(UR_DELAY)
        if got is None:
            return default
        try:
            return max(int(got[0].decode().strip()), 0)
        except ValueError:
            return default

    def set_lost_bookie_recovery_delay(self, seconds: int) -> None:
        data = str(int(seconds)).encode()
        if self.store.get(UR_DELAY) is None:
            with contextlib.suppress(ZNodeExistsError):
                self.store.create(UR_DELAY, data, makepath=True)
                return
        self.store.cas(UR_DELAY, data, -1)

    # ---- auditor election ----------------------------------------------------------------
    def vote(self, bookie_id: str) -> str:
        """Cast an ephemeral sequential vote; returns its node name (V_<seq>).

        A create whose answer was lost is retried, and may have made a vote already: one of this session
        but for the returned one. Such a vote is deleted here, or it could sit lower than the returned one,
        stand in this daemon's way and be taken for another daemon's: no auditor while this session lives."""
        data = text_format.MessageToString(fpb.AuditorVoteFormat(bookie_id=bookie_id)).encode()
        made = self.store.create(f"{UR_ELECTION}/{VOTE_PREFIX}", data, ephemeral=True, sequence=True)
        name = made.rsplit("/", 1)[1]
        for other in self.votes():
            path = f"{UR_ELECTION}/{other}"
            if other != name and self.store.owned_by_this_session(path):
                with contextlib.suppress(NoSuchNodeError):
                    self.store.delete(path)
        return name

    def votes(self) -> list[str]:
        """The votes in election order (lowest sequence number first)."""
        names = [n for n in self.store.children(UR_ELECTION) if n.startswith(VOTE_PREFIX)]
        return sorted(names, key=lambda n: int(n[len(VOTE_PREFIX):]) if n[len(VOTE_PREFIX):].isdigit() else 2**62)

    def vote_owner(self, vote: str) -> str | None:
        got = self.store.get(f"{UR_ELECTION}/{vote}")
        if got is None:
            return None
        msg = fpb.AuditorVoteFormat()
        with contextlib.suppress(text_format.ParseError, UnicodeDecodeError):
            text_format.Parse(got[0].decode(), msg)
        return msg.bookie_id or None

    def auditor(self) -> str | None:
        """The bookie id of the elected auditor, None if nobody votes."""
        for vote in self.votes():
            owner = self.vote_owner(vote)
            if owner is not None:
                return owner
        return None
