"""Deterministic simulation of bkledger's pure protocol core (DESIGN.md "Tests": deterministic simulation).

A single seeded `random.Random` and an integer clock drive simulated bookies (journal bytes made by the real
record codec, requests decided by the real `bookie.core.decisions`), a simulated network (delay, loss,
duplication, reordering, partitions), a simulated ZooKeeper (versioned nodes, CAS, lost replies) and client
actors that run the real `client.protocol` state machines (PendingAdds, LedgerRecovery, transforms, reads).
The oracle of PROTOCOL.md is checked after every step; a failing seed replays with
`make sim SEED=<seed>` or `python -m tests.sim.runner --seed <seed>`.

Modelled on the ideas of tigerbeetle's VOPR and FoundationDB's simulation: everything is single-threaded,
no real sockets, threads, sleeps or files.
"""

from tests.sim.oracle import SimViolation
from tests.sim.scenario import RunResult, SimOptions, run_seed

__all__ = ["RunResult", "SimOptions", "SimViolation", "run_seed"]
