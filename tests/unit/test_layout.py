"""R3: ledger znode paths of every ledger manager, parsed back; special znodes; LAYOUT text."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bkledger.client.meta import layout as lay
from bkledger.client.meta.layout import LedgerManagerType as M

ROOT = "/ledgers"


@pytest.mark.parametrize(("manager", "ledger_id", "path"), [
    (M.FLAT, 1, "/ledgers/L0000000001"),
    (M.FLAT, 2**40, "/ledgers/L1099511627776"),
    (M.LEGACY_HIERARCHICAL, 1, "/ledgers/00/0000/L0001"),
    (M.LEGACY_HIERARCHICAL, 1234567890, "/ledgers/12/3456/L7890"),
    (M.LONG_HIERARCHICAL, 1, "/ledgers/000/0000/0000/0000/L0001"),
    (M.LONG_HIERARCHICAL, 2**63 - 1, "/ledgers/922/3372/0368/5477/L5807"),
    (M.HIERARCHICAL, 1, "/ledgers/00/0000/L0001"),
    (M.HIERARCHICAL, 2**31 - 2, "/ledgers/21/4748/L3646"),
    (M.HIERARCHICAL, 2**31 - 1, "/ledgers/000/0000/0021/4748/L3647"),
    (M.HIERARCHICAL, 2**31 + 5, "/ledgers/000/0000/0021/4748/L3653"),
])
def test_ledger_path_matches_bookkeeper(manager: M, ledger_id: int, path: str) -> None:
    """R3: flat L%010d, legacy 2-4-4, long 3-4-4-4-4, hybrid switching at Integer.MAX_VALUE."""
    assert lay.ledger_path(ROOT, ledger_id, manager) == path
    assert lay.parse_ledger_path(ROOT, path, manager) == ledger_id


@given(ledger_id=st.integers(min_value=0, max_value=2**63 - 1), manager=st.sampled_from(list(M)))
def test_path_round_trip(ledger_id: int, manager: M) -> None:
    """R1/R3: every 64-bit (non-negative) id has a path that parses back to it."""
    if manager is M.LEGACY_HIERARCHICAL and ledger_id > lay.LEGACY_MAX_ID:
        with pytest.raises(ValueError, match="legacyhierarchical"):
            lay.ledger_path(ROOT, ledger_id, manager)
        return
    path = lay.ledger_path(ROOT, ledger_id, manager)
    assert lay.parse_ledger_path(ROOT, path, manager) == ledger_id
    parts = path[len(ROOT) + 1:].split("/")
    assert not lay.is_special_znode(parts[0])
    for depth, name in enumerate(parts[:-1]):
        assert lay.is_tree_level_name(name, depth, manager)
    assert parts[-1].startswith("L")


@given(ledger_id=st.integers(min_value=0, max_value=2**63 - 1),
       manager=st.sampled_from([M.HIERARCHICAL, M.LONG_HIERARCHICAL]))
def test_a_subtree_holds_no_id_above_its_max(ledger_id: int, manager: M) -> None:
    """list_ledgers(above=x) skips a subtree whose largest possible id is <= x: every id lies at or below the
    max of each inner node on its path, and the next id past that max lies outside the node."""
    parts = lay.ledger_path(ROOT, ledger_id, manager)[len(ROOT) + 1:].split("/")
    for depth in range(1, len(parts)):
        top = lay.subtree_max_id(parts[:depth], manager)
        assert ledger_id <= top
        if top + 1 < 2**63:
            beyond = lay.ledger_path(ROOT, top + 1, manager)[len(ROOT) + 1:].split("/")
            assert beyond[:depth] != parts[:depth]


@given(a=st.integers(min_value=0, max_value=2**63 - 1), b=st.integers(min_value=0, max_value=2**63 - 1))
def test_distinct_ids_distinct_paths(a: int, b: int) -> None:
    if a != b:
        assert lay.ledger_path(ROOT, a, M.HIERARCHICAL) != lay.ledger_path(ROOT, b, M.HIERARCHICAL)


@pytest.mark.parametrize("ledger_id", [-1, 2**63])
def test_out_of_range_ids_rejected(ledger_id: int) -> None:
    with pytest.raises(ValueError, match="out of range"):
        lay.ledger_path(ROOT, ledger_id, M.HIERARCHICAL)


@pytest.mark.parametrize(("manager", "rel"), [
    (M.FLAT, "L1"),                       # not zero-padded: not canonical
    (M.FLAT, "00/L0000000001"),
    (M.FLAT, "Lxyz"),
    (M.LEGACY_HIERARCHICAL, "00/0000/0000"),
    (M.LEGACY_HIERARCHICAL, "0/0000/L0001"),
    (M.LEGACY_HIERARCHICAL, "000/0000/0000/0000/L0001"),
    (M.LONG_HIERARCHICAL, "00/0000/L0001"),
    (M.HIERARCHICAL, "000/0000/0000/0000/L0001"),   # a small id belongs on the legacy path
    (M.HIERARCHICAL, "00/0000/L00a1"),
])
def test_parse_rejects_non_ledger_paths(manager: M, rel: str) -> None:
    with pytest.raises(ValueError):
        lay.parse_ledger_path(ROOT, f"{ROOT}/{rel}", manager)


def _one_by_one(parts: list[str], names: list[str], manager: M) -> list[int]:
    found = []
    for name in names:
        with contextlib.suppress(ValueError):
            found.append(lay.parse_ledger_relpath([*parts, name], manager))
    return found


_NAME_PIECES = st.text(alphabet="0123456789La\u0661", max_size=6)


@given(ids=st.lists(st.integers(min_value=0, max_value=2**63 - 1), min_size=1, max_size=8),
       noise=st.lists(_NAME_PIECES, max_size=8), manager=st.sampled_from(list(M)), pick=st.integers(0, 7))
def test_a_directory_parsed_at_once_agrees_with_each_name_parsed(ids: list[int], noise: list[str], manager: M,
                                                                 pick: int) -> None:
    """R3: list_ledgers parses a directory's children with the directory checked once; for every name,
    well formed or not (wrong width, non-ASCII digits, an id on the other manager's path), the answer is
    the one parse_ledger_relpath gives it alone."""
    paths = []
    for ledger_id in ids:
        with contextlib.suppress(ValueError):
            paths.append(lay.ledger_path("", ledger_id, manager).lstrip("/").split("/"))
    if not paths:
        return
    parts = paths[pick % len(paths)][:-1]
    siblings = [p[-1] for p in paths if p[:-1] == parts]
    names = siblings + ["L" + n for n in noise] + noise
    assert lay.ledger_ids_in(parts, names, manager) == _one_by_one(parts, names, manager)
    for other in M:                                       # the same directory read as another manager's
        assert lay.ledger_ids_in(parts, names, other) == _one_by_one(parts, names, other)


def test_parse_rejects_paths_outside_root() -> None:
    with pytest.raises(ValueError, match="not under"):
        lay.parse_ledger_path(ROOT, "/other/00/0000/L0001", M.HIERARCHICAL)


@pytest.mark.parametrize("name", ["available", "cookies", "LAYOUT", "INSTANCEID", "underreplication",
                                  "idgen", "idgen-long", "ID-0000000001", "logs"])
def test_special_znodes(name: str) -> None:
    assert lay.is_special_znode(name)


@pytest.mark.parametrize("name", ["00", "000", "L0000000001"])
def test_ledger_tree_names_are_not_special(name: str) -> None:
    assert not lay.is_special_znode(name)


def test_fixed_paths() -> None:
    z = lay.ZkLayout("/a/ledgers", M.HIERARCHICAL)
    assert z.available == "/a/ledgers/available"
    assert z.readonly == "/a/ledgers/available/readonly"
    assert z.bookie("127.0.0.1:3181") == "/a/ledgers/available/127.0.0.1:3181"
    assert z.bookie("127.0.0.1:3181", readonly=True) == "/a/ledgers/available/readonly/127.0.0.1:3181"
    assert z.cookie("b1") == "/a/ledgers/cookies/b1"
    assert z.instance_id == "/a/ledgers/INSTANCEID"
    assert z.layout == "/a/ledgers/LAYOUT"
    assert z.idgen == "/a/ledgers/idgen"
    assert z.idgen_long == "/a/ledgers/idgen-long"
    assert z.log("orders") == "/a/ledgers/logs/orders"
    assert z.ledger(1) == "/a/ledgers/00/0000/L0001"
    assert z.parse_ledger("/a/ledgers/00/0000/L0001") == 1


@pytest.mark.parametrize("bad", ["", "a/b", "..", "."])
def test_bad_names_rejected(bad: str) -> None:
    with pytest.raises(ValueError, match="znode name"):
        lay.ZkLayout(ROOT).bookie(bad)


@pytest.mark.parametrize("root", ["ledgers", "/", "/ledgers/", "/a//b"])
def test_bad_roots_rejected(root: str) -> None:
    with pytest.raises(ValueError, match="absolute znode path"):
        lay.ZkLayout(root)


@pytest.mark.parametrize("manager", list(M))
def test_layout_text_round_trip(manager: M) -> None:
    assert lay.parse_layout_text(lay.layout_text(manager)) is manager


def test_layout_text_reads_bookkeeper_factory_names() -> None:
    text = b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:2\n"
    assert lay.parse_layout_text(text) is M.HIERARCHICAL
    with pytest.raises(ValueError):
        lay.parse_layout_text(b"garbage")


def test_manager_parse() -> None:
    assert M.parse(" Flat ") is M.FLAT
    with pytest.raises(ValueError, match="use one of"):
        M.parse("ms")
