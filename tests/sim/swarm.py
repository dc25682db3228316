"""Swarm testing: each seed turns whole fault classes on or off and picks extreme parameters.

Modelled on swarm testing (Groce et al.) as FoundationDB's and TigerBeetle's simulators use it: a run with
every fault at a moderate rate rarely reaches the narrow windows where protocol bugs live, so each seed draws
its own world: some fault classes off entirely, the rest at rates and sizes from calm to extreme (slow
messages held past a recovery, long group-commit waits, a writer with a deep pipeline, storms of racing
recoveries). "Hazards" are the buggify part: at a dangerous point of the protocol (an add just sent, an
acknowledgement that moved the writer's LAC before any bookie knows it, an ensemble change or close CAS in
flight, a fence just journaled, a recovery's fences just sent) the world may pause or kill the actor there.
Nothing here knows about mutants: the same world runs for correct and broken rules.
"""

from __future__ import annotations

import dataclasses
import random

#: Fault classes of `faults.Faults` (each seed enables a random subset) and their base weights.
FAULT_CLASSES = {
    "crash": 5, "pause": 4, "fsync": 3, "cut_writer_all": 3, "cut_writer_some": 3, "cut_bookie": 2,
    "zk_loss": 2, "kill_writer": 1, "recoverer": 4, "pause_then_recover": 2, "slow_bookie": 3,
    "pause_writer": 2, "recovery_storm": 3, "corrupt": 4, "successor": 2, "slow_disk": 3, "rolling_restart": 2,
    "read_errors": 3,
}
#: Fault classes added since: each seed turns them on from a random source of its own (seeded from the world's
#: state, which it does not advance), so that the worlds of FAULT_CLASSES stay what they were.
LATER_FAULT_CLASSES = {"flush_fails": 20}
#: Hazard points (buggify): where the world may pause or kill an actor at the worst moment.
HAZARDS = ("writer_add_sent", "writer_acked", "writer_cas_sent", "fence_journaled", "recovery_reading",
           "recovery_close_sent")
#: The probabilities a seed may give a hazard point (default (0, 0.1, 0.3, 0.6)): points reached at every
#: add get small ones (per run that is already a lot); a recovery's start, reached a few times a run and
#: the most dangerous moment of the protocol, large ones.
HAZARD_ODDS = {"writer_add_sent": (0.0, 0.02, 0.05, 0.1), "writer_acked": (0.0, 0.02, 0.05, 0.1),
               "recovery_reading": (0.0, 0.3, 0.6, 0.9)}
QUORUMS = ((3, 3, 2), (3, 2, 2), (5, 3, 2), (4, 2, 2), (3, 3, 3), (2, 2, 1), (5, 2, 2), (4, 3, 2))


@dataclasses.dataclass(frozen=True)
class Swarm:
    """The world of one seed."""

    quorum: tuple[int, int, int]
    extra_bookies: int
    loss: float
    dup: float
    max_delay: int
    slow_rate: float          # share of messages held back for `slow_delay` (delayed past timeouts, recoveries)
    slow_delay: int
    group_waits: tuple[int, ...]  # journalMaxGroupWaitMSec of each bookie (a slow journal disk: a long one)
    max_adds: int
    window: int               # writer's pipeline depth
    add_gap: int              # writer's longest pause between two adds
    faults: dict[str, int]    # enabled fault classes -> weight
    mean_gap: int             # mean time between two faults
    warmup: int
    recovery_after: int
    hazards: dict[str, float]  # hazard point -> probability it fires there
    speculative_timeout: int  # the readers' speculativeReadTimeout

    def describe(self) -> str:
        on = ",".join(sorted(self.faults)) or "none"
        hz = ",".join(f"{k}={v}" for k, v in sorted(self.hazards.items()) if v) or "none"
        return (f"swarm: loss={self.loss} dup={self.dup} delay<={self.max_delay} slow={self.slow_rate}x"
                f"{self.slow_delay} group_waits={list(self.group_waits)} window={self.window} gap={self.add_gap} "
                f"fault_gap={self.mean_gap} faults=[{on}] hazards=[{hz}] spec={self.speculative_timeout}")


def draw(rng: random.Random) -> Swarm:
    """Draw the world of one seed from the seed's rng."""
    later = random.Random(repr(rng.getstate()[1][:4]))
    faults = {kind: weight * rng.choice((1, 1, 3)) for kind, weight in FAULT_CLASSES.items() if rng.random() < 0.5}
    faults |= {kind: weight * later.choice((1, 1, 3)) for kind, weight in LATER_FAULT_CLASSES.items()
               if later.random() < 0.5}
    hazards = {point: rng.choice(HAZARD_ODDS.get(point, (0.0, 0.1, 0.3, 0.6))) for point in HAZARDS}
    slow_rate = rng.choice((0.0, 0.02, 0.1, 0.3))
    return Swarm(
        quorum=rng.choice(QUORUMS),
        extra_bookies=rng.randint(1, 3),
        loss=rng.choice((0.0, 0.0, 0.01, 0.05, 0.15, 0.3)),
        dup=rng.choice((0.0, 0.02, 0.05)),
        max_delay=rng.choice((1, 3, 8, 15, 30)),
        slow_rate=slow_rate,
        slow_delay=rng.choice((30, 80, 200, 500)),
        group_waits=_group_waits(rng),
        max_adds=rng.choice((40, 80, 150, 300)),
        window=rng.choice((1, 4, 16, 64)),
        add_gap=rng.choice((1, 2, 6, 20)),
        faults=faults,
        mean_gap=rng.choice((8, 15, 30, 60, 120)),
        warmup=rng.randint(0, 150),
        recovery_after=rng.choice((rng.randint(0, 100), rng.randint(50, 1500))),
        hazards=hazards,
        speculative_timeout=rng.choice((2, 5, 15, 30)),
    )


def _group_waits(rng: random.Random) -> tuple[int, ...]:
    """One group-commit wait for all bookies, or (swarm) each bookie its own, or fast journals with a few
    slow journal disks among them."""
    choices = (1, 2, 4, 12, 30, 80)
    roll = rng.random()
    if roll < 0.25:
        return (rng.choice(choices),) * 8
    if roll < 0.75:
        # Fast journals, except one slow journal disk per few bookies: its adds and fences stay unsynced
        # long after the others answered.
        fast = rng.choice(choices[:3])
        return tuple(rng.choice((80, 150, 300)) if rng.random() < 0.3 else fast for _ in range(8))
    return tuple(rng.choice(choices) for _ in range(8))
