"""Errors off the happy path say what to do, against a real ZooKeeper (no bookie processes needed): a wrong
root of metadataServiceUri (client.meta.cluster_root), a Spark append's planning checks against the
cluster (spark_connector.write_checks) and the length limit of new log names next to a stored longer name."""

from __future__ import annotations

import uuid

import pytest

from bkledger.client.errors import InvalidLogNameError, NoClusterError, NotEnoughBookiesError
from bkledger.client.log.naming import creatable_log_name
from bkledger.client.log.store import create_log
from bkledger.client.meta.store import MetadataStore
from bkledger.spark_connector.options import BkLedgerOptionError, parse_write_options
from bkledger.spark_connector.write_checks import check_write_plan


def test_a_wrong_root_says_no_cluster_not_zero_bookies(metadata_uri: str, bk_factory) -> None:
    good = metadata_uri
    wrong = good.replace("/ledgers", "/ledgrs")
    with MetadataStore(good, session_timeout=5.0) as store:
        store.init_cluster()
    with pytest.raises(NoClusterError) as got:
        bk_factory(wrong).create_ledger(3, 2, 2)
    root = "/" + wrong.split("/", 3)[3]                                            # zk://host:port/<root>
    assert f"no bkledger cluster at {wrong}" in str(got.value)
    assert f"nothing under {root}/available" in str(got.value)
    assert "check the root path of metadataServiceUri" in str(got.value)
    assert good.split("/", 3)[3] in str(got.value).split("clusters found", 1)[-1]    # where one is
    with pytest.raises(NotEnoughBookiesError) as got_down:                        # a cluster, bookies down
        bk_factory(good).create_ledger(3, 2, 2)
    assert not isinstance(got_down.value, NoClusterError)
    assert "only 0 are available" in str(got_down.value)


def _write_opts(uri: str, **options: str):
    return parse_write_options({"metadataServiceUri": uri, "log": "orders", **options})


def test_spark_append_is_checked_against_the_cluster_at_planning(metadata_uri: str, bk_factory) -> None:
    bk = bk_factory(metadata_uri)
    with pytest.raises(BkLedgerOptionError, match="option metadataServiceUri: no bkledger cluster"):
        check_write_plan(bk, _write_opts(metadata_uri))
    bk.store.init_cluster()
    for n in range(2):
        bk.store.register_bookie(f"127.0.0.1:{4000 + n}", {"host": "127.0.0.1", "port": 4000 + n})
    with pytest.raises(BkLedgerOptionError) as got:
        check_write_plan(bk, _write_opts(metadata_uri, ensembleSize="3"))
    assert "option ensembleSize: 3 is more than the 2 writable bookies" in str(got.value)
    check_write_plan(bk, _write_opts(metadata_uri, ensembleSize="2"))
    long = "x" * 250
    with pytest.raises(BkLedgerOptionError, match="option log: log name .* at most 249"):
        check_write_plan(bk, _write_opts(metadata_uri, ensembleSize="2", log=long))


def test_a_stored_log_longer_than_the_limit_keeps_working(metadata_uri: str, bk_factory) -> None:
    bk = bk_factory(metadata_uri)
    bk.store.init_cluster()
    long = "y" * 300
    with pytest.raises(InvalidLogNameError):
        creatable_log_name(bk, long)
    create_log(bk.store, long)                   # as a client before the limit could
    assert creatable_log_name(bk, long) == long
    assert bk.log_metadata(long).name == long and long in bk.list_logs()


def _ledger_on(store: MetadataStore, ensemble: list[str]) -> int:
    from bkledger.client.protocol import transforms

    ledger_id = store.new_ledger_id()
    store.create_ledger(transforms.new_ledger_metadata(ledger_id, ensemble, len(ensemble), len(ensemble),
                                                       len(ensemble), "crc32c", b"", 0, {}, ""))
    return ledger_id


def test_shell_recover_refuses_unknown_and_malformed_bookie_ids(metadata_uri: str, capsys) -> None:
    from bkledger.bookie.cli import main

    with MetadataStore(metadata_uri, session_timeout=5.0) as store:
        store.init_cluster()
        store.register_bookie("127.0.0.1:4001", {"host": "127.0.0.1", "port": 4001})
        _ledger_on(store, ["127.0.0.1:4009"])              # a bookie gone for good, still in an ensemble
        capsys.readouterr()
        assert main(["shell", "recover", "1.2.3.4:5", "--uri", metadata_uri]) == 1
        said = capsys.readouterr().err
        assert "bookie 1.2.3.4:5 is not known to this cluster" in said
        assert "known bookies: 127.0.0.1:4001, 127.0.0.1:4009" in said
        assert main(["shell", "decommission", "1.2.3.4:5", "--uri", metadata_uri]) == 1
        assert "not known to this cluster" in capsys.readouterr().err
        for bad in ("1.2.3.4:99999", "host:", "a b:1", "readonly", "1.2.3.4:5/x", ","):
            assert main(["shell", "recover", bad, "--uri", metadata_uri]) == 1, bad
            err = capsys.readouterr().err
            assert "is not a bookie id" in err or "give the bookie id" in err, (bad, err)
        assert main(["shell", "recover", "127.0.0.1:4009", "1.2.3.4:5", "--uri", metadata_uri]) == 1
        assert "target 1.2.3.4:5 is not a writable bookie" in capsys.readouterr().err


# ---- ZooKeeper trouble: one line, kazoo's reconnect chatter at DEBUG (client.meta.zklog) ----------------
def _wait_for(condition, timeout: float = 30.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_no_zookeeper_is_one_error_with_the_reason(caplog) -> None:
    import logging

    from bkledger.bookie.local.zookeeper import free_port
    from bkledger.client.meta.errors import MetadataStoreError

    caplog.set_level(logging.DEBUG, logger="kazoo")
    port = free_port()
    with pytest.raises(MetadataStoreError) as got:
        MetadataStore(f"zk://127.0.0.1:{port}/ledgers", session_timeout=2.0, connect_timeout=2.0).start()
    assert f"cannot connect to ZooKeeper at 127.0.0.1:{port} within 2s (last: " in str(got.value)
    assert "Connection refused" in str(got.value)
    kazoo = [r for r in caplog.records if r.name.startswith("kazoo")]
    assert kazoo and all(r.levelno < logging.WARNING for r in kazoo)     # its many lines: DEBUG
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_zookeeper_outage_is_one_warning_and_one_line_when_back(tmp_path, caplog) -> None:
    """A real fault: the ZooKeeper process is stopped (SIGTERM) and started again on its port."""
    import logging

    from bkledger.bookie.local.zookeeper import ZooKeeperServer

    caplog.set_level(logging.DEBUG, logger="kazoo")
    server = ZooKeeperServer()
    server.start(tmp_path / "zk", port=0, timeout=60.0)
    try:
        with MetadataStore(server.metadata_service_uri("/outage/ledgers"), session_timeout=4.0) as store:
            store.init_cluster()
            server.stop()

            def ours() -> list[logging.LogRecord]:
                return [r for r in caplog.records if r.name == "bkledger.zookeeper"]

            _wait_for(lambda: len(ours()) >= 1)
            server.start(tmp_path / "zk", port=server.port, timeout=60.0)
            _wait_for(lambda: any("connected again" in r.getMessage() for r in ours()))
            assert store.children("") != []                           # the session works again
        said = [r.getMessage() for r in ours() if r.levelno >= logging.WARNING]    # (INFO: "still unreachable")
        assert len(said) == 2, said
        assert said[0].startswith(f"ZooKeeper at {server.connect_string}: ") and "check that ZooKeeper runs" in \
            said[0]
        kazoo = [r for r in caplog.records if r.name.startswith("kazoo")]
        assert len(kazoo) > 2 and all(r.levelno < logging.WARNING for r in kazoo)
    finally:
        server.stop()


def test_cli_log_commands_check_the_name(metadata_uri: str, capsys) -> None:
    from bkledger.bookie.cli import main

    with MetadataStore(metadata_uri, session_timeout=5.0) as store:
        store.init_cluster()
    capsys.readouterr()
    assert main(["log", "describe", "a/b", "--uri", metadata_uri]) == 1
    assert "bkledger log describe: log name 'a/b': '/' at index 1 is not allowed" in capsys.readouterr().err
    assert main(["log", "tail", "x\u0001", "--uri", metadata_uri]) == 1
    assert "character U+0001 at index 1" in capsys.readouterr().err
    assert main(["log", "create", "x" * 250, "--uri", metadata_uri]) == 1
    assert "is 250 characters long; a log name has at most 249" in capsys.readouterr().err
    assert main(["log", "create", "x" * 249, "--uri", metadata_uri]) == 0


def test_a_log_read_at_a_wrong_root_says_so(metadata_uri: str, bk_factory) -> None:
    from bkledger.client.errors import LogNotFoundError

    with pytest.raises(LogNotFoundError) as got:
        bk_factory(metadata_uri).log_metadata("orders")
    assert "log 'orders' does not exist" in str(got.value) and "no bkledger cluster at" in str(got.value)
    bk = bk_factory(metadata_uri)
    bk.store.init_cluster()
    with pytest.raises(LogNotFoundError) as got:
        bk.log_metadata("orders")
    assert "no bkledger cluster" not in str(got.value)


def test_a_mistyped_root_finds_its_sibling_on_a_crowded_zookeeper(metadata_uri: str, bk_factory) -> None:
    """The roots named in a NoClusterError are looked for beside the wrong root first: with more top-level
    znodes than the bounded look reaches (a shared ZooKeeper), `/x/ledgrs` still names `/x/ledgers`."""
    good = metadata_uri
    wrong = good.replace("/ledgers", "/ledgrs")
    with MetadataStore(good, session_timeout=5.0) as store:
        store.init_cluster()
        for n in range(60):
            store.create(f"/crowd-{uuid.uuid4().hex[:8]}-{n}", b"", makepath=True)
    with pytest.raises(NoClusterError) as got:
        bk_factory(wrong).create_ledger(3, 2, 2)
    assert good.split("/", 3)[3] in str(got.value).split("clusters found", 1)[-1]
