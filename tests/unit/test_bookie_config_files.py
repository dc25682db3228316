"""Bookie configuration files as BookKeeper operators write them: Java properties syntax, BookKeeper's own
key names, unknown keys warned about (or refused with strictConfig=true), and the shipped template."""

from __future__ import annotations

import dataclasses
import logging
import re
from pathlib import Path

import pytest

from bkledger.bookie import config as bkconfig
from bkledger.bookie.config import BookieConfig, ConfigError, from_mapping, load, parse_properties

TEMPLATE = Path(__file__).resolve().parents[2] / "examples" / "bookie.conf"
FIELDS = {f.name for f in dataclasses.fields(BookieConfig)}

JAVA_STYLE = (
    "! a bang comment\n"
    "   # an indented hash comment\n"
    "metadataServiceUri : zk://127.0.0.1:2181/led\\\n"
    "        gers\n"
    "ledgerDirectories=/data/a,\\\n"
    "   /data/b\n"
    "journalDirectories /j\\u00e9\n"
    "bookieId=host\\:3181\n"
    "httpServerAdminToken=t\\=1\\tx\n"
)


def test_properties_are_parsed_as_java_does() -> None:
    values = parse_properties(JAVA_STYLE)
    assert values == {"metadataServiceUri": "zk://127.0.0.1:2181/ledgers", "ledgerDirectories": "/data/a,/data/b",
                      "journalDirectories": "/j\u00e9", "bookieId": "host:3181", "httpServerAdminToken": "t=1\tx"}


def test_a_java_style_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "bookie.conf"
    path.write_text(JAVA_STYLE)
    config = load(path)
    assert config.metadataServiceUri == "zk://127.0.0.1:2181/ledgers"
    assert config.ledgerDirectories == ("/data/a", "/data/b")
    assert config.journalDirectories == ("/j\u00e9",)
    assert config.bookie_id == "host:3181"


def test_a_bad_unicode_escape_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="Java properties"):
        parse_properties("bookieId=\\u00\n")


def test_unknown_keys_are_warned_about_with_a_suggestion_and_ignored(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="bkledger.config"):
        config = from_mapping({"bookiPort": "4000", "bookiePort": "3999", "noSuchThing": "1"})
    assert config.bookiePort == 3999
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("'bookiPort'" in w and "did you mean 'bookiePort'" in w for w in warnings)
    assert any("'noSuchThing'" in w for w in warnings)


def test_strict_config_refuses_unknown_keys() -> None:
    with pytest.raises(ConfigError, match=r"'bookiPort' \(did you mean 'bookiePort'\?\)"):
        from_mapping({"bookiPort": "4000", "strictConfig": "true"})


def test_numbers_and_booleans_from_python_callers_are_taken_as_their_text() -> None:
    # LocalCluster(...).up(3, {"slowAddThresholdMs": 0}) crashed with AttributeError: 'int' object has no
    # attribute 'strip' instead of starting the bookies or naming the bad key
    config = from_mapping({"slowAddThresholdMs": 0, "journalSyncData": False, "allowLoopback": True})
    assert (config.slowAddThresholdMs, config.journalSyncData, config.allowLoopback) == (0, False, True)


@pytest.mark.parametrize("values", [{"bookiePort": [3181]}, {"journalSyncData": None}, {3181: "bookiePort"}])
def test_a_value_or_key_of_another_type_is_a_config_error_naming_it(values: dict) -> None:
    with pytest.raises(ConfigError, match="expected text"):
        from_mapping(values)


def test_bookkeeper_zk_servers_make_the_metadata_uri_as_bookkeeper_builds_it() -> None:
    config = from_mapping({"zkServers": "zk1:2181,zk2:2181", "zkLedgersRootPath": "/bk/ledgers"})
    assert config.metadataServiceUri == "zk+null://zk1:2181;zk2:2181/bk/ledgers"
    config = from_mapping({"zkServers": "zk1:2181", "ledgerManagerFactoryClass":
                           "org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory"})
    assert config.metadataServiceUri == "zk+hierarchical://zk1:2181/ledgers"


def test_metadata_service_uri_wins_over_zk_servers() -> None:
    config = from_mapping({"zkServers": "zk1:2181", "metadataServiceUri": "zk://zk9:2181/ledgers"})
    assert config.metadataServiceUri == "zk://zk9:2181/ledgers"


def test_bookkeeper_names_that_mean_the_same_are_mapped() -> None:
    config = from_mapping({"journalDirectory": "/j", "verifyMetadataOnGC": "false"})
    assert config.journalDirectories == ("/j",)
    assert config.verifyMetadataOnGc is False
    assert from_mapping({"journalDirectory": "/old", "journalDirectories": "/new"}).journalDirectories == ("/new",)


def test_bookkeeper_keys_without_meaning_here_are_accepted_with_an_info_line(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="bkledger.config"):
        from_mapping({"ledgerStorageClass": "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
                      "numAddWorkerThreads": "4", "strictConfig": "true"})
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("ledgerStorageClass" in r.getMessage() and "ignored" in r.getMessage() for r in caplog.records)


def test_a_real_bookkeeper_config_loads(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "bk_server.conf"
    path.write_text("bookiePort=3181\nzkServers=localhost:2181\nzkLedgersRootPath=/ledgers\n"
                    "journalDirectory=/tmp/bk-txn\nledgerDirectories=/tmp/bk-data\n"
                    "ledgerStorageClass=org.apache.bookkeeper.bookie.SortedLedgerStorage\n"
                    "httpServerClass=org.apache.bookkeeper.http.vertx.VertxHttpServer\n")
    with caplog.at_level(logging.INFO, logger="bkledger.config"):
        config = load(path)
    assert config.metadataServiceUri == "zk+null://localhost:2181/ledgers"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def _template_keys() -> list[str]:
    """Every key the template sets, and every key it shows commented out as `#key=value`."""
    keys = list(parse_properties(TEMPLATE.read_text()))
    keys += re.findall(r"^#([A-Za-z][A-Za-z0-9]*)=", TEMPLATE.read_text(), re.MULTILINE)
    return keys


def test_the_template_loads_without_warnings(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="bkledger.config"):
        config = load(TEMPLATE)
    assert not caplog.records, [r.getMessage() for r in caplog.records]
    assert config.bookiePort == 3181


def test_every_key_of_the_template_is_a_key_of_ours() -> None:
    keys = _template_keys()
    assert len(keys) > 30
    assert set(keys) <= FIELDS, set(keys) - FIELDS


def test_the_templates_commented_values_are_valid() -> None:
    text = TEMPLATE.read_text()
    values = dict(re.findall(r"^#([A-Za-z][A-Za-z0-9]*)=(.*)$", text, re.MULTILINE))
    bkconfig.from_mapping({**parse_properties(text), **values, "strictConfig": "true"})


@pytest.mark.parametrize("value", ["-2", "65536", "3181"])
def test_an_add_port_that_cannot_be_is_a_config_error_naming_it(value: str) -> None:
    with pytest.raises(ConfigError, match="addStreamPort"):
        from_mapping({"bookiePort": "3181", "addStreamPort": value})


def test_the_add_port_is_refused_beside_tls_which_it_does_not_carry() -> None:
    tls = {"tlsProviderFactoryClass": "org.apache.bookkeeper.tls.TLSContextFactory", "tlsKeyStore": "k.pem",
           "tlsCertificatePath": "c.pem", "tlsTrustStore": "ca.pem"}
    with pytest.raises(ConfigError, match="addStreamPort carries adds in plaintext"):
        from_mapping({**tls, "addStreamPort": "0"})
    assert from_mapping({**tls, "addStreamPort": "-1"}).addStreamPort == -1
