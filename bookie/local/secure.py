"""The security material of `bkledger local up --secure`: certificates, ZooKeeper credentials, client config.

Everything lives in `<cluster dir>/secure/` and is made once per cluster directory:

- `ca.pem` / `ca.key`: a throwaway CA (bookie.local.certs); `ca.pem` is every trust store;
- `bookie-<i>.pem` / `.key`: each bookie's certificate (subjectAltNames 127.0.0.1, localhost, host name),
  also the client certificate of the autorecovery daemon beside it;
- `client.pem` / `.key`: the certificate of clients (shell, applications, Spark jobs);
- `zk.password`: the password of ZooKeeper digest user `bkledger` (every znode gets its ACL);
  `zk-super.password`: ZooKeeper's superuser `super` (for repairs), set on the embedded server;
- `client.conf`: the client settings (BookKeeper's keys), for `BKLEDGER_CLIENT_CONF` or `--client-conf`.

Bookies get TLS with `tlsClientAuthentication=true` and `zkEnableSecurity=true`.
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
from pathlib import Path

from bkledger.bookie.local.certs import Authority, local_hosts
from bkledger.client.tls import TLS_FACTORY_CLASS

ZK_USER = "bkledger"
SECURE_DIR = "secure"


class SecureMaterial:
    """The `secure/` directory of one local cluster."""

    def __init__(self, base_dir: Path) -> None:
        self.dir = Path(base_dir) / SECURE_DIR

    @property
    def exists(self) -> bool:
        return (self.dir / "ca.pem").exists()

    @property
    def client_conf(self) -> Path:
        return self.dir / "client.conf"

    def ensure(self) -> SecureMaterial:
        """Make the CA, the client certificate, the ZooKeeper passwords and client.conf if missing."""
        if not self.exists:
            ca = Authority.create(self.dir)
            ca.issue(self.dir, "client")
            _write_secret(self.dir / "zk.password", secrets.token_urlsafe(24))
            _write_secret(self.dir / "zk-super.password", secrets.token_urlsafe(24))
        self.client_conf.write_text("".join(f"{k}={v}\n" for k, v in self.client_options().items()))
        return self

    def _common(self) -> dict[str, str]:
        return {
            "tlsProviderFactoryClass": TLS_FACTORY_CLASS,
            "tlsClientAuthentication": "true",
            "tlsKeyStoreType": "PEM",
            "tlsTrustStoreType": "PEM",
            "tlsTrustStore": str(self.dir / "ca.pem"),
            "zkEnableSecurity": "true",
            "zkDigestUser": ZK_USER,
            "zkDigestPasswordPath": str(self.dir / "zk.password"),
        }

    def client_options(self) -> dict[str, str]:
        return {**self._common(), "tlsCertificatePath": str(self.dir / "client.pem"),
                "tlsKeyStore": str(self.dir / "client.key")}

    def bookie_options(self, index: int) -> dict[str, str]:
        """The bookie's keys; its certificate is made on first use."""
        name = f"bookie-{index}"
        if not (self.dir / f"{name}.pem").exists():
            Authority.load(self.dir).issue(self.dir, name, hosts=local_hosts())
        return {**self._common(), "tlsCertificatePath": str(self.dir / f"{name}.pem"),
                "tlsKeyStore": str(self.dir / f"{name}.key")}

    def zookeeper_properties(self) -> dict[str, str]:
        """JVM system properties of the embedded ZooKeeper: the digest of superuser `super`."""
        password = (self.dir / "zk-super.password").read_text().strip()
        digest = base64.b64encode(hashlib.sha1(f"super:{password}".encode()).digest()).decode()
        return {"zookeeper.DigestAuthenticationProvider.superDigest": f"super:{digest}"}


def _write_secret(path: Path, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")
