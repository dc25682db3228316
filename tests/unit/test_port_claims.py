"""Machine-wide port claims (bookie.local.port_claims) and free_port's use of them, with real processes.

The claims here are on numbers above 65535: no server can have such a port, so no test worker or cluster
running beside this test holds (or is refused) one of them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

from bkledger.bookie.local import port_claims, zookeeper

FIRST = 70_000 + (os.getpid() % 1000) * 100       # a block of 100 numbers of our own
TIMEOUT = 60.0

_CLAIMER = textwrap.dedent("""
    import json, sys
    from bkledger.bookie.local import port_claims
    ports = [int(p) for p in sys.argv[1:]]
    print("ready", flush=True)
    sys.stdin.readline()
    print(json.dumps([p for p in ports if port_claims.claim(p)]), flush=True)
    sys.stdin.read()                      # hold the claims until the test closes our stdin
""")


class Claimer:
    """Another process that claims `ports` when told to and holds its claims until closed."""

    def __init__(self, ports: list[int]):
        self.proc = subprocess.Popen([sys.executable, "-c", _CLAIMER, *map(str, ports)], text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self._line() == "ready"

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def claimed(self) -> set[int]:
        return set(json.loads(self._line()))

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=TIMEOUT)

    def _line(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()        # the child prints within TIMEOUT or dies with it


@pytest.fixture
def claimers() -> Iterator[list[Claimer]]:
    made: list[Claimer] = []
    yield made
    for c in made:
        if c.proc.poll() is None:
            c.proc.kill()
            c.proc.wait(timeout=TIMEOUT)


def test_a_port_claimed_by_a_live_process_is_refused_and_free_once_it_ends(claimers: list[Claimer]) -> None:
    other = Claimer([FIRST, FIRST + 1])
    claimers.append(other)
    other.go()
    assert other.claimed() == {FIRST, FIRST + 1}
    assert not port_claims.claim(FIRST)
    assert port_claims.claim(FIRST + 2)
    assert port_claims.claim(FIRST + 2), "a claim this process holds is its own to hand out again"
    other.close()
    assert port_claims.claim(FIRST)


def test_two_processes_claiming_the_same_ports_at_once_get_disjoint_sets(claimers: list[Claimer]) -> None:
    ports = list(range(FIRST + 10, FIRST + 90))
    claimers.extend([Claimer(ports), Claimer(list(reversed(ports)))])
    for c in claimers:
        c.go()
    first, second = (c.claimed() for c in claimers)
    assert not first & second, f"both processes were given {sorted(first & second)}"
    assert first | second == set(ports)
    for c in claimers:
        c.close()


def test_a_claim_is_given_up_after_its_ttl(claimers: list[Claimer]) -> None:
    assert port_claims.claim(FIRST + 95, ttl=0.0)
    assert port_claims.claim(FIRST + 96)                  # any later claim releases the expired ones
    assert FIRST + 95 not in port_claims.held()
    other = Claimer([FIRST + 95, FIRST + 96])
    claimers.append(other)
    other.go()
    assert other.claimed() == {FIRST + 95}


def test_free_port_skips_a_port_another_process_claimed(claimers: list[Claimer], monkeypatch) -> None:
    taken = zookeeper.free_port()                    # a real free port, which this process now claims
    port_claims._held.pop(taken)[0].close()          # ... as if another process had picked it
    other = Claimer([taken])
    claimers.append(other)
    other.go()
    assert other.claimed() == {taken}
    zookeeper._HANDED_OUT.discard(taken)
    # The kernel offers the taken port twice, then whatever it offers: a third offer scripted in advance
    # could be claimed by a parallel test worker before free_port gets to it (seen under -n 3).
    kernel = zookeeper._offered_port
    offers = iter([taken, taken])
    monkeypatch.setattr(zookeeper, "_offered_port", lambda host: next(offers, None) or kernel(host))
    port = zookeeper.free_port()
    assert next(offers, None) is None      # both offers of the taken port were made, and skipped
    assert port != taken
    assert port in port_claims.held()
