"""Client settings, with BookKeeper's ClientConfiguration names where one exists.

`ClientConfig.from_options` accepts a mapping of strings (as Spark options or a properties file give
them) and rejects unknown keys with an InvalidOptionError that names the key. Security settings (TLS to
bookies, ZooKeeper digest credentials and ACLs: see client.tls and client.meta.zkauth) can also come from
a client configuration file (Java properties, the same keys) named by the environment variable
BKLEDGER_CLIENT_CONF, which `BookKeeper(...)` reads when set; explicit settings win over the file.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bkledger.client.errors import InvalidOptionError


@dataclasses.dataclass(frozen=True)
class ClientConfig:
    zkTimeout: float = 10.0                  # s, ZooKeeper session timeout
    addEntryTimeoutSec: float = 5.0          # an add not acked by a bookie in this time: the bookie failed
    readTimeout: float = 5.0                 # s, per read request
    speculativeReadTimeout: int = 500        # ms without an answer from a bookie: also ask the next bookie of
                                             # the write set; the first valid answer wins (0: never speculate)
    maxSpeculativeReadTimeout: int = 0       # ms, cap of the backoff (x2) between further speculations of one
                                             # read (0: same as speculativeReadTimeout, so it never grows)
    reorderReadSequenceEnabled: bool = True  # read from bookies that were slow or failed recently last
    bookieFailureHistoryExpirationMSec: int = 60000   # how long a bookie counts as "recently slow"
    fenceTimeout: float = 5.0                # s, recovery's fencing reads
    metadataMaxAttempts: int = 20            # CAS attempts before giving up with a clear error
    maxEntrySize: int = 5 * 1024 * 1024 - 1024   # payload limit, below the bookie's frame limit
    maxAddRequestsInFlight: int = 2          # per bookie connection: unanswered AddRequests before new adds
                                             # wait to leave together in the next one (0: no bound)
    maxAddBulkBytesInFlight: int = 8 * 1024 * 1024   # per bookie connection: a bulk's chunks (add_entries)
                                             # also leave past maxAddRequestsInFlight while fewer bytes than
                                             # this are unanswered (0: chunks obey maxAddRequestsInFlight)
    addPipelineMinBytes: int = 256 * 1024    # per bookie connection: a second request (up to maxAddRequestsInFlight)
                                             # leaves only while the unanswered ones carry at least this many
                                             # bytes; below it, one at a time (0: always up to the bound)
    useAddStreamPort: bool = True            # add over a bookie's add port (its addStreamPort: plain TCP, faster
                                             # than gRPC) when it has one and TLS is off; false: always gRPC
    maxOutstandingAdds: int = 4000           # adds in flight per ledger before add_entry waits (deeper queues
                                             # only delay acks past addEntryTimeoutSec when many ledgers share a bookie)
    ensembleChangeMaxAttempts: int = 5       # bounded ensemble changes per failure
    readBatchBytes: int = 4 * 1024 * 1024    # range read batch size asked from bookies
    recoveryReadWindow: int = 64             # recovery reads in flight (BookKeeper: recoveryReadBatchSize)
    # ---- security (README "Security"): TLS to bookies (client.tls), ZooKeeper auth (client.meta.zkauth)
    tlsProviderFactoryClass: str = ""        # org.apache.bookkeeper.tls.TLSContextFactory: TLS on; "": plaintext
    tlsProvider: str = "OpenSSL"
    tlsClientAuthentication: bool = False    # present tlsCertificatePath + tlsKeyStore to bookies
    tlsKeyStoreType: str = "PEM"
    tlsKeyStore: str = ""                    # PEM private key
    tlsKeyStorePasswordPath: str = ""        # file with the key's password, if it is encrypted
    tlsCertificatePath: str = ""             # PEM certificate chain
    tlsTrustStoreType: str = "PEM"
    tlsTrustStore: str = ""                  # PEM CA certificate(s) that signed the bookies' certificates
    zkEnableSecurity: bool = False           # znodes this client creates get ACLs (needs digest credentials)
    zkDigestUser: str = ""                   # ZooKeeper digest auth user ...
    zkDigestPasswordPath: str = ""           # ... and the file holding its password
    addTraceSampleEvery: int = 16            # stamp the stages of 1 add in this many per ledger (0: none;
                                             # client.add_trace) ...
    slowAddThresholdMs: float = 50.0         # ... a traced add this slow enters the slow-add log ...
    slowAddLogSize: int = 256                # ... which keeps this many, the newest (BookKeeper.slow_adds())
    gcFreezeOnStart: bool = True             # the first client of a process gc.freeze()s the heap (see
                                             # client.bookkeeper: full collections stall every add)

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None = None) -> ClientConfig:
        if not options:
            return cls()
        fields = {f.name: f for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, raw in options.items():
            if key not in fields:
                raise InvalidOptionError(f"unknown client setting {key!r}; known: {', '.join(sorted(fields))}")
            kwargs[key] = _convert(key, type(fields[key].default), raw)
        return cls(**kwargs)

    @classmethod
    def from_environment(cls, options: Mapping[str, Any] | None = None) -> ClientConfig:
        """The settings of the file named by BKLEDGER_CLIENT_CONF (if set), overridden by `options`."""
        path = os.environ.get(CLIENT_CONF_ENV, "").strip()
        base = read_properties(Path(path), CLIENT_CONF_ENV) if path else {}
        return cls.from_options({**base, **(options or {})})

    def security_options(self) -> dict[str, str]:
        """The security settings that differ from the defaults, as strings (to hand to another client)."""
        out: dict[str, str] = {}
        for key in SECURITY_KEYS:
            value = getattr(self, key)
            if value != getattr(ClientConfig, key):
                out[key] = str(value).lower() if isinstance(value, bool) else str(value)
        return out


CLIENT_CONF_ENV = "BKLEDGER_CLIENT_CONF"
SECURITY_KEYS = (
    "tlsProviderFactoryClass", "tlsProvider", "tlsClientAuthentication", "tlsKeyStoreType", "tlsKeyStore",
    "tlsKeyStorePasswordPath", "tlsCertificatePath", "tlsTrustStoreType", "tlsTrustStore",
    "zkEnableSecurity", "zkDigestUser", "zkDigestPasswordPath",
)


_TRUE_WORDS = ("true", "yes", "on", "1")        # what BookKeeper's configuration library accepts, and 1/0
_FALSE_WORDS = ("false", "no", "off", "0")


def _convert(key: str, kind: type, raw: Any) -> Any:
    if kind is bool and isinstance(raw, str):
        word = raw.strip().lower()
        if word not in _TRUE_WORDS + _FALSE_WORDS:
            raise InvalidOptionError(f"client setting {key} must be a bool (true or false), got {raw!r}")
        return word in _TRUE_WORDS
    try:
        return kind(raw)
    except (TypeError, ValueError):
        raise InvalidOptionError(f"client setting {key} must be a {kind.__name__}, got {raw!r}") from None


def read_properties(path: Path, what: str = "client configuration") -> dict[str, str]:
    """key=value lines of a Java-properties file (# and ! comments); InvalidOptionError if unreadable."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise InvalidOptionError(f"{what}: cannot read {path} ({exc.strerror})") from None
    values: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise InvalidOptionError(f"{what} {path} line {number}: expected key=value, got {line!r}")
        values[key.strip()] = value.strip()
    return values
