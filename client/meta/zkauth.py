"""ZooKeeper security of a session: digest credentials and the ACLs of the znodes bkledger creates.

Mirrors BookKeeper's `zkEnableSecurity` (ZkUtils.getACLs: CREATOR_ALL_ACL when on, OPEN_ACL_UNSAFE when
off) with ZooKeeper's built-in digest scheme instead of SASL: `zkDigestUser` and the password in the file
`zkDigestPasswordPath` are added to the session (kazoo `auth_data`, re-sent on every reconnect). With
`zkEnableSecurity=true` every znode the session creates is owned by that digest identity (all rights),
and clients without the credentials get nothing, except READ on the cluster's discovery znodes: the
ledgers root, `LAYOUT`, `INSTANCEID` and the bookie registrations under `available/` (addresses and
ports, no secrets), so monitoring can list bookies without the password. Ledger metadata (which holds
ledger passwords), logs, cookies, id generators and autorecovery state are readable only with the
credentials. Like BookKeeper, znodes created before security was turned on keep their open ACLs.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from kazoo.security import ACL, make_acl, make_digest_acl

from bkledger.client.errors import InvalidOptionError

DISCOVERY = ("LAYOUT", "INSTANCEID")


@dataclasses.dataclass(frozen=True)
class ZkAuth:
    """Digest credentials, and whether znodes created with them get ACLs."""

    user: str
    password: str
    enable_acl: bool = True

    @property
    def auth_data(self) -> list[tuple[str, str]]:
        return [("digest", f"{self.user}:{self.password}")]

    @property
    def owner_acl(self) -> list[ACL]:
        return [make_digest_acl(self.user, self.password, all=True)]

    def acl_for(self, path: str, root: str) -> list[ACL] | None:
        """The ACL for a new znode at `path` (None: ZooKeeper's open ACL, security off)."""
        if not self.enable_acl:
            return None
        if is_discovery(path, root):
            return [*self.owner_acl, make_acl("world", "anyone", read=True)]
        return self.owner_acl


def is_discovery(path: str, root: str) -> bool:
    """The ledgers root, LAYOUT, INSTANCEID and bookie registrations (`available/...`)."""
    if path == root or path in (f"{root}/{name}" for name in DISCOVERY):
        return True
    return path == f"{root}/available" or path.startswith(f"{root}/available/")


def zk_auth(config: Any) -> ZkAuth | None:
    """The ZooKeeper security of a configuration with `zkEnableSecurity`, `zkDigestUser` and
    `zkDigestPasswordPath` (ClientConfig, BookieConfig); None when there are no credentials."""
    enable = bool(config.zkEnableSecurity)
    user, path = str(config.zkDigestUser), str(config.zkDigestPasswordPath)
    if not user and not path:
        if enable:
            raise InvalidOptionError("zkEnableSecurity=true needs ZooKeeper credentials: set zkDigestUser and "
                                     "zkDigestPasswordPath (a file holding the password)")
        return None
    if not user or not path:
        raise InvalidOptionError("give both zkDigestUser and zkDigestPasswordPath (or neither)")
    if ":" in user:
        raise InvalidOptionError(f"zkDigestUser must not contain ':', got {user!r}")
    try:
        password = Path(path).read_text().strip()
    except OSError as exc:
        raise InvalidOptionError(f"zkDigestPasswordPath={path}: cannot read it ({exc.strerror})") from None
    if not password:
        raise InvalidOptionError(f"zkDigestPasswordPath={path} is empty: write the password into it")
    return ZkAuth(user, password, enable)

