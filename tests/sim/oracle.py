"""The oracle of PROTOCOL.md ("what must be true after any run, any fault"), checked as the run goes.

Every rule is checked at the moment the simulation learns something (an entry stored on a bookie, a
metadata write, an entry returned to a reader, an add accepted by a bookie), and `check_step()` runs after
every step for the rules about the stored metadata. The end-of-run checks (oracle 2 and 7) are called by
the scenario after a final recovery with everything healed. A violation raises SimViolation naming the rule,
the seed and the command that replays it.

Beyond PROTOCOL.md's list it checks the invariants of the TLA+ specification those items mirror: the LAC
never runs ahead of a quorum (each acknowledged entry is durable on Qa bookies when acknowledged), a ledger
closes only over entries durable on Qa bookies of their write sets, a bookie fences a ledger only after its
metadata left OPEN (R12, R14), and a log writer that took over a tail ledger sees it final (R28).
"""

from __future__ import annotations

from bkledger.client.protocol.metadata import LedgerMetadata, LedgerState
from bkledger.client.protocol.reads import read_order
from tests.sim.world import World


class SimViolation(AssertionError):
    """An oracle rule was broken; the message says which, in which seed, and how to replay it."""

    def __init__(self, seed: int, rule: str, message: str) -> None:
        super().__init__(f"oracle {rule} violated in seed {seed}: {message}")
        self.seed = seed
        self.rule = rule


class Oracle:
    """What the clients were promised, and what the bookies and the metadata store hold."""

    def __init__(self, world: World, ledger_id: int, replay_flags: str = "") -> None:
        self.world = world
        self.replay_flags = replay_flags          # e.g. " MUTATION=no-fence-reads STEPS=400" (make variables)
        self.ledger_id = ledger_id
        self.bodies: dict[int, bytes] = {}        # packaged entry the writer made for each entry id
        self.payloads: dict[int, bytes] = {}
        self.acked_lac = -1                         # highest entry the writer saw acknowledged (R6)
        self.closers: list[tuple[str, int]] = []    # (client, last entry id it was told)
        self.stored: LedgerMetadata | None = None
        self.fence_promised: set[tuple[str, int]] = set()
        self.copies: dict[int, set[str]] = {}      # entry id -> bookies that hold it durably
        self.seals: list[tuple[str, int]] = []      # (log successor, last entry id it sealed the tail at)
        self.bookie_acks: set[tuple[str, int]] = set()       # (bookie, entry) it acknowledged to the writer
        self.negatives: set[tuple[str, int]] = set()         # (bookie, entry) it told a recovery is missing
        self.reads = 0

    def fail(self, rule: str, message: str) -> None:
        tail = "\n    ".join(self.world.recent)
        seed = self.world.seed
        replay = f"make sim SEED={seed}{self.replay_flags}"
        raise SimViolation(
            seed, rule,
            f"{message}\n  at t={self.world.now}, step {self.world.steps}\n  replay: {replay}"
            f"\n  last trace lines:\n    {tail}")

    # ---- the writer ------------------------------------------------------------------------------------
    def on_entry_created(self, entry_id: int, payload: bytes, body: bytes) -> None:
        if entry_id in self.bodies:
            self.fail("setup", f"the writer made entry {entry_id} twice")
        self.bodies[entry_id] = body
        self.payloads[entry_id] = payload

    def on_acked(self, first: int, last: int) -> None:
        """R6: acknowledgements come in order, without gaps, and the LAC only grows."""
        if first != self.acked_lac + 1:
            self.fail("R6", f"acks {first}..{last} do not follow the LAC {self.acked_lac}")
        qa = self.stored.ack_quorum if self.stored is not None else 1
        for entry_id in range(first, last + 1):
            holders = self.copies.get(entry_id, set())
            if len(holders) < qa:
                self.fail("R6", f"LAC beyond a quorum: entry {entry_id} acknowledged while durable on "
                          f"{sorted(holders)} only (Qa={qa})")
        self.acked_lac = last
        self.world.note(f"oracle: writer LAC={last}")
        self.check_step()

    def on_close_result(self, client: str, last_entry_id: int) -> None:
        """Oracle 1: every client that learns the ledger closed agrees on one last entry id."""
        self.closers.append((client, last_entry_id))
        self.world.note(f"oracle: {client} says closed at {last_entry_id}")
        self.check_step()

    def on_tail_sealed(self, client: str, last_entry_id: int) -> None:
        """R28: a new log writer took over; from now on the tail ledger must end exactly at `last_entry_id`
        (no later acknowledgement above it, the final close at it)."""
        self.seals.append((client, last_entry_id))
        self.world.note(f"oracle: {client} sealed the tail at {last_entry_id}")
        self.check_step()

    # ---- the metadata store ------------------------------------------------------------------------------
    def on_metadata_write(self, old: LedgerMetadata | None, new: LedgerMetadata) -> None:
        """Oracle 5 (fragments) and R4 (CLOSED is terminal) on every stored version."""
        frags = new.fragments
        if not frags or frags[0].first_entry_id != 0:
            self.fail("5", f"first fragment must start at entry 0: {frags}")
        for prev, cur in zip(frags, frags[1:], strict=False):
            if cur.first_entry_id <= prev.first_entry_id:
                self.fail("5", f"fragment first ids not strictly increasing: {frags}")
        for frag in frags:
            if len(frag.ensemble) != new.ensemble_size or len(set(frag.ensemble)) != new.ensemble_size:
                self.fail("5", f"fragment {frag} does not have {new.ensemble_size} distinct bookies")
        if old is not None and old.state is LedgerState.CLOSED and new != old:
            self.fail("R4", f"a CLOSED ledger was changed: {old} -> {new}")
        if old is not None and old.state is LedgerState.IN_RECOVERY and new.state is LedgerState.OPEN:
            self.fail("R14", "IN_RECOVERY went back to OPEN")
        if new.state is LedgerState.CLOSED and (old is None or old.state is not LedgerState.CLOSED):
            self._check_closed_on_quorums(new)
        self.stored = new
        self.check_step()

    def _check_closed_on_quorums(self, md: LedgerMetadata) -> None:
        """R6/R19: a ledger closes only over entries durable on Qa bookies of their write sets (acknowledged
        entries were; recovered ones were written back), so every entry stays readable with Qw - Qa down."""
        for entry_id in range(md.last_entry_id + 1):
            members = set(read_order(md, entry_id))
            holders = self.copies.get(entry_id, set()) & members
            if len(holders) < md.ack_quorum:
                self.fail("R19", f"closed at last entry {md.last_entry_id} but entry {entry_id} is durable on "
                          f"{sorted(holders)} of its write set {sorted(members)} only (Qa={md.ack_quorum})")

    # ---- bookies --------------------------------------------------------------------------------------------
    def on_bookie_stored(self, bookie: str, ledger_id: int, entry_id: int, body: bytes) -> None:
        """Oracle 4: every copy of an entry, on any bookie, is the writer's bytes (so all copies agree). Other
        ledgers (a buggy client's own, `tests.sim.buggy`) are not the simulated ledger's data."""
        if ledger_id != self.ledger_id:
            return
        want = self.bodies.get(entry_id)
        if want is None:
            self.fail("4", f"{bookie} holds L{ledger_id}/e{entry_id} that no writer made")
        if body != want:
            self.fail("4", f"{bookie} holds different bytes for L{ledger_id}/e{entry_id} than the writer sent")
        self.copies.setdefault(entry_id, set()).add(bookie)

    def on_fenced(self, bookie: str, ledger_id: int) -> None:
        """R12/R14: fencing belongs to recovery, which first moves the metadata out of OPEN: a bookie that
        fences a ledger whose stored metadata is still OPEN was fenced by a plain open. A fence of another
        ledger id (a buggy client's, `tests.sim.buggy`) does not concern it."""
        if ledger_id != self.ledger_id:
            return
        if self.stored is not None and self.stored.state is LedgerState.OPEN:
            self.fail("R12", f"{bookie} fenced L{ledger_id} while its metadata is OPEN (no recovery started)")

    def on_fence_promised(self, bookie: str, ledger_id: int) -> None:
        self.fence_promised.add((bookie, ledger_id))

    def on_recovery_reading(self, client: str, ensemble: tuple[str, ...], qw: int, qa: int) -> None:
        """R16: a recovery reads entries only once no ack quorum of the last ensemble is left unfenced, i.e.
        every write set holds at least Qw - Qa + 1 bookies that answered it is fenced (else the writer can
        still complete adds the recovery will not see)."""
        e, need = len(ensemble), qw - qa + 1
        for first in range(e):
            members = [ensemble[(first + k) % e] for k in range(qw)]
            fenced = [b for b in members if (b, self.ledger_id) in self.fence_promised]
            if len(fenced) < need:
                self.fail("R16", f"{client} reads entries while write set {members} has only {fenced} fenced "
                          f"({need} needed): an ack quorum is left unfenced")

    def on_bookie_acked(self, bookie: str, entry_id: int) -> None:
        """R8/R22: a bookie acknowledged a normal add of entry_id (sent after the fsync that made it durable)."""
        self.bookie_acks.add((bookie, entry_id))
        if (bookie, entry_id) in self.negatives:
            self.fail("R18", f"{bookie} acknowledged entry {entry_id} after telling a recovery it does not have "
                      "it: a negative answer must be final (fence first, answer once durable)")

    def on_recovery_negative(self, bookie: str, entry_id: int) -> None:
        """R18/R22: `bookie` answers a recovery read that it has no entry_id (NoSuchEntry/NoSuchLedger). That
        must stay true: the bookie never acknowledged it before (lost data) nor acknowledges it later."""
        self.negatives.add((bookie, entry_id))
        if (bookie, entry_id) in self.bookie_acks:
            self.fail("R18", f"{bookie} tells a recovery it does not have entry {entry_id}, which it acknowledged "
                      "to the writer: a negative answer must be final and never contradict an ack (R18, R22)")

    def on_add_accepted(self, bookie: str, ledger_id: int, entry_id: int) -> None:
        """Oracle 6: once a bookie said the ledger is fenced, no non-recovery add gets in, restarts included."""
        if (bookie, ledger_id) in self.fence_promised:
            self.fail("6", f"{bookie} accepted a normal add of L{ledger_id}/e{entry_id} after answering that "
                      "the ledger is fenced")

    # ---- readers ----------------------------------------------------------------------------------------------
    def on_reader_entry(self, reader: str, entry_id: int, payload: bytes, md: LedgerMetadata, lac: int) -> None:
        """Oracle 3 (never above the LAC / last entry id) and the byte-for-byte part of oracle 2."""
        self.reads += 1
        if md.state is LedgerState.CLOSED:
            if entry_id > md.last_entry_id:
                self.fail("3", f"{reader} got entry {entry_id} above the last entry id {md.last_entry_id}")
        else:
            if entry_id > lac:
                self.fail("3", f"{reader} got entry {entry_id} above its LAC {lac}")
            if lac > self.acked_lac:
                self.fail("3", f"{reader} used LAC {lac} above the writer's LAC {self.acked_lac}")
            if entry_id > self.acked_lac:
                self.fail("3", f"{reader} got entry {entry_id} that is not acknowledged (LAC {self.acked_lac})")
        if payload != self.payloads.get(entry_id):
            self.fail("2", f"{reader} read entry {entry_id} with bytes the writer did not write")

    # ---- after every step -------------------------------------------------------------------------------------
    def check_step(self) -> None:
        """Oracle 1 against the stored metadata: no acknowledged entry above the last entry id; one answer."""
        md = self.stored
        for client, sealed in self.seals:
            if self.acked_lac > sealed:
                self.fail("R28", f"entry {self.acked_lac} was acknowledged to the writer after {client} sealed "
                          f"the tail at {sealed}: two log writers")
            if md is not None and md.state is LedgerState.CLOSED and md.last_entry_id != sealed:
                self.fail("R28", f"{client} sealed the tail at {sealed} but it closed at {md.last_entry_id}")
        if md is None or md.state is not LedgerState.CLOSED:
            if self.closers:
                self.fail("1", f"{self.closers[0][0]} says closed but the stored ledger is not CLOSED")
            return
        if self.acked_lac > md.last_entry_id:
            self.fail("1", f"truncation: entry {self.acked_lac} was acknowledged to the writer but the ledger "
                      f"closed at last entry id {md.last_entry_id}")
        for client, last in self.closers:
            if last != md.last_entry_id:
                self.fail("1", f"{client} says last entry id {last}, the stored ledger says {md.last_entry_id}")

    def final_check(self, read: dict[int, bytes], md: LedgerMetadata) -> None:
        """Oracle 2 at the end: with everything healed, every entry up to the last entry id is readable and is
        exactly what the writer wrote; every acknowledged entry is among them."""
        self.check_step()
        for entry_id in range(md.last_entry_id + 1):
            if entry_id not in read:
                self.fail("2", f"entry {entry_id} (<= last entry id {md.last_entry_id}) is not readable")
            if read[entry_id] != self.payloads.get(entry_id):
                self.fail("2", f"entry {entry_id} reads back different bytes")
