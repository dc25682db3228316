"""Throwaway certificates for a local cluster: a CA, bookie certificates and client certificates (PEM).

Used by `bkledger local up --secure` and by the TLS tests. What BookKeeper's docs have an operator make
with `openssl`/`keytool`, done with the `cryptography` package: an EC P-256 CA valid for a year, leaf
certificates signed by it whose subjectAltName lists the addresses a client dials (IP SANs such as
127.0.0.1, DNS SANs such as localhost and this host's name; gRPC checks the address against them), with
both serverAuth and clientAuth usage (a bookie's certificate is also the client certificate of the
autorecovery daemon beside it, as BookKeeper's AutoRecoveryMain uses the bookie's TLS keys). Keys are
written unencrypted with mode 0600 unless a password is given. Nothing here is for production use.
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import os
import socket
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_DAY = datetime.timedelta(days=1)


@dataclasses.dataclass(frozen=True)
class CertFiles:
    """A PEM certificate (`tlsCertificatePath`) and its PEM private key (`tlsKeyStore`)."""

    cert: Path
    key: Path


@dataclasses.dataclass
class Authority:
    """A certificate authority whose certificate is the trust store (`tlsTrustStore`) of its cluster."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey
    cert_path: Path

    @classmethod
    def create(cls, directory: Path, name: str = "bkledger local CA", days: int = 365) -> Authority:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - _DAY)
            .not_valid_after(now + days * _DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        directory.mkdir(parents=True, exist_ok=True)
        cert_path = directory / "ca.pem"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(directory / "ca.key", key, None)
        return cls(cert, key, cert_path)

    @classmethod
    def load(cls, directory: Path) -> Authority:
        """The CA that `create` wrote to `directory` (ca.pem, ca.key)."""
        cert = x509.load_pem_x509_certificate((directory / "ca.pem").read_bytes())
        key = serialization.load_pem_private_key((directory / "ca.key").read_bytes(), None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        return cls(cert, key, directory / "ca.pem")

    def issue(self, directory: Path, name: str, *, hosts: Sequence[str] = (), days: int = 365,
              not_before: datetime.datetime | None = None, password: bytes | None = None) -> CertFiles:
        """A leaf certificate `<name>.pem` and key `<name>.key` in `directory`. `hosts` become SANs (IP
        addresses as IP SANs, names as DNS SANs); `not_before`/`days` allow expired certificates in tests."""
        key = ec.generate_private_key(ec.SECP256R1())
        start = not_before or datetime.datetime.now(datetime.UTC) - _DAY
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self.cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(start)
            .not_valid_after(start + days * _DAY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
        )
        if hosts:
            builder = builder.add_extension(x509.SubjectAlternativeName([_san(h) for h in hosts]), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        directory.mkdir(parents=True, exist_ok=True)
        files = CertFiles(directory / f"{name}.pem", directory / f"{name}.key")
        files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(files.key, key, password)
        return files


def local_hosts() -> list[str]:
    """What a client on this machine may dial: 127.0.0.1, localhost and the host's name."""
    hosts = ["127.0.0.1", "localhost"]
    name = socket.gethostname()
    if name and name not in hosts:
        hosts.append(name)
    return hosts


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey, password: bytes | None) -> None:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption())
    data = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
