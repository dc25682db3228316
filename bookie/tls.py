"""TLS of the bookie's gRPC server, from BookKeeper's keys (the server half of BookKeeper's TLSContextFactory).

With `tlsProviderFactoryClass` set, the bookie serves only TLS on `bookiePort`, presenting
`tlsCertificatePath` (PEM chain) with the key `tlsKeyStore` (PEM). With `tlsClientAuthentication=true` it
requires every client to present a certificate signed by a CA in `tlsTrustStore` (and within its validity
dates); others fail the handshake, which the bookie's log records. With
`tlsCertFilesRefreshDurationSeconds > 0` changed files are reloaded (checked at most that often, when a
client connects), so certificates can be rotated without a restart. The same keys make the client side
of the autorecovery daemon (client.tls), as BookKeeper's AutoRecoveryMain does with the server config.
"""

from __future__ import annotations

import logging
import os
import threading
import time

import grpc

from bkledger.bookie.config import BookieConfig, ConfigError
from bkledger.client.errors import InvalidOptionError
from bkledger.client.tls import TlsSettings, private_key, read_file, settings_of, validate

log = logging.getLogger("bkledger.bookie.tls")


def server_credentials(config: BookieConfig) -> grpc.ServerCredentials | None:
    """The server credentials of a bookie; None when TLS is off. ConfigError names a bad key."""
    tls = settings_of(config)
    if not tls.enabled:
        return None
    try:
        validate(tls, server=True)
        initial = _certificate_configuration(tls)
    except InvalidOptionError as exc:
        raise ConfigError(str(exc)) from None
    if config.tlsCertFilesRefreshDurationSeconds <= 0:
        return grpc.ssl_server_credentials(
            [(private_key(tls), read_file(tls, "tlsCertificatePath"))],
            root_certificates=read_file(tls, "tlsTrustStore") if tls.tlsClientAuthentication else None,
            require_client_auth=tls.tlsClientAuthentication)
    reloader = _Reloader(tls, config.tlsCertFilesRefreshDurationSeconds)
    return grpc.dynamic_ssl_server_credentials(initial, reloader.fetch,
                                               require_client_authentication=tls.tlsClientAuthentication)


def _certificate_configuration(tls: TlsSettings) -> grpc.ServerCertificateConfiguration:
    trust = read_file(tls, "tlsTrustStore") if tls.tlsClientAuthentication else None
    return grpc.ssl_server_certificate_configuration(
        [(private_key(tls), read_file(tls, "tlsCertificatePath"))], root_certificates=trust)


class _Reloader:
    """gRPC asks at each handshake; the files are looked at once per `period` s, reloaded when changed."""

    def __init__(self, tls: TlsSettings, period: float) -> None:
        self.tls = tls
        self.period = period
        self._lock = threading.Lock()
        self._checked = time.monotonic()
        self._stamps = self._mtimes()

    def _mtimes(self) -> tuple[float, ...]:
        paths = [self.tls.tlsCertificatePath, self.tls.tlsKeyStore, self.tls.tlsTrustStore,
                 self.tls.tlsKeyStorePasswordPath]
        return tuple(os.stat(p).st_mtime if p and os.path.exists(p) else 0.0 for p in paths)

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        with self._lock:
            now = time.monotonic()
            if now - self._checked < self.period:
                return None
            self._checked = now
            stamps = self._mtimes()
            if stamps == self._stamps:
                return None
            try:
                fresh = _certificate_configuration(self.tls)
            except InvalidOptionError as exc:
                log.warning("TLS certificate files changed but cannot be loaded (keeping the old ones): %s", exc)
                return None
            self._stamps = stamps
            log.info("TLS certificate files reloaded (%s)", self.tls.tlsCertificatePath)
            return fresh
