"""Cookies (R24): bind a bookie id to its journal and ledger directories and the cluster instance.

Mirrors BookKeeper's Cookie: one copy in ZooKeeper (`{root}/cookies/<bookie id>`) and one in
`current/VERSION` of every directory. Before serving, every copy must agree; a bookie whose disks
were wiped (ZooKeeper has a cookie, the disks have none) refuses to start, so it can never rejoin
empty and answer NoSuchEntry for entries it had acknowledged. This module is pure: it encodes,
decodes and decides; the driver reads and writes the copies. Every refusal names its fix: the
`bkledger shell` verbs after BookKeeper's (`bookieformat`, `cookie get|delete`, `decommission`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

LAYOUT_VERSION = 5
FORMAT = "bkledger shell bookieformat --conf <this bookie's conf> -n -f -d"
FORMAT_HINT = (f"to drop this bookie's data and start it empty, `{FORMAT}` wipes its directories and deletes "
               "its cookie (only once no ledger needs its data: `bkledger shell listledgers --bookie ID`)")


class CookieError(RuntimeError):
    """The cookies do not allow this bookie to start; the message says why and what to do."""


@dataclasses.dataclass(frozen=True)
class Cookie:
    bookie_id: str
    journal_dir: str
    ledger_dirs: tuple[str, ...]
    instance_id: str

    def encode(self) -> bytes:
        lines = [
            str(LAYOUT_VERSION),
            f"bookieHost: {self.bookie_id}",
            f"journalDir: {self.journal_dir}",
            f"ledgerDirs: {len(self.ledger_dirs)}\t" + "\t".join(self.ledger_dirs),
            f"instanceId: {self.instance_id}",
        ]
        return ("\n".join(lines) + "\n").encode()

    @classmethod
    def decode(cls, data: bytes) -> Cookie:
        try:
            lines = data.decode().splitlines()
            if int(lines[0]) != LAYOUT_VERSION:
                raise ValueError(f"unsupported cookie layout version {lines[0]}")
            fields = dict(line.split(": ", 1) for line in lines[1:] if line)
            count, *dirs = fields["ledgerDirs"].split("\t")
            if int(count) != len(dirs):
                raise ValueError("ledgerDirs count does not match")
            return cls(fields["bookieHost"], fields["journalDir"], tuple(dirs), fields["instanceId"])
        except (ValueError, KeyError, IndexError, UnicodeDecodeError) as exc:
            raise CookieError(f"unreadable cookie: {exc}") from None


@dataclasses.dataclass(frozen=True)
class CookieDecision:
    write_local: bool      # write the expected cookie into every directory's current/VERSION
    write_zk: bool         # create the cookie in ZooKeeper


def decide(expected: Cookie, zk: Cookie | None, local: Sequence[Cookie | None], dirs_have_data: bool) -> CookieDecision:
    """Decide whether a bookie may start. `local` holds the cookie found in each directory."""
    found = [c for c in local if c is not None]
    if zk is None and not found:
        if dirs_have_data:
            raise CookieError(
                "the directories hold data but no cookie: they belong to another bookie or cluster; "
                f"point the bookie at empty directories or restore its cookie; or, {FORMAT_HINT}"
            )
        return CookieDecision(write_local=True, write_zk=True)
    if zk is not None and not found:
        raise CookieError(
            f"ZooKeeper has a cookie for {expected.bookie_id} but its directories have none: the disks "
            "were wiped or replaced. Starting would answer NoSuchEntry for acknowledged entries. "
            f"Re-replicate its data and delete its cookie with `bkledger shell decommission {expected.bookie_id}`, "
            "then start it on empty directories (`bkledger shell cookie get|delete ID` show and remove a cookie)"
        )
    if len(found) != len(local):
        missing = len(local) - len(found)
        raise CookieError(
            f"{missing} of the bookie's directories have no cookie (a wiped or new disk); restore the disk, or "
            f"decommission the bookie (`bkledger shell decommission {expected.bookie_id}`); or, {FORMAT_HINT}"
        )
    for cookie in found:
        _must_match(expected, cookie, "a directory")
    if zk is None:
        raise CookieError(
            f"the directories have a cookie but ZooKeeper has none for {expected.bookie_id}: the bookie "
            "points at another cluster, or its cookie was removed by decommission; use fresh directories, or, "
            f"{FORMAT_HINT}"
        )
    _must_match(expected, zk, "ZooKeeper")
    return CookieDecision(write_local=False, write_zk=False)


def _must_match(expected: Cookie, found: Cookie, where: str) -> None:
    for field in ("instance_id", "bookie_id", "journal_dir", "ledger_dirs"):
        want, got = getattr(expected, field), getattr(found, field)
        if want != got:
            raise CookieError(
                f"cookie in {where} has {field}={got!r} but this bookie has {want!r}; "
                f"a bookie must keep its id, directories and cluster. {_FIXES[field].format(got=got)}; or, "
                f"{FORMAT_HINT}"
            )


_FIXES = {
    "bookie_id": "Start it with its old id (bookiePort / advertisedAddress / bookieId giving {got})",
    "instance_id": "The directories belong to another cluster (instance {got}): point metadataServiceUri at it",
    "journal_dir": "Point journalDirectories back at {got}",
    "ledger_dirs": "Point ledgerDirectories back at {got}",
}
