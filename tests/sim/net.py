"""The simulated network: delay, slow messages, loss, duplication, reordering and partitions between nodes.

Mirrors what a real TCP/gRPC path may do to BookKeeper's requests as seen from the protocol: a message
arrives after a random delay (so messages reorder), may be slow (held back far beyond the senders'
timeouts: a request that arrives after a recovery started, an answer that comes after its speculative
retry), may be lost or duplicated, and never crosses a partition. A slow node (a bookie in a long GC or
on a hung disk that still answers) delays every message to and from it. A paused node (SIGSTOP)
receives nothing: its messages are held and delivered when it resumes.
A lost request or answer is noticed only by the sender's timeout (see `actors.Actor.call`).
"""

from __future__ import annotations

from typing import Protocol

from tests.sim.messages import Envelope
from tests.sim.world import World


class Node(Protocol):
    """Something that can receive messages."""

    name: str

    def is_up(self) -> bool: ...

    def is_paused(self) -> bool: ...

    def deliver(self, src: str, env: Envelope) -> None: ...


class Network:
    """Routes envelopes between registered nodes with the configured faults."""

    def __init__(self, world: World, *, loss: float = 0.02, dup: float = 0.02, max_delay: int = 8,
                 slow_rate: float = 0.0, slow_delay: int = 0) -> None:
        self.world = world
        self.loss = loss
        self.dup = dup
        self.max_delay = max_delay
        self.slow_rate = slow_rate                  # share of messages held back up to `slow_delay` more
        self.slow_delay = slow_delay
        self.slow_nodes: dict[str, int] = {}        # node -> extra delay of every message to or from it
        self.loss_from: dict[str, float] = {}       # extra loss of messages sent by a node (lost replies)
        self.nodes: dict[str, Node] = {}
        self._cuts: set[tuple[str, str]] = set()
        self._held: dict[str, list[tuple[str, Envelope]]] = {}

    def register(self, node: Node) -> None:
        self.nodes[node.name] = node

    # ---- partitions -----------------------------------------------------------------------------
    def cut(self, a: str, b: str) -> None:
        self._cuts.add((a, b))
        self._cuts.add((b, a))

    def heal(self, a: str, b: str) -> None:
        self._cuts.discard((a, b))
        self._cuts.discard((b, a))

    def heal_all(self) -> None:
        self._cuts.clear()
        self.loss_from.clear()
        self.slow_nodes.clear()

    def is_cut(self, a: str, b: str) -> bool:
        return (a, b) in self._cuts

    # ---- sending ------------------------------------------------------------------------------------
    def send(self, src: str, dst: str, env: Envelope) -> None:
        world = self.world
        if self.is_cut(src, dst):
            return
        if world.chance(self.loss + self.loss_from.get(src, 0.0)):
            world.note(f"net lost {src}->{dst} {env.label()}")
            return
        copies = 2 if world.chance(self.dup) else 1
        for _ in range(copies):
            delay = world.between(1, self.max_delay) + self.slow_nodes.get(src, 0) + self.slow_nodes.get(dst, 0)
            if self.slow_delay and world.chance(self.slow_rate):
                delay += world.between(1, self.slow_delay)
            world.at(delay, f"deliver {src}->{dst} {env.label()}", lambda: self._arrive(src, dst, env))

    def _arrive(self, src: str, dst: str, env: Envelope) -> None:
        node = self.nodes.get(dst)
        if node is None or not node.is_up() or self.is_cut(src, dst):
            self.world.note(f"net dropped {src}->{dst} (down or cut)")
            return
        if node.is_paused():
            self._held.setdefault(dst, []).append((src, env))
            return
        node.deliver(src, env)

    def release_held(self, dst: str) -> None:
        """A paused node resumed: deliver what it missed, in arrival order."""
        held = self._held.pop(dst, [])
        for src, env in held:
            self._arrive_later(src, dst, env)

    def _arrive_later(self, src: str, dst: str, env: Envelope) -> None:
        self.world.at(0, f"deliver-held {src}->{dst} {env.label()}", lambda: self._arrive(src, dst, env))

    def drop_held(self, dst: str) -> None:
        """A paused node crashed: what it had not read yet is gone."""
        self._held.pop(dst, None)
