"""TLS between clients and bookies: channel credentials from BookKeeper's TLS keys, and clear rejections.

Mirrors BookKeeper's TLSContextFactory (client side) on gRPC: TLS is on when `tlsProviderFactoryClass`
names the factory (`org.apache.bookkeeper.tls.TLSContextFactory`); the client then verifies each bookie
against `tlsTrustStore` (PEM CA bundle, required) and, with `tlsClientAuthentication=true`, presents
`tlsCertificatePath` (PEM chain) with the key `tlsKeyStore` (PEM; encrypted if `tlsKeyStorePasswordPath`
names a file holding its password). Only the PEM store type is supported (BookKeeper also reads JKS and
PKCS12); gRPC always uses its built-in BoringSSL whatever `tlsProvider` says, and always checks that the
bookie's certificate names the address it dials (an IP or DNS subjectAltName).

A bookie that rejects a client's certificate just closes the connection (TLS 1.3 sends its alert after
the client finished), so the client cannot know which check failed: `rejection` turns gRPC's error into
a `BookieTlsError` that lists the likely causes and what to do, and checks the client's own certificate
(expired, not yet valid) locally first.
"""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path

import grpc

from bkledger.client.errors import BookieTlsError, InvalidOptionError

TLS_FACTORY_CLASS = "org.apache.bookkeeper.tls.TLSContextFactory"
FACTORY_NAMES = (TLS_FACTORY_CLASS, "TLSContextFactory")
PROVIDERS = ("OpenSSL", "JDK")
STORE_TYPES = ("PEM",)


@dataclasses.dataclass(frozen=True)
class TlsSettings:
    """The TLS keys of a client (or of a bookie acting as one), as BookKeeper names them."""

    tlsProviderFactoryClass: str = ""
    tlsProvider: str = "OpenSSL"
    tlsClientAuthentication: bool = False
    tlsKeyStoreType: str = "PEM"
    tlsKeyStore: str = ""
    tlsKeyStorePasswordPath: str = ""
    tlsCertificatePath: str = ""
    tlsTrustStoreType: str = "PEM"
    tlsTrustStore: str = ""

    @property
    def enabled(self) -> bool:
        return bool(self.tlsProviderFactoryClass)


TLS_KEYS = tuple(f.name for f in dataclasses.fields(TlsSettings))


def settings_of(config: object) -> TlsSettings:
    """The TLS keys of any configuration object that has them (ClientConfig, BookieConfig)."""
    return TlsSettings(**{k: getattr(config, k) for k in TLS_KEYS})


def validate(tls: TlsSettings, *, server: bool = False) -> None:
    """InvalidOptionError naming the key, for settings that cannot work."""
    if not tls.enabled:
        return
    if tls.tlsProviderFactoryClass not in FACTORY_NAMES:
        raise InvalidOptionError(f"tlsProviderFactoryClass must be {TLS_FACTORY_CLASS} (or empty: no TLS), "
                                 f"got {tls.tlsProviderFactoryClass!r}")
    if tls.tlsProvider not in PROVIDERS:
        raise InvalidOptionError(f"tlsProvider must be OpenSSL or JDK (gRPC uses BoringSSL either way), "
                                 f"got {tls.tlsProvider!r}")
    for key in ("tlsKeyStoreType", "tlsTrustStoreType"):
        if getattr(tls, key).upper() not in STORE_TYPES:
            raise InvalidOptionError(f"{key}={getattr(tls, key)}: only PEM files are supported; convert the "
                                     "store with `openssl pkcs12 -in store.p12 -nodes` (or keytool) to PEM")
    needs_own = server or tls.tlsClientAuthentication
    needed = (["tlsKeyStore", "tlsCertificatePath"] if needs_own else []) + (
        ["tlsTrustStore"] if not server or tls.tlsClientAuthentication else [])
    for key in needed:
        if not getattr(tls, key):
            role = "a bookie" if server else "a client"
            raise InvalidOptionError(f"{key} is required for {role} with TLS "
                                     f"(tlsClientAuthentication={str(tls.tlsClientAuthentication).lower()})")


def read_file(tls: TlsSettings, key: str) -> bytes:
    path = getattr(tls, key)
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InvalidOptionError(f"{key}={path}: cannot read it ({exc.strerror})") from None


def private_key(tls: TlsSettings) -> bytes:
    """The PEM key of `tlsKeyStore`, decrypted with the password in `tlsKeyStorePasswordPath` if set."""
    data = read_file(tls, "tlsKeyStore")
    if not tls.tlsKeyStorePasswordPath:
        return data
    from cryptography.hazmat.primitives import serialization

    password = read_file(tls, "tlsKeyStorePasswordPath").strip()
    try:
        key = serialization.load_pem_private_key(data, password)
    except (ValueError, TypeError) as exc:
        raise InvalidOptionError(f"tlsKeyStore={tls.tlsKeyStore}: cannot decrypt it with the password in "
                                 f"tlsKeyStorePasswordPath ({exc})") from None
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def channel_credentials(tls: TlsSettings) -> grpc.ChannelCredentials | None:
    """gRPC credentials for channels to bookies; None when TLS is off (plaintext)."""
    if not tls.enabled:
        return None
    validate(tls)
    if tls.tlsClientAuthentication:
        check_certificate(tls)
        return grpc.ssl_channel_credentials(read_file(tls, "tlsTrustStore"), private_key(tls),
                                            read_file(tls, "tlsCertificatePath"))
    return grpc.ssl_channel_credentials(read_file(tls, "tlsTrustStore"))


def check_certificate(tls: TlsSettings, now: datetime.datetime | None = None) -> None:
    """BookieTlsError if the certificate we would present is expired or not yet valid."""
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(read_file(tls, "tlsCertificatePath"))
    except ValueError as exc:
        raise InvalidOptionError(f"tlsCertificatePath={tls.tlsCertificatePath}: not a PEM certificate ({exc})") \
            from None
    now = now or datetime.datetime.now(datetime.UTC)
    if now > cert.not_valid_after_utc:
        raise BookieTlsError(f"the client certificate {tls.tlsCertificatePath} expired at "
                             f"{cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC: bookies will refuse it; "
                             "get a new one signed by the bookies' trust store", reason="expired")
    if now < cert.not_valid_before_utc:
        raise BookieTlsError(f"the client certificate {tls.tlsCertificatePath} is valid only from "
                             f"{cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC (is the clock right?)",
                             reason="not yet valid")


def rejection(details: str, tls: TlsSettings, bookie_id: str, address: str) -> BookieTlsError | None:
    """The TLS failure behind a gRPC connect error, or None if it does not look like one."""
    text = details or ""
    where = f"bookie {bookie_id} ({address})"
    if "Hostname Verification" in text or "No match found for server name" in text:
        return BookieTlsError(f"{where}: its certificate does not name {address.rsplit(':', 1)[0]}; give the "
                              "bookie a certificate with that address as a subjectAltName (IP or DNS), or "
                              "advertise the address its certificate names (advertisedAddress)",
                              reason="hostname", bookie_id=bookie_id)
    if "WRONG_VERSION_NUMBER" in text:
        return BookieTlsError(f"{where} does not speak TLS (it answered in plaintext): configure the bookie's TLS "
                              "keys (tlsProviderFactoryClass, tlsCertificatePath, tlsKeyStore) or turn TLS off here",
                              reason="plaintext bookie", bookie_id=bookie_id)
    if "CERTIFICATE_VERIFY_FAILED" in text or "Tls handshake failed" in text or "Ssl handshake failed" in text:
        why = "expired" if "expired" in text else "unknown CA"
        return BookieTlsError(f"{where}: TLS handshake failed, the bookie's certificate is not trusted ({why}): "
                              f"tlsTrustStore={tls.tlsTrustStore} must hold the CA that signed it "
                              f"[{_tail(text)}]", reason=f"server certificate: {why}", bookie_id=bookie_id)
    if "failed to connect" not in text or ("Socket closed" not in text and "Connection reset" not in text):
        return None
    if not tls.enabled:
        return BookieTlsError(f"{where} closed the connection at once: it probably serves TLS and this client "
                              f"speaks plaintext; set tlsProviderFactoryClass={TLS_FACTORY_CLASS} and "
                              "tlsTrustStore (and, if the bookie requires it, tlsClientAuthentication=true with "
                              "tlsCertificatePath and tlsKeyStore)", reason="plaintext client", bookie_id=bookie_id)
    if not tls.tlsClientAuthentication:
        return BookieTlsError(f"{where} closed the connection during the TLS handshake: it requires a client "
                              "certificate; set tlsClientAuthentication=true with tlsCertificatePath and "
                              "tlsKeyStore (a certificate signed by the bookie's trust store)",
                              reason="missing client certificate", bookie_id=bookie_id)
    return BookieTlsError(f"{where} closed the connection during the TLS handshake: it refused the client "
                          f"certificate {tls.tlsCertificatePath} (signed by a CA outside the bookie's "
                          "tlsTrustStore, expired or revoked; the bookie's log says which)",
                          reason="client certificate refused", bookie_id=bookie_id)


def _tail(text: str) -> str:
    return text.rsplit("last error: ", 1)[-1][:200]
