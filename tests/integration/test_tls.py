"""TLS between clients and real bookie processes (README "Security"): a `local up --secure` cluster
(TLS, tlsClientAuthentication=true, ZooKeeper ACLs) serves a client with the right keys, and refuses, with a
BookieTlsError that says what to fix, a plaintext client, a client without a certificate, a client
certificate from an unknown CA and an expired one; a client refuses a bookie its trust store did not sign or
whose certificate does not name its address. Autorecovery re-replicates over TLS, the shell picks up the
settings of the cluster, and a bookie reloads rotated certificate files."""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from bkledger.bookie.local.certs import Authority
from bkledger.bookie.local.cluster import LocalCluster
from bkledger.bookie.local.secure import SecureMaterial
from bkledger.client import BookKeeper
from bkledger.client.bookie_client import BookieClient
from bkledger.client.config import ClientConfig
from bkledger.client.errors import BookieTlsError
from bkledger.client.tls import TlsSettings, channel_credentials, settings_of

pytestmark = pytest.mark.integration

FAST = {"addEntryTimeoutSec": 3.0, "readTimeout": 3.0, "fenceTimeout": 3.0}


def secure_cluster(base: Path, zookeeper, bookies: int, conf: dict[str, str] | None = None,
                   autorecovery: bool = False) -> LocalCluster:
    cluster = LocalCluster(base)
    root = f"/tls-{uuid.uuid4().hex[:8]}/ledgers"
    try:
        cluster.up(bookies, {"gcWaitTime": "0", **(conf or {})}, zookeeper_port=zookeeper.port, root=root,
                   autorecovery=autorecovery, secure=True)
    except BaseException:
        cluster.down()          # nothing half-started is left behind
        raise
    return cluster


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory, zookeeper) -> Iterator[LocalCluster]:
    cluster = secure_cluster(tmp_path_factory.mktemp("tls"), zookeeper, 3)
    yield cluster
    cluster.down()


def zk_only(cluster: LocalCluster) -> dict[str, str]:
    return {k: v for k, v in cluster.client_options.items() if k.startswith("zk")}


def failed_add(cluster: LocalCluster, **options: Any) -> BookieTlsError:
    with BookKeeper(cluster.metadata_service_uri, **{**FAST, **options}) as bk:
        handle = bk.create_ledger(3, 2, 2)
        with pytest.raises(BookieTlsError) as info:
            handle.add_entry(b"refused", timeout=60)
    return info.value


def probe(bookie_id: str, credentials: grpc.ChannelCredentials | None, tls: TlsSettings) -> BaseException | None:
    """A GetBookieInfo over a fresh connection; the error it raised (None: the bookie answered)."""
    async def call() -> BaseException | None:
        client = BookieClient(bookie_id, bookie_id, credentials=credentials, tls=tls)
        try:
            await client.info(5.0)
        except BaseException as exc:  # noqa: BLE001 - the test looks at what it was
            return exc
        finally:
            await client.close()
        return None
    return asyncio.run(call())


def bookie_logs(cluster: LocalCluster) -> str:
    return "".join(Path(b.log).read_text(errors="replace") for b in cluster.bookies)


def test_tls_cluster_serves_a_client_with_its_keys(tls_cluster):
    with BookKeeper(tls_cluster.metadata_service_uri, **tls_cluster.client_options) as bk:
        handle = bk.create_ledger(3, 2, 2, password=b"pw")
        for i in range(50):
            handle.add_entry(f"entry {i}".encode())
        handle.close()
        reader = bk.open_ledger(handle.ledger_id, b"pw", recovery=False)
        assert [e.payload for e in reader.read_entries(0, 49)] == [f"entry {i}".encode() for i in range(50)]
    assert bookie_logs(tls_cluster).count("serving TLS on") == 3


def test_plaintext_client_is_refused(tls_cluster):
    error = failed_add(tls_cluster, **zk_only(tls_cluster))
    assert error.reason == "plaintext client"
    assert "tlsProviderFactoryClass" in str(error)
    raw = probe(tls_cluster.bookies[0].bookie_id, None, TlsSettings())
    assert isinstance(raw, BookieTlsError) and raw.reason == "plaintext client"
    assert "WRONG_VERSION_NUMBER" in bookie_logs(tls_cluster)


def test_client_without_certificate_is_refused(tls_cluster):
    error = failed_add(tls_cluster, **{**tls_cluster.client_options, "tlsClientAuthentication": "false"})
    assert error.reason == "missing client certificate"
    assert "tlsClientAuthentication=true" in str(error)
    assert "PEER_DID_NOT_RETURN_A_CERTIFICATE" in bookie_logs(tls_cluster)


def test_client_certificate_of_unknown_ca_is_refused(tls_cluster, tmp_path):
    stranger = Authority.create(tmp_path / "other-ca").issue(tmp_path / "other-ca", "client")
    options = {**tls_cluster.client_options, "tlsCertificatePath": str(stranger.cert),
               "tlsKeyStore": str(stranger.key)}
    error = failed_add(tls_cluster, **options)
    assert error.reason == "client certificate refused"
    assert "unable to get local issuer certificate" in bookie_logs(tls_cluster)


def test_bookie_of_unknown_ca_is_refused_by_the_client(tls_cluster, tmp_path):
    other = Authority.create(tmp_path / "other-ca")
    error = failed_add(tls_cluster, **{**tls_cluster.client_options, "tlsTrustStore": str(other.cert_path)})
    assert error.reason == "server certificate: unknown CA"
    assert "tlsTrustStore" in str(error)


def test_expired_client_certificate_is_refused(tls_cluster, tmp_path):
    secure = Path(tls_cluster.client_options["tlsTrustStore"]).parent
    long_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=30)
    expired = Authority.load(secure).issue(tmp_path, "expired", days=1, not_before=long_ago)
    options = {**tls_cluster.client_options, "tlsCertificatePath": str(expired.cert), "tlsKeyStore": str(expired.key)}
    with pytest.raises(BookieTlsError) as info:       # the client checks its own certificate first ...
        BookKeeper(tls_cluster.metadata_service_uri, **options)
    assert info.value.reason == "expired" and "expired at" in str(info.value)
    tls = settings_of(ClientConfig.from_options(options))   # ... and the bookie refuses it anyway
    credentials = grpc.ssl_channel_credentials(Path(tls.tlsTrustStore).read_bytes(), expired.key.read_bytes(),
                                               expired.cert.read_bytes())
    raw = probe(tls_cluster.bookies[0].bookie_id, credentials, tls)
    assert isinstance(raw, BookieTlsError) and raw.reason == "client certificate refused", raw
    assert "certificate has expired" in bookie_logs(tls_cluster)


def test_shell_uses_the_secure_cluster_settings(tls_cluster):
    """With --dir the shell takes the cluster's client settings; with --uri, BKLEDGER_CLIENT_CONF; with
    --conf, the bookie configuration's TLS and ZooKeeper keys."""
    cmd = [sys.executable, "-m", "bkledger.bookie.cli", "shell", "simpletest", "-n", "20", "--json"]
    by_dir = subprocess.run([*cmd, "--dir", str(tls_cluster.base_dir)], capture_output=True, text=True, timeout=120)
    assert by_dir.returncode == 0, by_dir.stderr
    assert json.loads(by_dir.stdout)["ok"] is True
    env = {**os.environ, **tls_cluster.status()["env"]}
    by_env = subprocess.run([*cmd, "--uri", tls_cluster.metadata_service_uri], capture_output=True, text=True,
                            timeout=120, env=env)
    assert by_env.returncode == 0, by_env.stderr
    bare = subprocess.run([*cmd, "--uri", tls_cluster.metadata_service_uri], capture_output=True, text=True,
                          timeout=120, env={k: v for k, v in os.environ.items() if k != "BKLEDGER_CLIENT_CONF"})
    assert bare.returncode == 1 and "NoAuth" in bare.stderr, bare.stderr
    by_conf = subprocess.run([*cmd, "--conf", tls_cluster.bookies[0].conf], capture_output=True, text=True,
                             timeout=120)                  # a bookie's configuration: its keys act as a client's
    assert by_conf.returncode == 0, by_conf.stderr


def test_autorecovery_rereplicates_over_tls(tmp_path, zookeeper):
    """The autorecovery daemons (the bookies' certificates as client certificates) copy a killed bookie's
    fragments to the others over TLS."""
    conf = {"zkTimeout": "3000", "lostBookieRecoveryDelay": "1", "rwRereplicateBackoffMs": "300"}
    cluster = secure_cluster(tmp_path / "ar", zookeeper, 4, conf, autorecovery=True)
    try:
        with BookKeeper(cluster.metadata_service_uri, **{**FAST, **cluster.client_options}) as bk:
            handle = bk.create_ledger(3, 3, 2, password=b"pw")
            for i in range(30):
                handle.add_entry(f"r{i}".encode())
            handle.close()
            victim = handle.metadata.fragments[0].ensemble[0]
            cluster.kill_bookie(next(i for i, b in enumerate(cluster.bookies) if b.bookie_id == victim))
            deadline = time.monotonic() + 90
            while victim in bk.ledger_metadata(handle.ledger_id).fragments[0].ensemble:
                assert time.monotonic() < deadline, "the lost bookie's fragment was not re-replicated in 90 s"
                time.sleep(0.25)
            survivors = bk.ledger_metadata(handle.ledger_id).fragments[0].ensemble
            for index, proc in enumerate(cluster.bookies):     # only the new copy is left to read from
                if proc.bookie_id in survivors and proc.bookie_id in handle.metadata.fragments[0].ensemble:
                    cluster.kill_bookie(index)
            reader = bk.open_ledger(handle.ledger_id, b"pw", recovery=False)
            assert [e.payload for e in reader.read_entries(0, 29)] == [f"r{i}".encode() for i in range(30)]
        logs = "".join(Path(b.autorecovery_log).read_text(errors="replace") for b in cluster.bookies)
        assert "Handshake failed" not in logs and "BookieTlsError" not in logs
    finally:
        cluster.down()


def test_bookie_certificate_must_name_its_address(tmp_path, zookeeper):
    """A bookie whose certificate names only `localhost` while its id (what clients dial) is 127.0.0.1 is
    refused by the client: gRPC checks the dialled address against the subjectAltNames."""
    base = tmp_path / "hostname"
    material = SecureMaterial(base).ensure()
    wrong = Authority.load(material.dir).issue(material.dir, "localhost-only", hosts=["localhost"])
    cluster = secure_cluster(base, zookeeper, 1, {"tlsCertificatePath": str(wrong.cert), "tlsKeyStore": str(wrong.key)})
    try:
        tls = settings_of(ClientConfig.from_options(cluster.client_options))
        error = probe(cluster.bookies[0].bookie_id, channel_credentials(tls), tls)
        assert isinstance(error, BookieTlsError) and error.reason == "hostname", error
        assert "subjectAltName" in str(error)
    finally:
        cluster.down()


def test_bookie_reloads_rotated_certificate_files(tmp_path, zookeeper):
    """tlsCertFilesRefreshDurationSeconds: certificate files replaced in place are served to new connections
    without a restart (a client trusting only the new CA gets in once the bookie reloaded)."""
    cluster = secure_cluster(tmp_path / "rotate", zookeeper, 1, {"tlsCertFilesRefreshDurationSeconds": "1"})
    try:
        bookie_id = cluster.bookies[0].bookie_id
        new_ca = Authority.create(tmp_path / "new-ca")
        options = {**cluster.client_options, "tlsTrustStore": str(new_ca.cert_path)}
        tls = settings_of(ClientConfig.from_options(options))
        before = probe(bookie_id, channel_credentials(tls), tls)
        assert isinstance(before, BookieTlsError) and before.reason == "server certificate: unknown CA", before
        fresh = new_ca.issue(tmp_path / "new-ca", "bookie", hosts=["127.0.0.1"])
        conf = Path(cluster.bookies[0].conf).read_text()
        cert_path = next(line.split("=", 1)[1] for line in conf.splitlines() if line.startswith("tlsCertificatePath="))
        key_path = next(line.split("=", 1)[1] for line in conf.splitlines() if line.startswith("tlsKeyStore="))
        Path(key_path).write_bytes(fresh.key.read_bytes())
        Path(cert_path).write_bytes(fresh.cert.read_bytes())
        deadline = time.monotonic() + 30
        while (after := probe(bookie_id, channel_credentials(tls), tls)) is not None:
            assert isinstance(after, BookieTlsError), after
            assert time.monotonic() < deadline, f"the bookie still serves the old certificate: {after}"
            time.sleep(0.5)
    finally:
        cluster.down()
