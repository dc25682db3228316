"""Random fault injection for the chaos phase, and healing everything for the end of a run.

Mirrors the failures PROTOCOL.md's scenarios name: a bookie killed and restarted (kill -9: unsynced bytes
lost, torn tail), paused (SIGSTOP: messages held), an fsync that fails (EIO until restart), partitions
(a writer cut off from everything or from some bookies, a bookie cut off from everyone), ZooKeeper
answers lost (connection loss: "maybe written"), a writer killed or paused with adds in flight, slow bookies
(every message to and from them late), a bookie returning corrupt copies or failing reads, a rolling restart
of the ensemble, a failed storage flush (checkpoint), recoverers starting at random times
or in storms (concurrent recoveries race each other and the writer), and a new log writer taking over the
tail. Which classes run, how often, and the hazards (pause or kill an actor at a dangerous protocol point)
come from the seed's `swarm.Swarm`. Every choice comes from the world's seeded rng.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.sim.actors import Actor
from tests.sim.bookie import SimBookie
from tests.sim.meta import ZK
from tests.sim.net import Network
from tests.sim.swarm import Swarm
from tests.sim.world import World
from tests.sim.writer import Writer


class Faults:
    """Schedules one random fault every few time units while active."""

    def __init__(self, world: World, net: Network, bookies: list[SimBookie], writer: Writer,
                 clients: Callable[[], list[str]], start_recoverer: Callable[[], None], swarm: Swarm,
                 start_successor: Callable[[], None], can_corrupt: bool) -> None:
        self.world = world
        self.swarm = swarm
        self.start_successor = start_successor
        self.can_corrupt = can_corrupt
        self.kinds = [k for k in swarm.faults if k != "corrupt" or can_corrupt]
        self.weights = [swarm.faults[k] for k in self.kinds]
        world.on_hazard = self.hazard
        self.net = net
        self.bookies = bookies
        self.writer = writer
        self.clients = clients
        self.start_recoverer = start_recoverer
        self.active = True
        self._group_waits = {b.name: b.group_wait for b in bookies}
        self.mean_gap = swarm.mean_gap
        self.warmup = swarm.warmup
        self.recovery_after = swarm.recovery_after

    def start(self) -> None:
        if self.kinds:
            self.world.at(self.warmup + self.world.between(1, 2 * self.mean_gap), "fault", self._next)

    def _next(self) -> None:
        if not self.active:
            return
        kind = self.world.rng.choices(self.kinds, self.weights)[0]
        getattr(self, f"_{kind}")()
        self.world.at(self.world.between(1, 2 * self.mean_gap), "fault", self._next)

    def _later(self, low: int, high: int, label: str, fn: Callable[[], None]) -> None:
        self.world.at(self.world.between(low, high), label, lambda: fn() if self.active else None)

    def _pick_up(self) -> SimBookie | None:
        up = [b for b in self.bookies if b.up and not b.failed]
        return self.world.rng.choice(up) if up else None

    # ---- the faults ----------------------------------------------------------------------------------
    def _crash(self) -> None:
        bookie = self._pick_up()
        if bookie is not None:
            self.world.note(f"fault: crash {bookie.name}")
            bookie.crash()
            self._later(10, 200, f"restart {bookie.name}", bookie.restart)

    def _pause(self) -> None:
        bookie = self._pick_up()
        if bookie is not None and not bookie.paused:
            self.world.note(f"fault: pause {bookie.name}")
            bookie.pause()
            self._later(10, 150, f"resume {bookie.name}", bookie.resume)

    def _fsync(self) -> None:
        bookie = self._pick_up()
        if bookie is not None:
            self.world.note(f"fault: next fsync of {bookie.name} fails")
            bookie.fail_next_sync = True
            self._later(30, 200, f"restart {bookie.name}", bookie.restart)

    def _cut(self, a: str, others: list[str]) -> None:
        self.world.note(f"fault: partition {a} from {others}")
        for b in others:
            self.net.cut(a, b)

        def heal() -> None:
            for b in others:
                self.net.heal(a, b)
        self._later(10, 200, f"heal {a}", heal)

    def _cut_writer_all(self) -> None:
        self._cut(self.writer.name, [b.name for b in self.bookies] + [ZK])

    def _cut_writer_some(self) -> None:
        names = [b.name for b in self.bookies]
        chosen = self.world.rng.sample(names, self.world.between(1, max(1, len(names) // 2)))
        if self.world.chance(0.3):
            chosen.append(ZK)
        self._cut(self.writer.name, chosen)

    def _cut_bookie(self) -> None:
        bookie = self.world.rng.choice(self.bookies)
        self._cut(bookie.name, self.clients())

    def _zk_loss(self) -> None:
        self.world.note("fault: zk answers lost")
        self.net.loss_from[ZK] = 0.5

        def heal() -> None:
            self.net.loss_from.pop(ZK, None)
        self._later(10, 150, "zk answers back", heal)

    def _kill_writer(self) -> None:
        if self.writer.alive:
            self.writer.crash()
            self._later(5, 60, "recoverer after writer crash", self.start_recoverer)

    def _rolling_restart(self) -> None:
        """An operator restarts the bookies of the current ensemble one after another (kill, restart a little
        later, next one): each loses its unsynced journal bytes while the writer and recoveries go on."""
        ensemble = list(self.writer.md.last_fragment.ensemble)
        self.world.note(f"fault: rolling restart of {ensemble}")
        start = 0
        for name in ensemble:
            bookie = next(b for b in self.bookies if b.name == name)
            down = self.world.between(5, 60)
            self._later(start, start, f"rolling: stop {name}", bookie.crash)
            self._later(start + down, start + down, f"rolling: start {name}", bookie.restart)
            start += down + self.world.between(0, 30)

    def _flush_fails(self) -> None:
        """A bookie's ledger disk fails its checkpoints' flushes for a while (the journal is kept), mostly one
        that holds fences: they must stay."""
        up = [b for b in self.bookies if b.up and not b.failed]
        fenced = [b for b in up if b.fenced]
        if not up:
            return
        self._flushes_fail(self.world.rng.choice(fenced if fenced and self.world.chance(0.8) else up))

    def _flushes_fail(self, bookie: SimBookie) -> None:
        """Its checkpoints (every 10-40 time units, as flushInterval) fail for a while."""
        self.world.note(f"fault: storage flushes of {bookie.name} fail")
        end = self.world.now + self.world.between(50, 800)

        def checkpoint() -> None:
            bookie.flush_failed()
            if self.world.now < end:
                self._later(10, 40, f"a checkpoint of {bookie.name} fails", checkpoint)
        checkpoint()

    def _pause_then_recover(self) -> None:
        """PROTOCOL.md: a bookie of the current ensemble paused (SIGSTOP) while another client recovers."""
        if self.world.now < self.recovery_after:
            return
        ensemble = set(self.writer.md.last_fragment.ensemble)
        paused = [b for b in self.bookies if b.name in ensemble and b.up and not b.paused]
        if not paused:
            return
        bookie = self.world.rng.choice(paused)
        self.world.note(f"fault: pause {bookie.name}, then recover")
        bookie.pause()
        self._later(1, 30, "recoverer while paused", self.start_recoverer)
        self._later(10, 100, f"resume {bookie.name}", bookie.resume)

    def _recoverer(self) -> None:
        if self.world.now >= self.recovery_after:
            self.start_recoverer()

    def _slow_bookie(self) -> None:
        """A bookie that still answers, but late (long GC, hung disk): past timeouts and speculation."""
        bookie = self.world.rng.choice(self.bookies)
        extra = self.world.rng.choice([20, 60, 200])
        self.world.note(f"fault: {bookie.name} slow by {extra}")
        self.net.slow_nodes[bookie.name] = extra
        def fast() -> None:
            self.net.slow_nodes.pop(bookie.name, None)
        self._later(50, 600, f"{bookie.name} fast again", fast)

    def _slow_disk(self) -> None:
        """A bookie's journal disk (mostly one of the writer's ensemble) turns slow: fsyncs take long, so
        what it journaled stays unsynced (not yet readable, not yet acknowledged) while requests arrive."""
        ensemble = set(self.writer.md.last_fragment.ensemble)
        members = [b for b in self.bookies if b.name in ensemble]
        self._slow_disk_of(self.world.rng.choice(members if members and self.world.chance(0.7) else self.bookies))

    def _slow_disk_of(self, bookie: SimBookie) -> None:
        normal = self._group_waits[bookie.name]
        bookie.set_group_wait(self.world.rng.choice([100, 300]))
        self.world.note(f"fault: {bookie.name} journal disk slow (group wait {bookie.group_wait})")

        def fast() -> None:
            bookie.set_group_wait(normal)
        self._later(100, 600, f"{bookie.name} disk fast again", fast)

    def _pause_writer(self) -> None:
        if self.writer.alive and not self.writer.paused:
            self.writer.pause()
            if self.world.chance(0.7):
                self._later(1, 40, "recoverer while the writer is paused", self.start_recoverer)
            self._later(20, 400, "resume writer", self.writer.resume)

    def _recovery_storm(self) -> None:
        """Several recoveries at nearly the same time, racing each other (and the writer)."""
        for _ in range(self.world.between(2, 4)):
            self._later(0, 10, "recoverer of a storm", self.start_recoverer)

    def _corrupt(self) -> None:
        self._corrupt_one(self.world.rng.choice(self.bookies))

    def _corrupt_one(self, bookie: SimBookie) -> None:
        self.world.note(f"fault: {bookie.name} returns corrupt copies")
        bookie.corrupt = True

        def heal() -> None:
            bookie.corrupt = False
        self._later(30, 400, f"{bookie.name} returns good copies", heal)

    def _read_errors(self) -> None:
        self._read_errors_of(self.world.rng.choice(self.bookies))

    def _read_errors_of(self, bookie: SimBookie) -> None:
        """The bookie's ledger disk fails reads (EIO at once) for a while; adds and fences still work."""
        self.world.note(f"fault: {bookie.name} ledger disk fails reads")
        bookie.read_errors = True

        def heal() -> None:
            bookie.read_errors = False
        self._later(30, 400, f"{bookie.name} reads work again", heal)

    def _successor(self) -> None:
        if self.world.now >= self.recovery_after:
            self.start_successor()

    # ---- hazards (buggify) ------------------------------------------------------------------------------
    def hazard(self, point: str, subject: object) -> None:
        """At a dangerous protocol point, maybe strike there (probability from the swarm)."""
        if not self.active or not self.world.chance(self.swarm.hazards.get(point, 0.0)):
            return
        self.world.note(f"hazard at {point}")
        if isinstance(subject, SimBookie):
            if self.world.chance(0.4):
                self._flushes_fail(subject)     # ...and its ledger disk fails checkpoints after the fence
            if self.world.chance(0.5):
                self._slow_disk_of(subject)     # the fence (and the adds before it) stay unsynced for long
                return
            # A bookie dies around its fence: before or after the fsync that makes it durable.
            self._later(0, 2 * subject.group_wait + 20, f"crash {subject.name} near its fence", subject.crash)
            self._later(25, 150, f"restart {subject.name}", subject.restart)
            return
        if not isinstance(subject, Actor):
            return
        if point == "recovery_reading" and self.world.chance(0.75):
            self._strike_recovery(subject)
            return
        if subject is self.writer and point == "writer_acked" and self.world.chance(0.4):
            subject.crash()     # dies with its newest LAC known to no bookie
            self._later(0, 30, "recoverer after writer crash", self.start_recoverer)
            return
        if subject is self.writer and point == "writer_add_sent":
            roll = self.world.rng.random()
            if roll < 0.15:
                subject.crash()
                self._later(0, 30, "recoverer after writer crash", self.start_recoverer)
                return
            if roll < 0.65:
                # A recovery races the writer while it streams adds.
                for _ in range(self.world.between(1, 3)):
                    self._later(0, 10, "recoverer racing the writer", self.start_recoverer)
                return
        subject.pause()
        for _ in range(self.world.between(1, 2)):
            self._later(0, 40, f"recoverer while {subject.name} is paused", self.start_recoverer)
        if subject is self.writer and self.world.chance(0.5):
            # The zombie writer: while it sleeps, a recovery fences its bookies and one of them restarts; it
            # wakes up after that and goes on writing.
            back = self._restart_one_of(list(self.writer.md.last_fragment.ensemble), self.world.between(30, 200))
            wake = back + self.world.between(1, 100)
            self._later(wake, wake, f"resume {subject.name}", subject.resume)
            return
        self._later(20, 500, f"resume {subject.name}", subject.resume)

    def _restart_one_of(self, names: list[str], after: int) -> int:
        """Kill one of these bookies `after` time units from now and restart it a little later; returns when."""
        name = self.world.rng.choice(names)
        bookie = next(b for b in self.bookies if b.name == name)
        self._later(after, after, f"crash {bookie.name}", bookie.crash)
        again = after + self.world.between(1, 60)
        self._later(again, again, f"restart {bookie.name}", bookie.restart)
        return again

    def _strike_recovery(self, recoverer: Actor) -> None:
        """A recovery just sent its fencing reads: the bookies it must hear from (its last ensemble, mostly)
        misbehave now: corrupt copies, a slow journal disk (fences stay unsynced), a failing journal disk
        (EIO until restart), a failing ledger disk (reads EIO at once), the recovering client's own link
        turning slow (fences answered, reads timed out), a stall past the timeouts (one or two bookies), or a
        kill -9 and quick restart (unsynced bytes lost, in-flight requests gone)."""
        md = getattr(recoverer, "md", None)
        names = set(md.last_fragment.ensemble) if md is not None and self.world.chance(0.8) else set()
        pool = [b for b in self.bookies if b.name in names] or self.bookies
        bookie = self.world.rng.choice(pool)
        strikes = ["slow_disk", "disk_fails", "read_errors", "slow_link", "slow_link", "stall", "stall", "kill",
                   "kill"]
        strike = self.world.rng.choice(strikes + (["corrupt"] if self.can_corrupt else []))
        timeout = self.world.timeout
        if strike == "corrupt":
            self._corrupt_one(bookie)
        elif strike == "slow_disk":
            self._slow_disk_of(bookie)
        elif strike == "disk_fails":
            self.world.note(f"fault: {bookie.name} journal disk fails (next fsync EIO)")
            bookie.fail_next_sync = True
            self._later(30, 200, f"restart {bookie.name}", bookie.restart)
        elif strike == "read_errors":
            self._read_errors_of(bookie)
        elif strike == "slow_link":
            delay = self.world.between(timeout // 2, 2 * timeout // 3)
            self.world.note(f"{recoverer.name}'s network slow by {delay}")
            self._slow_for(recoverer.name, delay)
        elif strike == "stall":
            for one in self.world.rng.sample(pool, min(len(pool), self.world.between(1, 2))):
                self.world.note(f"{one.name} stalls while recovery reads")
                self._slow_for(one.name, self.world.rng.choice([timeout // 2, timeout, 3 * timeout]))
        else:
            self.world.note(f"fault: {bookie.name} killed while recovery reads")
            # Around its fence answer (the fence read is in flight, the answer waits for the fsync), then a
            # quick restart (or a slow one) while the writer may still be sending.
            crash_at = self.world.between(0, self.net.max_delay + bookie.group_wait + 5)
            self._later(crash_at, crash_at, f"crash {bookie.name}", bookie.crash)
            restart_at = crash_at + self.world.rng.choice((self.world.between(1, 20), self.world.between(20, 80)))
            self._later(restart_at, restart_at, f"restart {bookie.name}", bookie.restart)

    def _slow_for(self, node: str, delay: int) -> None:
        """Every message to and from `node` takes `delay` longer, for a while."""
        self.net.slow_nodes[node] = delay

        def fast() -> None:
            self.net.slow_nodes.pop(node, None)
        self._later(30, 300, f"{node} fast again", fast)

    # ---- the end ----------------------------------------------------------------------------------------
    def heal_all(self) -> None:
        """Stop injecting and undo every fault: restart, resume, reconnect, fsyncs work again, no loss."""
        self.active = False
        self.net.heal_all()
        self.net.loss = 0.0
        self.net.slow_rate = 0.0
        if self.writer.paused:
            self.writer.resume()
        for bookie in self.bookies:
            bookie.fail_next_sync = False
            bookie.corrupt = False
            bookie.read_errors = False
            bookie.group_wait = self._group_waits[bookie.name]
            if bookie.paused:
                bookie.resume()
            if not bookie.up or bookie.failed:
                bookie.restart()
        self.world.note("heal: every fault undone")
