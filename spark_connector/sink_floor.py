"""Where a streaming sink's sweep starts: the ledger id floor recorded in ZooKeeper after its last clean
sweep (znode `sinks/<hash of the sink tag>` under the ledgers root, JSON {"sink", "floor", "next"}).

Spark makes a new writer for every micro-batch commit (pyspark's `python_streaming_sink_runner` calls
`streamWriter` each time), so a commit cannot remember what the last one swept. Each commit deletes the
ledgers this sink's tasks wrote that their log does not list (failed task attempts, and runs whose
driver died between their tasks and their commit). Reading every ledger's metadata for that costs
0.12 ms a ledger, every micro-batch: two minutes a batch at a million ledgers. With a floor, a commit
reads only the ledgers above it.

The floor lags one commit: each commit takes an id watermark before it sweeps and records it as `next`;
the floor the next commit uses is the `next` of the commit before. Ledger ids only grow (R1) and the
micro-batches of one sink run one at a time, so a ledger of this sink at or below the floor was listed
by an earlier sweep; the lag gives a task attempt that was killed while it created its ledger (its id
drawn before a watermark, its znode written after that sweep listed) one more commit to show up. A
floor that is missing or unreadable means NONE, the whole cluster: a lower floor only costs time.
"""

from __future__ import annotations

import dataclasses
import json

from bkledger.client import BookKeeper
from bkledger.client.connector import ZNodeExistsError

NONE = -1


@dataclasses.dataclass(frozen=True)
class SinkFloor:
    floor: int = NONE               # this commit sweeps the ledgers above it
    next: int = NONE                # the watermark the last commit took: the floor after this commit

    def advanced(self, watermark: int) -> SinkFloor:
        """What a commit that swept above `floor` and took `watermark` first records."""
        return SinkFloor(max(self.floor, self.next), watermark)


def parse_floor(data: bytes, tag: str) -> SinkFloor:
    """The record of sink `tag` in `data`; SinkFloor() if it is not one."""
    try:
        record = json.loads(data)
        values = (record["floor"], record["next"]) if record.get("sink") == tag else (NONE, NONE)
    except (ValueError, TypeError, KeyError, AttributeError):
        return SinkFloor()
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= NONE for v in values):
        return SinkFloor()
    return SinkFloor(*values)


def sink_floor(bk: BookKeeper, tag: str) -> SinkFloor:
    got = bk.store.get(bk.store.layout.sink(tag))
    return SinkFloor() if got is None else parse_floor(got[0], tag)


def record_sink_floor(bk: BookKeeper, tag: str, floor: SinkFloor) -> None:
    """Record `floor` for sink `tag` (the znode is created on first use)."""
    path = bk.store.layout.sink(tag)
    data = json.dumps({"sink": tag, "floor": floor.floor, "next": floor.next}).encode()
    try:
        bk.store.create(path, data)
    except ZNodeExistsError:
        bk.store.cas(path, data, -1)
