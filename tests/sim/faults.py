"""Random fault injection for the chaos phase, and healing everything for the end of a run.

Mirrors the failures PROTOCOL.md's scenarios name: a bookie killed and restarted (kill -9: unsynced bytes
lost, torn tail), paused (SIGSTOP: messages held), an fsync that fails (EIO until restart), partitions
(a writer cut off from everything or from some bookies, a bookie cut off from everyone), ZooKeeper
answers lost (connection loss: "maybe written"), a writer killed with adds in flight, and recoverers
starting at random times (concurrent recoveries race). Every choice comes from the world's seeded rng.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.sim.bookie import SimBookie
from tests.sim.meta import ZK
from tests.sim.net import Network
from tests.sim.world import World
from tests.sim.writer import Writer

KINDS = ("crash", "pause", "fsync", "cut_writer_all", "cut_writer_some", "cut_bookie", "zk_loss",
         "kill_writer", "recoverer", "pause_then_recover")
WEIGHTS = (5, 4, 3, 3, 3, 2, 2, 1, 3, 2)


class Faults:
    """Schedules one random fault every few time units while active."""

    def __init__(self, world: World, net: Network, bookies: list[SimBookie], writer: Writer,
                 clients: Callable[[], list[str]], start_recoverer: Callable[[], None]) -> None:
        self.world = world
        self.net = net
        self.bookies = bookies
        self.writer = writer
        self.clients = clients
        self.start_recoverer = start_recoverer
        self.active = True
        self.mean_gap = world.rng.choice([15, 30, 60, 120])
        self.warmup = world.between(0, 300)
        self.recovery_after = world.between(50, 1500)

    def start(self) -> None:
        self.world.at(self.warmup + self.world.between(1, 2 * self.mean_gap), "fault", self._next)

    def _next(self) -> None:
        if not self.active:
            return
        kind = self.world.rng.choices(KINDS, WEIGHTS)[0]
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

    # ---- the end ----------------------------------------------------------------------------------------
    def heal_all(self) -> None:
        """Stop injecting and undo every fault: restart, resume, reconnect, fsyncs work again, no loss."""
        self.active = False
        self.net.heal_all()
        self.net.loss = 0.0
        for bookie in self.bookies:
            bookie.fail_next_sync = False
            if bookie.paused:
                bookie.resume()
            if not bookie.up or bookie.failed:
                bookie.restart()
        self.world.note("heal: every fault undone")
