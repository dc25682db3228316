"""Where things live in ZooKeeper under the ledgers root: a pure mapping of names to znode paths (R3).

Mirrors BookKeeper's ledger managers and their path helpers (`StringUtils`, `*LedgerManager`):
- `flat`: `{root}/L%010d`;
- `legacyhierarchical`: the id padded to 10 digits split 2-4-4 -> `{root}/00/0000/L0001`;
- `longhierarchical`: the id padded to 19 digits split 3-4-4-4-4 -> `{root}/000/0000/0000/0000/L0001`;
- `hierarchical` (BookKeeper's default): a hybrid, ids below 2^31-1 on the legacy path, larger ids on
  the long path.
Also the fixed znodes of a cluster (`available`, `available/readonly`, `cookies`, `INSTANCEID`, `LAYOUT`,
`idgen`, `idgen-long`, `underreplication`) and of this project (`logs`, `logwriters`, `sinks`), and which
root children are "special" and skipped when listing ledgers (`AbstractZkLedgerManager.isSpecialZnode`). No I/O here.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Iterable, Sequence

MAX_LEDGER_ID = 2**63 - 1
LEGACY_ID_LIMIT = 2**31 - 1          # Integer.MAX_VALUE: the hybrid manager's switch to long paths
LEGACY_MAX_ID = 10**10 - 1           # the largest id a 10-digit 2-4-4 path can hold
LEDGER_PREFIX = "L"

AVAILABLE = "available"
READONLY = "readonly"
COOKIES = "cookies"
INSTANCEID = "INSTANCEID"
LAYOUT = "LAYOUT"
IDGEN = "idgen"
IDGEN_LONG = "idgen-long"
IDGEN_PREFIX = "ID-"
HOB_PREFIX = "HOB-"
UNDERREPLICATION = "underreplication"
LOGS = "logs"
LOG_WRITERS = "logwriters"
SINKS = "sinks"
CURSORS = "cursors"

SPECIAL_ZNODES = frozenset(
    {AVAILABLE, COOKIES, INSTANCEID, LAYOUT, IDGEN, IDGEN_LONG, UNDERREPLICATION, LOGS, LOG_WRITERS, SINKS,
     CURSORS}
)

_LEGACY_SPLIT = (2, 4, 4)
_LONG_SPLIT = (3, 4, 4, 4, 4)


class LedgerManagerType(enum.StrEnum):
    """The ledger manager named in the metadata service URI and recorded in LAYOUT."""

    FLAT = "flat"
    LEGACY_HIERARCHICAL = "legacyhierarchical"
    HIERARCHICAL = "hierarchical"
    LONG_HIERARCHICAL = "longhierarchical"

    @classmethod
    def parse(cls, name: str | LedgerManagerType) -> LedgerManagerType:
        if isinstance(name, LedgerManagerType):
            return name
        try:
            return cls(name.strip().lower())
        except ValueError:
            names = ", ".join(m.value for m in cls)
            raise ValueError(f"unknown ledger manager type {name!r}: use one of {names}") from None


DEFAULT_LEDGER_MANAGER = LedgerManagerType.HIERARCHICAL


def is_special_znode(name: str) -> bool:
    """A child of the ledgers root that is not part of the ledger tree (skipped when listing)."""
    return name in SPECIAL_ZNODES or name.startswith(IDGEN_PREFIX) or name.startswith(HOB_PREFIX)


def _check_id(ledger_id: int) -> None:
    if not 0 <= ledger_id <= MAX_LEDGER_ID:
        raise ValueError(f"ledger id {ledger_id} is out of range: ids are 0..2^63-1")


def _split(digits: str, widths: tuple[int, ...]) -> list[str]:
    out, at = [], 0
    for width in widths:
        out.append(digits[at:at + width])
        at += width
    return out


def _split_path(root: str, ledger_id: int, widths: tuple[int, ...]) -> str:
    parts = _split(f"{ledger_id:0{sum(widths)}d}", widths)
    return "/".join([root, *parts[:-1], LEDGER_PREFIX + parts[-1]])


def uses_long_path(ledger_id: int, manager: LedgerManagerType) -> bool:
    """Whether the id sits on the 19-digit 3-4-4-4-4 path under this manager."""
    if manager is LedgerManagerType.LONG_HIERARCHICAL:
        return True
    return manager is LedgerManagerType.HIERARCHICAL and ledger_id >= LEGACY_ID_LIMIT


def ledger_path(root: str, ledger_id: int, manager: LedgerManagerType) -> str:
    """The znode that holds the metadata of `ledger_id` under `root` for this ledger manager."""
    _check_id(ledger_id)
    if manager is LedgerManagerType.FLAT:
        return f"{root}/{LEDGER_PREFIX}{ledger_id:010d}"
    if uses_long_path(ledger_id, manager):
        return _split_path(root, ledger_id, _LONG_SPLIT)
    if ledger_id > LEGACY_MAX_ID:
        raise ValueError(f"ledger id {ledger_id} does not fit the 10-digit legacyhierarchical layout; "
                         "use the hierarchical or longhierarchical ledger manager")
    return _split_path(root, ledger_id, _LEGACY_SPLIT)


def _widths_for(parts: list[str], manager: LedgerManagerType) -> tuple[int, ...] | None:
    if manager is LedgerManagerType.FLAT:
        return None
    allowed: list[tuple[int, ...]] = []
    if manager in (LedgerManagerType.LEGACY_HIERARCHICAL, LedgerManagerType.HIERARCHICAL):
        allowed.append(_LEGACY_SPLIT)
    if manager in (LedgerManagerType.LONG_HIERARCHICAL, LedgerManagerType.HIERARCHICAL):
        allowed.append(_LONG_SPLIT)
    for widths in allowed:
        if len(parts) == len(widths):
            return widths
    raise ValueError(f"{'/'.join(parts)!r} has {len(parts)} levels; a {manager.value} ledger path has "
                     + " or ".join(str(len(w)) for w in allowed))


def parse_ledger_relpath(parts: Iterable[str], manager: LedgerManagerType) -> int:
    """The ledger id of a path given as its components below the root, e.g. ["00", "0000", "L0001"]."""
    parts = list(parts)
    if not parts or not parts[-1].startswith(LEDGER_PREFIX):
        raise ValueError(f"{'/'.join(parts)!r} is not a ledger znode (the last name starts with 'L')")
    widths = _widths_for(parts, manager)
    digits_parts = [*parts[:-1], parts[-1][len(LEDGER_PREFIX):]]
    if widths is None:
        if len(parts) != 1:
            raise ValueError(f"{'/'.join(parts)!r}: a flat ledger znode sits directly under the root")
    elif any(len(p) != w for p, w in zip(digits_parts, widths, strict=True)):
        raise ValueError(f"{'/'.join(parts)!r} does not split the id {'-'.join(map(str, widths))}")
    digits = "".join(digits_parts)
    if not digits.isascii() or not digits.isdigit():
        raise ValueError(f"{'/'.join(parts)!r} is not a ledger znode: the id must be decimal digits")
    ledger_id = int(digits)
    _check_id(ledger_id)
    if ledger_path("", ledger_id, manager).lstrip("/") != "/".join(parts):
        raise ValueError(f"{'/'.join(parts)!r} is not where a {manager.value} manager keeps "
                         f"ledger {ledger_id}")
    return ledger_id


def parse_ledger_path(root: str, path: str, manager: LedgerManagerType) -> int:
    """The ledger id of an absolute ledger znode path under `root` (inverse of `ledger_path`)."""
    prefix = root.rstrip("/") + "/"
    if not path.startswith(prefix):
        raise ValueError(f"{path!r} is not under the ledgers root {root!r}")
    return parse_ledger_relpath(path[len(prefix):].split("/"), manager)


def ledger_ids_in(parts: Sequence[str], names: Iterable[str], manager: LedgerManagerType) -> list[int]:
    """The ids of the ledger znodes among `names`, the children of the inner node `parts` ([] for the
    root), in their order; a name that `parse_ledger_relpath` would refuse is skipped. The same answers
    name by name, with the directory checked once: a listing of 100,000 ledgers parsed each name in
    about 14 us, and every bookie's garbage collector lists them every `gcWaitTime`."""
    parts = list(parts)
    try:
        widths = _widths_for([*parts, LEDGER_PREFIX], manager)
    except ValueError:
        return []
    if widths is None:                                   # flat: rare, parsed name by name
        return [i for i in (_parsed_or_none(parts, n, manager) for n in names) if i is not None]
    if any(len(p) != w or not (p.isascii() and p.isdigit()) for p, w in zip(parts, widths, strict=False)):
        return []
    head, width, long = "".join(parts), widths[-1], widths == _LONG_SPLIT
    found = []
    for name in names:
        digits = name[1:]
        if name[:1] != LEDGER_PREFIX or len(digits) != width or not (digits.isascii() and digits.isdigit()):
            continue
        ledger_id = int(head + digits)
        if ledger_id <= MAX_LEDGER_ID and uses_long_path(ledger_id, manager) == long:
            found.append(ledger_id)
    return found


def _parsed_or_none(parts: list[str], name: str, manager: LedgerManagerType) -> int | None:
    try:
        return parse_ledger_relpath([*parts, name], manager)
    except ValueError:
        return None


def is_tree_level_name(name: str, depth: int, manager: LedgerManagerType) -> bool:
    """Whether `name` at `depth` (0 = child of root) can be an inner node of this manager's ledger tree."""
    if manager is LedgerManagerType.FLAT or not name.isascii() or not name.isdigit():
        return False
    widths: list[tuple[int, ...]] = []
    if manager in (LedgerManagerType.LEGACY_HIERARCHICAL, LedgerManagerType.HIERARCHICAL):
        widths.append(_LEGACY_SPLIT)
    if manager in (LedgerManagerType.LONG_HIERARCHICAL, LedgerManagerType.HIERARCHICAL):
        widths.append(_LONG_SPLIT)
    return any(depth < len(w) - 1 and len(name) == w[depth] for w in widths)


def subtree_max_id(parts: Sequence[str], manager: LedgerManagerType) -> int:
    """The largest ledger id a ledger below the inner node `parts` (e.g. ["00", "0001"]) can have: its
    digits followed by nines (a hierarchical path splits the zero-padded id, 2-4-4 digits or 3-4-4-4-4 for
    long ids), so a listing of the ids above some id can skip the subtrees wholly below it."""
    total = {w[0]: sum(w) for w in (_LEGACY_SPLIT, _LONG_SPLIT)}.get(len(parts[0]), 0) if parts else 0
    digits = "".join(parts)
    if not total or not digits.isdigit():
        raise ValueError(f"{'/'.join(parts)!r} is not an inner node of a hierarchical ledger tree")
    return int(digits + "9" * (total - len(digits)))


class ZkLayout:
    """The znode paths of one cluster, rooted at `root` (e.g. "/ledgers")."""

    def __init__(self, root: str, manager: LedgerManagerType = DEFAULT_LEDGER_MANAGER):
        if not root.startswith("/") or root == "/" or root.endswith("/") or "//" in root:
            raise ValueError(f"ledgers root {root!r} must be an absolute znode path like /ledgers")
        self.root = root
        self.manager = manager

    def ledger(self, ledger_id: int) -> str:
        return ledger_path(self.root, ledger_id, self.manager)

    def parse_ledger(self, path: str) -> int:
        return parse_ledger_path(self.root, path, self.manager)

    def under_root(self, *names: str) -> str:
        return "/".join([self.root, *names])

    @property
    def available(self) -> str:
        return self.under_root(AVAILABLE)

    @property
    def readonly(self) -> str:
        return self.under_root(AVAILABLE, READONLY)

    @property
    def cookies(self) -> str:
        return self.under_root(COOKIES)

    @property
    def instance_id(self) -> str:
        return self.under_root(INSTANCEID)

    @property
    def layout(self) -> str:
        return self.under_root(LAYOUT)

    @property
    def idgen(self) -> str:
        return self.under_root(IDGEN)

    @property
    def idgen_long(self) -> str:
        return self.under_root(IDGEN_LONG)

    @property
    def underreplication(self) -> str:
        return self.under_root(UNDERREPLICATION)

    @property
    def logs(self) -> str:
        return self.under_root(LOGS)

    @property
    def log_writers(self) -> str:
        return self.under_root(LOG_WRITERS)

    def log_writer_lease(self, name: str, ledger_id: int) -> str:
        """The ephemeral znode a live log writer holds while `ledger_id` is its open ledger."""
        _check_name(name, "log name")
        return f"{self.log_writers}/{name}/{ledger_id}"

    def sink(self, tag: str) -> str:
        """A streaming sink's znode (named by a hash of its tag, which may hold any character)."""
        return f"{self.under_root(SINKS)}/{hashlib.sha256(tag.encode()).hexdigest()[:32]}"

    def bookie(self, bookie_id: str, readonly: bool = False) -> str:
        _check_name(bookie_id, "bookie id")
        return f"{self.readonly if readonly else self.available}/{bookie_id}"

    def cookie(self, bookie_id: str) -> str:
        _check_name(bookie_id, "bookie id")
        return f"{self.cookies}/{bookie_id}"

    def log(self, name: str) -> str:
        _check_name(name, "log name")
        return f"{self.logs}/{name}"

    def log_cursors(self, name: str) -> str:
        """The parent of a log's cursors (its data: the log's cursor quota; see `client.log.cursors`)."""
        _check_name(name, "log name")
        return f"{self.under_root(CURSORS)}/{name}"

    def log_cursor(self, name: str, cursor: str) -> str:
        _check_name(cursor, "cursor name")
        return f"{self.log_cursors(name)}/{cursor}"


def _check_name(name: str, what: str) -> None:
    if not name or "/" in name or name in (".", "..") or any(ord(c) < 0x20 for c in name):
        raise ValueError(f"{what} {name!r} cannot be a znode name: it must be non-empty without '/'")


def layout_text(manager: LedgerManagerType) -> bytes:
    """The LAYOUT znode data, in BookKeeper's shape: `<layoutFormatVersion>\\n<factory>:<version>`."""
    return f"2\n{manager.value}:1\n".encode("ascii")


def parse_layout_text(data: bytes) -> LedgerManagerType:
    """Read the ledger manager type back from LAYOUT (also accepts BookKeeper's factory class names)."""
    try:
        lines = data.decode("ascii").strip().splitlines()
        factory = lines[1].split(":", 1)[0].strip()
    except (UnicodeDecodeError, IndexError) as exc:
        raise ValueError(f"LAYOUT znode data {data[:80]!r} is not '<version>\\n<manager>:<version>'") from exc
    java_names = {
        "FlatLedgerManagerFactory": LedgerManagerType.FLAT,
        "HierarchicalLedgerManagerFactory": LedgerManagerType.HIERARCHICAL,
        "LongHierarchicalLedgerManagerFactory": LedgerManagerType.LONG_HIERARCHICAL,
        "LegacyHierarchicalLedgerManagerFactory": LedgerManagerType.LEGACY_HIERARCHICAL,
    }
    java_class = factory.removeprefix("org.apache.bookkeeper.meta.")
    if java_class in java_names:
        return java_names[java_class]
    return LedgerManagerType.parse(factory)
