"""metadataServiceUri parsing, as BookKeeper's ZKMetadataDriverBase reads it."""

from __future__ import annotations

import pytest

from bkledger.client.errors import InvalidOptionError
from bkledger.client.meta.layout import LedgerManagerType as M
from bkledger.client.meta.uri import parse_metadata_service_uri as parse


@pytest.mark.parametrize(("uri", "hosts", "root", "manager"), [
    ("zk://127.0.0.1:2181/ledgers", "127.0.0.1:2181", "/ledgers", None),
    ("zk+null://127.0.0.1:2181/ledgers", "127.0.0.1:2181", "/ledgers", None),
    ("zk+hierarchical://h1:2181;h2:2182/ledgers", "h1:2181,h2:2182", "/ledgers", M.HIERARCHICAL),
    ("zk+flat://h1,h2:2182/a/b/ledgers/", "h1:2181,h2:2182", "/a/b/ledgers", M.FLAT),
    ("zk+longhierarchical://zk.example.com/ledgers", "zk.example.com:2181", "/ledgers", M.LONG_HIERARCHICAL),
    ("zk+legacyhierarchical://[::1]:2181/l", "[::1]:2181", "/l", M.LEGACY_HIERARCHICAL),
    ("ZK+Flat://h:1/x", "h:1", "/x", M.FLAT),
])
def test_parse(uri: str, hosts: str, root: str, manager: M | None) -> None:
    parsed = parse(uri)
    assert (parsed.hosts, parsed.root, parsed.ledger_manager) == (hosts, root, manager)


@pytest.mark.parametrize(("uri", "why"), [
    ("", "empty"),
    ("127.0.0.1:2181/ledgers", "not a URI"),
    ("etcd://h:2379/ledgers", "unsupported scheme"),
    ("zk+ms://h:2181/ledgers", "unknown ledger manager type 'ms'"),
    ("zk+bogus://h:2181/ledgers", "unknown ledger manager type"),
    ("zk:///ledgers", "no ZooKeeper servers"),
    ("zk://h:2181", "root path is missing"),
    ("zk://h:2181/", "root path is missing"),
    ("zk://h:99999/ledgers", "out of range"),
    ("zk://h:x/ledgers", "bad ZooKeeper server"),
    ("zk://h;;g/ledgers", "bad ZooKeeper server"),
    ("zk://h:2181/a//b", "bad ledgers root"),
    ("zk://h:2181/a/../b", "'..'"),
])
def test_bad_uris_say_the_expected_form(uri: str, why: str) -> None:
    with pytest.raises(InvalidOptionError, match="expected zk") as info:
        parse(uri)
    assert why in str(info.value)
    assert isinstance(info.value, ValueError)
