"""`bkledger log` as an operator uses it (issue 45 item 4), run as a subprocess against a real local
cluster: found without --uri, a console producer writing the record envelope, tail and readledger decoding
it, create/delete/truncate/retention, JSON everywhere, control characters escaped, a closed pipe, --version."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bkledger.bookie.local.cluster import LocalCluster
from bkledger.client import BookKeeper
from bkledger.client.config import ClientConfig
from bkledger.spark_connector import envelope as env
from tests.integration.conftest import FAST_CLIENT, start_cluster

pytestmark = pytest.mark.integration
CLI = [sys.executable, "-m", "bkledger.bookie.cli"]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[Path]:
    """A directory whose var/local-cluster holds a running cluster: the CLI run there needs no --uri."""
    base = tmp_path_factory.mktemp("logcli")
    cluster = start_cluster(base / "var" / "local-cluster", zookeeper, 3)
    try:
        yield base
    finally:
        cluster.down()


def bk_of(home: Path) -> BookKeeper:
    uri = LocalCluster.load(home / "var" / "local-cluster").metadata_service_uri
    return BookKeeper(uri, config=ClientConfig.from_options(FAST_CLIENT))


def run(home: Path, *argv: str, stdin: bytes = b"", ok: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*CLI, *argv], cwd=home, input=stdin.decode("latin-1"), capture_output=True, text=True,
                          timeout=120, encoding="latin-1")
    if ok:
        assert done.returncode == 0, (argv, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def new_name() -> str:
    return f"cli-{uuid.uuid4().hex[:8]}"


def test_append_then_tail_decodes_the_envelope_without_uri(home: Path):
    """`log append` (no --uri: the local cluster in ./var/local-cluster) writes each stdin line as one record
    in the envelope the Spark writer writes (the ledger names it in its custom metadata); `log tail --json`
    gives key, timestamp and value back; the text form escapes control characters; --raw shows the bytes."""
    name = new_name()
    run(home, "log", "create", name)
    lines = [b"plain one", b"with \x1b[31mescape\x1b[0m and \x07 bell", "\u00e9t\u00e9".encode()]
    got = run(home, "log", "append", name, "--key", "k1", "--timestamp", "2026-01-31T12:00:00Z", "--json",
              stdin=b"\n".join(lines) + b"\n")
    summary = json.loads(got.stdout)
    assert summary["records"] == 3 and summary["log"] == name

    with bk_of(home) as bk:
        meta = bk.log_metadata(name)
        ledger = meta.ledgers[-1].ledger_id
        assert env.version_of(bk.ledger_metadata(ledger).custom_metadata) == env.V1      # as Spark's writer
        assert meta.ledgers[-1].envelope == env.V1           # and the log records it (readers skip a lookup)
        with bk.open_log_reader(name) as reader:
            payloads = [r.payload for r in reader.read(max_records=3, timeout=10)]
    ts_us = int(datetime.datetime(2026, 1, 31, 12, tzinfo=datetime.UTC).timestamp()) * 1_000_000
    assert [env.decode(p) for p in payloads] == [(b"k1", ts_us, line) for line in lines]

    tailed = run(home, "log", "tail", name, "--json", "--max", "3")
    records = [json.loads(line) for line in tailed.stdout.splitlines()]
    assert [r["value"] for r in records] == [line.decode() for line in lines]
    assert {r["key"] for r in records} == {"k1"}
    assert {r["timestamp"] for r in records} == {"2026-01-31T12:00:00.000000Z"}
    assert records[0]["timestamp_us"] == ts_us

    text = run(home, "log", "tail", name, "--max", "3").stdout
    assert "\x1b" not in text and "\x07" not in text
    assert "\\x1b[31mescape" in text and "key=k1\tts=2026-01-31T12:00:00.000000Z\t" in text
    assert len(text.splitlines()) == 3

    raw = [json.loads(line) for line in run(home, "log", "tail", name, "--json", "--raw", "--hex",
                                              "--max", "1").stdout.splitlines()]
    assert bytes.fromhex(raw[0]["value"]) == payloads[0] and "key" not in raw[0]


def test_append_files_with_key_separator_and_readledger_decodes(home: Path, tmp_path: Path):
    """Lines of files, `KEY<TAB>VALUE` split by --key-separator, timestamp in milliseconds (Kafka's unit);
    `shell readledger` decodes the envelope in its table and its JSON (and shows the bytes with --raw)."""
    name = new_name()
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_bytes(b"user1\tclicked\nuser2\tleft\n")
    second.write_bytes(b"no separator here\n")
    missing = run(home, "log", "append", name, str(first), str(tmp_path / "nope.txt"), "--create", ok=False)
    assert missing.returncode == 1 and "nope.txt: no such file" in missing.stderr
    assert name not in json.loads(run(home, "log", "list", "--json").stdout)       # checked before writing
    run(home, "log", "append", name, str(first), str(second), "--create", "--key-separator", "\t",
        "--timestamp", "1700000000000")
    with bk_of(home) as bk:
        ledger = bk.log_metadata(name).ledgers[-1].ledger_id

    data = json.loads(run(home, "shell", "readledger", str(ledger), "--json").stdout)
    assert [(d["key"], d["timestamp_us"], d["value"]) for d in data] == [
        ("user1", 1_700_000_000_000_000, "clicked"), ("user2", 1_700_000_000_000_000, "left"),
        (None, 1_700_000_000_000_000, "no separator here")]
    table = run(home, "shell", "readledger", str(ledger)).stdout.splitlines()
    assert table[0].split() == ["entry", "size", "key", "timestamp", "value"]
    assert table[2].split()[2:4] == ["user1", "2023-11-14T22:13:20.000000Z"] and table[2].endswith("clicked")
    raw = json.loads(run(home, "shell", "readledger", str(ledger), "--json", "--raw", "--hex").stdout)
    assert env.decode(bytes.fromhex(raw[0]["payload"])) == (b"user1", 1_700_000_000_000_000, b"clicked")


def test_create_retention_truncate_delete(home: Path):
    """The log's life from the CLI, each verb's --json really JSON; `log list --json` a JSON list."""
    name = new_name()
    created = json.loads(run(home, "log", "create", name, "--max-age", "7d", "--json").stdout)
    assert created["retention"]["max_age_s"] == 7 * 86400
    again = run(home, "log", "create", name, ok=False)
    assert again.returncode == 1 and "exists already" in again.stderr
    assert name in json.loads(run(home, "log", "list", "--json").stdout)

    ret = json.loads(run(home, "log", "retention", name, "--max-bytes", "1g", "--json").stdout)
    assert ret == {"log": name, "max_age_s": 7 * 86400, "max_bytes": 1 << 30}       # --max-age kept
    ret = json.loads(run(home, "log", "retention", name, "--max-age", "none", "--json").stdout)
    assert ret["max_age_s"] is None and ret["max_bytes"] == 1 << 30
    bad = run(home, "log", "retention", name, "--max-age", "soon", ok=False)
    assert bad.returncode == 2 and "--max-age" in bad.stderr

    nothing = json.loads(run(home, "log", "append", name, "--json").stdout)     # empty stdin: no empty ledger
    assert nothing["records"] == 0 and nothing["first"] is None
    for n in range(3):                           # three ledgers: each append opens a writer on a new one
        run(home, "log", "append", name, stdin=f"record {n}\n".encode())
    with bk_of(home) as bk:
        ledgers = bk.log_metadata(name).ledger_ids
    assert len(ledgers) == 3
    cut = json.loads(run(home, "log", "truncate", name, "--before", f"{ledgers[2]}:0", "--json").stdout)
    assert cut["deleted_ledgers"] == ledgers[:2]
    assert [r["value"] for r in map(json.loads, run(home, "log", "tail", name, "--json", "--max", "5",
                                                    "--timeout", "1").stdout.splitlines())] == ["record 2"]

    refused = run(home, "log", "delete", name, ok=False)            # stdin is no terminal: no confirmation
    assert refused.returncode == 1 and "--force" in refused.stderr
    run(home, "log", "delete", name, "--force")
    assert name not in json.loads(run(home, "log", "list", "--json").stdout)
    gone = run(home, "log", "describe", name, ok=False)
    assert gone.returncode == 1 and name in gone.stderr


def test_append_refuses_to_fence_a_live_writer(home: Path):
    """A console producer does not silently fence an application's writer: it says so, unless --fence-writer."""
    name = new_name()
    with bk_of(home) as bk, bk.open_log_writer(name) as writer:
        writer.append(b"from the application")
        refused = run(home, "log", "append", name, stdin=b"x\n", ok=False)
        assert refused.returncode == 1 and "live writer" in refused.stderr and "--fence-writer" in refused.stderr
        writer.append(b"still the writer")


def test_closed_pipe_ends_quietly(home: Path):
    """`bkledger log tail ... | head -1`: once the reader of stdout is gone the CLI exits 141 (SIGPIPE's
    status) with nothing on stderr, not a BrokenPipeError traceback."""
    name = new_name()
    run(home, "log", "append", name, "--create", stdin=b"first\n")
    proc = subprocess.Popen([*CLI, "log", "tail", name, "--follow"], cwd=home, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline().endswith(b"first\n")
        proc.stdout.close()                                  # what `head -1` does after its line
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            run(home, "log", "append", name, "--fence-writer", stdin=b"more\n")   # tail writes: EPIPE
        assert proc.wait(timeout=30) == 141
        assert proc.stderr.read() == b""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_version_and_list_json_elsewhere(home: Path, tmp_path: Path):
    """`--version`; with --dir naming the cluster the CLI works from any directory."""
    out = run(tmp_path, "--version").stdout
    assert out.startswith("bkledger ") and out.split()[1][0].isdigit()
    listed = run(tmp_path, "log", "list", "--json", "--dir", str(home / "var" / "local-cluster")).stdout
    assert isinstance(json.loads(listed), list)
    nowhere = run(tmp_path, "log", "list", ok=False)
    assert nowhere.returncode == 1 and "bkledger local up" in nowhere.stderr
    assert os.path.isdir(home / "var" / "local-cluster")


def test_append_failing_midway_says_what_was_acknowledged(cluster_factory):
    """Bookies die (kill -9) while the console producer runs: it exits 1 with one line saying how many
    records were acknowledged before the error, and those are in the log."""
    cluster = cluster_factory(3)
    name = new_name()
    proc = subprocess.Popen([*CLI, "log", "append", name, "--create", "--dir", str(cluster.base_dir)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdin is not None
        proc.stdin.write(b"before\n")
        proc.stdin.flush()
        with BookKeeper(cluster.metadata_service_uri, config=ClientConfig.from_options(FAST_CLIENT)) as bk:
            deadline = time.monotonic() + 60
            while name not in bk.list_logs() or not list(bk.open_log_reader(name).read(max_records=1, timeout=1)):
                assert time.monotonic() < deadline, "the first record never became readable"
            cluster.kill_bookie(1)
            cluster.kill_bookie(2)
            proc.stdin.write(b"after\n")
            proc.stdin.close()
            proc.wait(timeout=120)
            assert proc.stderr is not None
            err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    text = err.decode()
    assert proc.returncode == 1, text
    assert "1 records were acknowledged before the error (0:0 .. 0:0)" in text and "Traceback" not in text
