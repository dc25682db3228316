"""ZooKeeper ACLs of a secure cluster (README "Security"): with zkEnableSecurity and digest credentials,
every znode bkledger creates (ledgers, logs, cookies, registrations, id generators, autorecovery state)
refuses changes from a session without the credentials (NoAuth), against the real ZooKeeper; only the
discovery znodes (root, LAYOUT, INSTANCEID, registrations) can be read without them."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import make_digest_acl_credential

from bkledger.bookie.local.cluster import LocalCluster
from bkledger.client import BookKeeper
from bkledger.client.meta.errors import MetadataAccessDeniedError
from tests.integration.bookie_util import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def acl_cluster(tmp_path_factory, zookeeper) -> Iterator[LocalCluster]:
    cluster = LocalCluster(tmp_path_factory.mktemp("acl"))
    try:                    # stopped also when the setup fails half-way
        cluster.up(1, {"gcWaitTime": "0"}, zookeeper_port=zookeeper.port,
                   root=f"/acl-{uuid.uuid4().hex[:8]}/ledgers", autorecovery=True, secure=True)
        with BookKeeper(cluster.metadata_service_uri, **cluster.client_options) as bk:
            handle = bk.create_ledger(1, 1, 1, password=b"pw")
            handle.add_entry(b"guarded")
            handle.close()
            writer = bk.open_log_writer("orders", ensemble_size=1, write_quorum=1, ack_quorum=1)
            writer.append(b"order 1")
            writer.close()
        yield cluster
    finally:
        cluster.down()


def kazoo(cluster: LocalCluster, auth: bool) -> KazooClient:
    hosts = cluster.metadata_service_uri.split("://", 1)[1].split("/", 1)[0]
    options = cluster.client_options
    auth_data = None
    if auth:
        password = Path(options["zkDigestPasswordPath"]).read_text().strip()
        auth_data = [("digest", f"{options['zkDigestUser']}:{password}")]
    client = KazooClient(hosts=hosts, auth_data=auth_data)
    client.start(timeout=15)
    return client


def walk(zk: KazooClient, path: str) -> list[str]:
    out = [path]
    for child in zk.get_children(path):
        out += walk(zk, f"{path}/{child}")
    return out


def root_of(cluster: LocalCluster) -> str:
    return "/" + cluster.metadata_service_uri.split("://", 1)[1].split("/", 1)[1]


def test_every_znode_refuses_changes_without_credentials(acl_cluster):
    root = root_of(acl_cluster)
    owner = kazoo(acl_cluster, auth=True)
    stranger = kazoo(acl_cluster, auth=False)
    try:
        election = f"{root}/underreplication/auditorelection"   # the autorecovery daemon may still be starting
        wait_for(lambda: owner.exists(election) and owner.get_children(election), 60, "the auditor election")
        paths = walk(owner, root)
        kinds = {"ledger": "/L0000", "log": "/orders", "cookie": "/cookies/", "registration": "/available/127",
                 "idgen": "/idgen", "autorecovery": "/underreplication/auditorelection/"}
        for kind, marker in kinds.items():
            assert any(marker in p for p in paths), f"no {kind} znode found under {root}: {paths}"
        user = acl_cluster.client_options["zkDigestUser"]
        for path in paths:
            acls, _ = owner.get_acls(path)
            assert any(a.id.scheme == "digest" and a.id.id.startswith(f"{user}:") for a in acls), (path, acls)
            assert all(a.perms == 1 for a in acls if a.id.scheme == "world"), (path, acls)   # READ at most
            with pytest.raises(NoAuthError):
                stranger.set(path, b"vandalised")
            with pytest.raises(NoAuthError):
                stranger.create(f"{path}/intruder", b"")
        for path in sorted(paths, key=len, reverse=True):
            if not owner.get_children(path):
                with pytest.raises(NoAuthError):
                    stranger.delete(path)
        assert owner.get_children(root) == stranger.get_children(root)    # discovery stays readable
        ledger = next(p for p in paths if "/L0000" in p)
        with pytest.raises(NoAuthError):
            stranger.get(ledger)                                          # ledger metadata holds passwords
    finally:
        owner.stop()
        stranger.stop()


def test_wrong_credentials_get_a_typed_error(acl_cluster, tmp_path):
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-the-password\n")
    options = {**acl_cluster.client_options, "zkDigestPasswordPath": str(wrong)}
    with BookKeeper(acl_cluster.metadata_service_uri, **options) as bk:
        assert bk.store.writable_bookies()                 # discovery is readable ...
        with pytest.raises(MetadataAccessDeniedError, match="zkDigestPasswordPath"):
            bk.ledger_metadata(0)                          # ... ledger metadata is not
        with pytest.raises(MetadataAccessDeniedError):
            bk.create_ledger(1, 1, 1)


def test_digest_identity_is_the_configured_user(acl_cluster):
    """The ACL names exactly the configured user and password digest (ZooKeeper's digest scheme)."""
    options = acl_cluster.client_options
    password = Path(options["zkDigestPasswordPath"]).read_text().strip()
    owner = kazoo(acl_cluster, auth=True)
    try:
        acls, _ = owner.get_acls(root_of(acl_cluster) + "/INSTANCEID")
    finally:
        owner.stop()
    assert make_digest_acl_credential(options["zkDigestUser"], password) in {a.id.id for a in acls}


def test_embedded_zookeeper_of_a_secure_cluster_has_a_superuser(tmp_path):
    """`local up --secure` starts its own ZooKeeper with superDigest: `super` (password in secure/) can repair
    what the digest user owns; the credentials of nobody else can."""
    cluster = LocalCluster(tmp_path / "own-zk")
    cluster.up(0, secure=True)
    try:
        owned = root_of(cluster) + "/INSTANCEID"
        super_password = (tmp_path / "own-zk" / "secure" / "zk-super.password").read_text().strip()
        stranger = kazoo(cluster, auth=False)
        try:
            with pytest.raises(NoAuthError):
                stranger.set(owned, b"x")
        finally:
            stranger.stop()
        hosts = cluster.metadata_service_uri.split("://", 1)[1].split("/", 1)[0]
        admin = KazooClient(hosts=hosts, auth_data=[("digest", f"super:{super_password}")])
        admin.start(timeout=15)
        try:
            data, _ = admin.get(owned)
            admin.set(owned, data)             # the superuser may write what only `bkledger` could
        finally:
            admin.stop()
    finally:
        cluster.down()
