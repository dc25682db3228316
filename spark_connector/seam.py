"""The seam between a log's offloaded history and its ledgers on bookies, as Spark reads plan it. Pure.

An offload (`client.log.core.offload`) replaces a prefix of the log's ledgers by records that name Parquet
files of the log's Delta table; every Position still names the same record (`meta.logical_ledgers`). A
read plans from ONE snapshot of the log's metadata: the offloaded ledgers of that snapshot become
`LedgerView`s whose pieces read rows of the files it names (files are immutable, so an offload,
compaction or retention that commits during the read changes nothing the read returns), the others stay
ledger pieces. The seam is the first position not offloaded: `spark_connector.read_log` reads the files
before it with Spark's own Parquet scan and the rest with `format("bkledger")`.

Row groups are a file's unit of reading: a piece (an entry range of one logical ledger, cut as any
ledger's) reads only the row groups holding its rows (`row_groups`).
"""

from __future__ import annotations

from collections.abc import Sequence

from bkledger.client.log.core import meta as lm
from bkledger.client.log.core import offload as ol
from bkledger.spark_connector.planning import LedgerView


def offloaded_view(led: lm.Located, table: str | None, log_name: str) -> LedgerView:
    """The view of an offloaded (logical) ledger: rows `led.base`.. of its file in the table at `table`
    (the store URI the snapshot's head records). ValueError if the snapshot names no table."""
    assert led.offloaded is not None
    if table is None:
        raise ValueError(f"log {log_name!r} names offloaded file {led.offloaded[0]} but no table store")
    return LedgerView(led.ledger_id, (0,), (led.entries or 0) - 1, led.envelope or 0, True, led.size,
                      led.physical, led.base, offloaded=(table, led.offloaded[0]))


def offloaded_views(meta: lm.LogMetadata) -> dict[int, LedgerView]:
    """Views of the snapshot's offloaded ledgers, by (logical) ledger id."""
    table = ol.state(meta).uri
    return {led.ledger_id: offloaded_view(led, table, meta.name)
            for led in lm.logical_ledgers(meta) if led.offloaded is not None}


def seam(meta: lm.LogMetadata) -> lm.Position | None:
    """The first position of the log not in its offloaded history (entry 0 of its first ledger on
    bookies); None if nothing is offloaded. With everything offloaded but an empty tail, the position
    after the last offloaded record."""
    located = lm.logical_ledgers(meta)
    if not any(led.offloaded is not None for led in located):
        return None
    for led in located:
        if led.offloaded is None:
            return lm.Position(led.ledger_id, 0)
    last = located[-1]
    return lm.Position(last.ledger_id, last.entries or 0)


def history_files(meta: lm.LogMetadata) -> list[str]:
    """The files of the snapshot's offloaded history, in log order (relative to the log's table root)."""
    return [led.offloaded[0] for led in meta.ledgers if led.offloaded is not None]


def row_groups(group_rows: Sequence[int], first: int, last: int) -> tuple[list[int], int]:
    """The row groups (indexes) holding rows first..last (inclusive) of a file whose row groups hold
    `group_rows` rows each, and where row `first` sits in the rows those groups hold."""
    chosen: list[int] = []
    start = skip = 0
    for index, count in enumerate(group_rows):
        end = start + count
        if end > first and start <= last:
            if not chosen:
                skip = first - start
            chosen.append(index)
        start = end
    return chosen, skip
