"""One simulated run: build the cluster from a seed, chaos, heal, final recovery and the final read.

The phases: (1) chaos: the writer streams adds, a reader tails, recoverers start at random, faults are
injected, for a bounded number of steps; (2) heal: every fault undone, the writer stops adding (it may
still close); (3) a final recoverer must close the ledger within a bounded number of steps (oracle 7);
(4) a final reader reads the closed ledger whole (oracle 2). The oracle runs after every step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from client.protocol.digest import DigestManager
from client.protocol.metadata import LedgerState
from client.protocol.recovery import DEFAULT_RULES, RecoveryRules
from client.protocol.transforms import new_ledger_metadata
from tests.sim.bookie import SimBookie
from tests.sim.faults import Faults
from tests.sim.meta import MetaStore
from tests.sim.net import Network
from tests.sim.oracle import Oracle, SimViolation
from tests.sim.reader import Reader
from tests.sim.recoverer import Recoverer
from tests.sim.world import World
from tests.sim.writer import Writer

QUORUMS = ((3, 3, 2), (3, 2, 2), (5, 3, 2), (4, 2, 2), (3, 3, 3), (2, 2, 1))
DIGESTS = ("crc32c", "crc32", "hmac", "dummy")
LEDGER_ID = 1 << 33 | 7    # above 2^31, like a long-hierarchical id
SETTLE = 300
CHAOS_TAIL = 400
FINAL_STEPS = 30_000


@dataclasses.dataclass(frozen=True)
class SimOptions:
    steps: int = 3000                          # chaos-phase step budget
    rules: RecoveryRules = DEFAULT_RULES       # a broken copy for mutation tests
    ack_before_sync: bool = False              # a broken bookie for mutation tests
    fence_shortcut: bool = False               # a broken bookie for mutation tests
    verbose: bool = False
    mutation: str = "none"                     # the runner's --mutation name, for the replay command


@dataclasses.dataclass(frozen=True)
class RunResult:
    seed: int
    steps: int
    trace_hash: str
    acked_lac: int
    last_entry_id: int | None
    violation: SimViolation | None
    summary: str


class Simulation:
    """The cluster of one seed."""

    def __init__(self, seed: int, options: SimOptions) -> None:
        self.options = options
        self.world = world = World(seed, verbose=options.verbose)
        rng = world.rng
        e, qw, qa = rng.choice(QUORUMS)
        n_bookies = e + rng.randint(1, 3)
        digest_type = rng.choice(DIGESTS)
        self.password = rng.randbytes(8)
        self.digest = DigestManager(digest_type, self.password)
        self.net = Network(world, loss=rng.choice([0.0, 0.01, 0.05]), dup=rng.choice([0.0, 0.02, 0.05]),
                           max_delay=rng.choice([3, 8, 15]))
        flags = "" if options.mutation == "none" else f" --mutation {options.mutation}"
        self.oracle = Oracle(world, LEDGER_ID, flags)
        group_wait = rng.choice([2, 4, 12, 30])
        self.store = MetaStore(world, self.net, self.oracle)
        self.net.register(self.store)
        self.bookies = [SimBookie(f"bookie-{i}", world, self.net, self.oracle,
                                  ack_before_sync=options.ack_before_sync,
                                  fence_shortcut=options.fence_shortcut, group_wait=group_wait)
                        for i in range(n_bookies)]
        for bookie in self.bookies:
            self.net.register(bookie)
        names = [b.name for b in self.bookies]
        md = new_ledger_metadata(LEDGER_ID, rng.sample(names, e), e, qw, qa, digest_type, self.password, 0)
        version = self.store.create(md)
        self.writer = Writer(world, self.net, self.oracle, md, version, names, self.digest, self.password,
                             max_adds=rng.randint(10, 250), window=rng.choice([1, 4, 16]))
        self.reader = Reader("reader", world, self.net, self.oracle, LEDGER_ID, self.digest)
        self.recoverers: list[Recoverer] = []
        self._writer_done_at = -1
        self.faults = Faults(world, self.net, self.bookies, self.writer, self._clients, self._chaos_recoverer)
        world.note(f"setup: {n_bookies} bookies, E={e} Qw={qw} Qa={qa}, {digest_type}, "
                   f"{self.writer.max_adds} adds, ensemble {list(md.last_fragment.ensemble)}")

    def _clients(self) -> list[str]:
        return ["writer", "reader"] + [r.name for r in self.recoverers]

    def _chaos_recoverer(self) -> None:
        self._new_recoverer()

    def _new_recoverer(self, *, final: bool = False) -> Recoverer:
        name = "recoverer-final" if final else f"recoverer-{len(self.recoverers) + 1}"
        rec = Recoverer(name, self.world, self.net, self.oracle, LEDGER_ID, [b.name for b in self.bookies],
                        self.digest, self.password, self.options.rules, max_attempts=40 if final else 4)
        self.recoverers.append(rec)
        rec.start()
        return rec

    # ---- phases -----------------------------------------------------------------------------------------
    def _run_until(self, done: Callable[[], bool], budget: int) -> bool:
        """Step until `done()` is true or `budget` steps ran; the oracle checks after every step."""
        world, oracle = self.world, self.oracle
        for _ in range(budget):
            if done():
                return True
            if not world.step():
                return bool(done())
            oracle.check_step()
        return bool(done())

    def _chaos_over(self) -> bool:
        """The writer is done (closed, failed or crashed) and had CHAOS_TAIL time units of aftermath."""
        if not self.writer.finished:
            self._writer_done_at = -1
            return False
        if self._writer_done_at < 0:
            self._writer_done_at = self.world.now
        return self.world.now >= self._writer_done_at + CHAOS_TAIL

    def run(self) -> None:
        world = self.world
        self.writer.start()
        self.reader.start()
        self.faults.start()
        self._run_until(self._chaos_over, self.options.steps)
        world.note("phase: heal")
        self.faults.heal_all()
        self.writer.stop_adding()
        if not self.writer.finished and world.chance(0.5):
            self.writer.crash()     # kill -9 with adds in flight; the final recovery closes the ledger
        self.reader.stopped = True
        settle_until = world.now + SETTLE
        self._run_until(lambda: world.now >= settle_until, FINAL_STEPS)
        md = self.store.get(LEDGER_ID)[1]
        if md.ack_quorum >= 2 and world.chance(0.5):
            # Oracle 7, "no hang on a paused bookie": one bookie stays paused (SIGSTOP) for the rest of the run.
            hung = world.rng.choice(self.bookies)
            world.note(f"final: {hung.name} stays paused")
            hung.pause()
        final = self._new_recoverer(final=True)
        if not self._run_until(lambda: final.done or final.gave_up, FINAL_STEPS) or not final.done:
            self.oracle.fail("7", f"with every bookie reachable, recovery did not close the ledger within "
                             f"{FINAL_STEPS} steps ({final.attempts} attempts)")
        md = self.store.get(LEDGER_ID)[1]
        if md.state is not LedgerState.CLOSED:
            self.oracle.fail("7", f"the final recovery finished but the ledger is {md.state.name}")
        reader = Reader("reader-final", world, self.net, self.oracle, LEDGER_ID, self.digest, final=True)
        reader.start()
        if not self._run_until(lambda: reader.done, FINAL_STEPS):
            self.oracle.fail("2", f"the final reader could not read the closed ledger (stopped at entry "
                             f"{reader.next_entry} of {md.last_entry_id})")
        self.oracle.final_check(reader.got, md)


def run_seed(seed: int, options: SimOptions = SimOptions()) -> RunResult:
    """Run one seed; a violation is returned in the result (not raised)."""
    sim = Simulation(seed, options)
    violation: SimViolation | None = None
    try:
        sim.run()
    except SimViolation as exc:
        violation = exc
    md = sim.store.get(LEDGER_ID)[1]
    last = md.last_entry_id if md.state is LedgerState.CLOSED else None
    world = sim.world
    summary = (f"seed {seed}: {world.steps} steps, t={world.now}, acked LAC {sim.oracle.acked_lac}, "
               f"last entry id {last}, {len(md.fragments)} fragments, {sim.oracle.reads} entries read, "
               f"{'VIOLATION ' + violation.rule if violation else 'ok'}")
    return RunResult(seed, world.steps, world.trace_hash, sim.oracle.acked_lac, last, violation, summary)
