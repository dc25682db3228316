"""What an ambiguous commit did, decided from the log: the pure rules every commit path follows.

A commit into a log is ONE ZooKeeper transaction; when its answer is lost (connection loss after the
server applied it, then another commit moved the log on), the client cannot know from the answer whether
its ledgers are in the log. Ledger ids are unique and only the committing job holds its ledgers, so the
log itself says it: if it lists them, the commit landed. Cleanup after such a commit must delete only the
ledgers the log does not list; deleting "the copies" or "the unused" without looking may delete
acknowledged data (the very ledgers the log now lists).

No I/O here: the logs' metadata comes in as arguments.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from bkledger.client.log.core.meta import LogMetadata


def listed(metas: Mapping[str, LogMetadata], ids: Iterable[int]) -> set[int]:
    """Those of `ids` that any of the logs refers to (as a ledger or one a compacted ledger replaced)."""
    every: set[int] = set()
    for meta in metas.values():
        every |= meta.listed_ids
    return {i for i in ids if i in every}


def landed(metas: Mapping[str, LogMetadata], ids: Mapping[str, Iterable[int]]) -> bool:
    """Whether the commit of `ids` (per log) is in the logs: each log lists every one of its ledgers (and
    there is at least one). A transaction is all or none, so a partial listing is not a landed commit."""
    wanted = {name: list(got) for name, got in ids.items()}
    if not any(wanted.values()):
        return False
    return all(name in metas and set(got) <= metas[name].listed_ids for name, got in wanted.items())


def unlisted(metas: Mapping[str, LogMetadata], candidates: Iterable[int]) -> list[int]:
    """The candidates to delete after a commit whose outcome was unknown: those no log lists."""
    ids = list(candidates)
    keep = listed(metas, ids)
    return [i for i in ids if i not in keep]
