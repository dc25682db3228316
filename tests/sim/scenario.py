"""One simulated run: draw the seed's world (swarm), chaos, heal, final recovery and the final read.

The phases: (1) chaos: the writer streams adds, a reader tails, recoverers start at random, faults are
injected, a buggy client (in half the seeds) sends bad requests, for a bounded number of steps; (2) heal:
every fault undone, the writer stops adding (it may still close); (3) a final recoverer must close the
ledger within a bounded number of steps (oracle 7); (4) a final reader reads the closed ledger whole
(oracle 2). The oracle runs after every step.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable

from bkledger.client.protocol.digest import DigestManager, master_key
from bkledger.client.protocol.metadata import LedgerState
from bkledger.client.protocol.recovery import RecoveryRules
from bkledger.client.protocol.transforms import new_ledger_metadata
from tests.sim import swarm as swarms
from tests.sim.bookie import SimBookie
from tests.sim.buggy import BuggyClient
from tests.sim.faults import Faults
from tests.sim.meta import MetaStore
from tests.sim.mutations import MUTATIONS, bookie_rules, log_rules, reader_rules, recovery_rules
from tests.sim.net import Network
from tests.sim.oracle import Oracle, SimViolation
from tests.sim.reader import Reader
from tests.sim.recoverer import Recoverer
from tests.sim.world import World
from tests.sim.writer import Writer

DIGESTS = ("crc32c", "crc32", "hmac", "dummy")
LEDGER_ID = 1 << 33 | 7    # above 2^31, like a long-hierarchical id
SETTLE = 300
CHAOS_TAIL = 400
#: The final phases (settle, final recovery, final read) are bounded in simulated time, not in steps: after a
#: storm of racing recoveries their late answers and retries fill many steps without meaning any hang.
FINAL_TIME = 30_000
FINAL_STEPS = 2_000_000     # a guard against a run that never ends
BUGGY_SHARE = 0.5           # seeds with a buggy client (wild entry ids, rewrites, fences of unknown ids)


@dataclasses.dataclass(frozen=True)
class SimOptions:
    steps: int = 3000                          # chaos-phase step budget
    mutation: str = "none"                     # a mutants.MUTATIONS name: one deliberately broken rule
    verbose: bool = False

    def __post_init__(self) -> None:
        if self.mutation != "none" and self.mutation not in MUTATIONS:
            raise ValueError(f"unknown mutation {self.mutation!r}: pick one of {sorted(MUTATIONS)}")

    @property
    def rules(self) -> RecoveryRules:
        return recovery_rules(self.mutation)


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
        self.swarm = sw = swarms.draw(rng)
        e, qw, qa = sw.quorum
        n_bookies = e + sw.extra_bookies
        digest_type = rng.choice(DIGESTS)
        self.password = rng.randbytes(8)
        self.digest = DigestManager(digest_type, self.password)
        # A timeout above a normal round trip (two network delays and a group commit); slow messages and slow
        # bookies still exceed it.
        world.timeout = 2 * sw.max_delay + max(sw.group_waits) + 10 + rng.choice([0, 20, 60])
        self.net = Network(world, loss=sw.loss, dup=sw.dup, max_delay=sw.max_delay, slow_rate=sw.slow_rate,
                           slow_delay=sw.slow_delay)
        flags = "" if options.mutation == "none" else f" MUTATION={options.mutation}"
        if options.steps != SimOptions.steps:
            flags += f" STEPS={options.steps}"
        self.oracle = Oracle(world, LEDGER_ID, flags)
        self.store = MetaStore(world, self.net, self.oracle)
        self.net.register(self.store)
        self.bookies = [SimBookie(f"bookie-{i}", world, self.net, self.oracle, rules=bookie_rules(options.mutation),
                                  group_wait=sw.group_waits[i])
                        for i in range(n_bookies)]
        for bookie in self.bookies:
            self.net.register(bookie)
        names = [b.name for b in self.bookies]
        md = new_ledger_metadata(LEDGER_ID, rng.sample(names, e), e, qw, qa, digest_type, self.password, 0)
        version = self.store.create(md)
        self.writer = Writer(world, self.net, self.oracle, md, version, names, self.digest, self.password,
                             max_adds=sw.max_adds, window=sw.window, add_gap=sw.add_gap, mutation=options.mutation)
        self.reader = self._reader("reader")
        self.recoverers: list[Recoverer] = []
        self._writer_done_at = -1
        # A bookie's corrupt copy is caught by the digest, except with DUMMY (no digest at all).
        self.faults = Faults(world, self.net, self.bookies, self.writer, self._clients, self._chaos_recoverer,
                             sw, self._successor, can_corrupt=digest_type != "dummy")
        self.buggy = self._buggy_client(seed, names)
        world.note(f"setup: {n_bookies} bookies, E={e} Qw={qw} Qa={qa}, {digest_type}, "
                   f"{self.writer.max_adds} adds, ensemble {list(md.last_fragment.ensemble)}")
        world.note(sw.describe())

    def _buggy_client(self, seed: int, names: list[str]) -> BuggyClient | None:
        """In BUGGY_SHARE of the seeds, a buggy client (`tests.sim.buggy`); drawn from a random source of its
        own, so a seed without one runs exactly as before it existed."""
        rng = random.Random(f"buggy-{seed}")
        if rng.random() >= BUGGY_SHARE:
            return None
        budget = rng.randint(3, 8)
        self.world.note(f"setup: a buggy client sends {budget} bad requests")
        return BuggyClient(self.world, self.net, self.oracle, LEDGER_ID, names, self.digest, self.password, rng,
                           budget)

    def _reader(self, name: str, *, final: bool = False) -> Reader:
        return Reader(name, self.world, self.net, self.oracle, LEDGER_ID, self.digest, final=final,
                      speculative_timeout=self.swarm.speculative_timeout, key=master_key(self.password),
                      rules=reader_rules(self.options.mutation))

    def _clients(self) -> list[str]:
        return ["writer", "reader"] + [r.name for r in self.recoverers]

    def _chaos_recoverer(self) -> None:
        self._new_recoverer()

    def _successor(self) -> None:
        self._new_recoverer(successor=True)

    def _new_recoverer(self, *, final: bool = False, successor: bool = False) -> Recoverer:
        kind = "successor" if successor else "recoverer"
        name = "recoverer-final" if final else f"{kind}-{len(self.recoverers) + 1}"
        rec = Recoverer(name, self.world, self.net, self.oracle, LEDGER_ID, [b.name for b in self.bookies],
                        self.digest, self.password, self.options.rules, max_attempts=40 if final else 4,
                        successor=successor, log_rules=log_rules(self.options.mutation))
        self.recoverers.append(rec)
        rec.start()
        return rec

    # ---- phases -----------------------------------------------------------------------------------------
    def _run_until(self, done: Callable[[], bool], budget: int, deadline: int | None = None) -> bool:
        """Step until `done()` is true, `budget` steps ran or the clock passed `deadline`; the oracle checks
        after every step."""
        world, oracle = self.world, self.oracle
        for _ in range(budget):
            if done():
                return True
            if deadline is not None and world.now > deadline:
                break
            if not world.step():
                return bool(done())
            oracle.check_step()
        return bool(done())

    def _final(self, done: Callable[[], bool]) -> bool:
        return self._run_until(done, FINAL_STEPS, self.world.now + FINAL_TIME)

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
        if self.buggy is not None:
            self.buggy.start()
        self._run_until(self._chaos_over, self.options.steps)
        world.note("phase: heal")
        self.faults.heal_all()
        for rec in self.recoverers:
            rec.resume()
        self.writer.stop_adding()
        if not self.writer.finished and world.chance(0.5):
            self.writer.crash()     # kill -9 with adds in flight; the final recovery closes the ledger
        self.reader.stopped = True
        settle_until = world.now + SETTLE
        self._final(lambda: world.now >= settle_until)
        md = self.store.get(LEDGER_ID)[1]
        if md.ack_quorum >= 2 and world.chance(0.5):
            # Oracle 7, "no hang on a paused bookie": one bookie stays paused (SIGSTOP) for the rest of the run.
            hung = world.rng.choice(self.bookies)
            world.note(f"final: {hung.name} stays paused")
            hung.pause()
        final = self._new_recoverer(final=True)
        if not self._final(lambda: final.done or final.gave_up) or not final.done:
            self.oracle.fail("7", f"with every bookie reachable, recovery did not close the ledger within "
                             f"{FINAL_TIME} time units ({final.attempts} attempts)")
        md = self.store.get(LEDGER_ID)[1]
        if md.state is not LedgerState.CLOSED:
            self.oracle.fail("7", f"the final recovery finished but the ledger is {md.state.name}")
        reader = self._reader("reader-final", final=True)
        reader.start()
        if not self._final(lambda: reader.done):
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
