"""Bookie configuration: BookKeeper's bk_server.conf key names, read from a Java-properties file.

The file is parsed as Java's `Properties.load` does (javaproperties: continuations, escapes, `:`
separators, `!` comments). BookKeeper's own names are mapped or ignored (bookie.config_keys); an
unknown key is warned about with a "did you mean" and ignored, as BookKeeper ignores it, unless
`strictConfig=true` makes it a `ConfigError`. A bad value is always a `ConfigError` naming the key.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import javaproperties

from bkledger.bookie import config_keys

log = logging.getLogger("bkledger.config")


class ConfigError(ValueError):
    """A configuration key is unknown or its value is invalid."""


MAX_PORT_LIMIT = 1_000_000   # most connections or calls a port's limit may name (gRPC takes C ints, and
                             # aborts the process at 2^31 - 1 connections)


@dataclasses.dataclass(frozen=True)
class BookieConfig:
    metadataServiceUri: str = "zk://127.0.0.1:2181/ledgers"
    bookiePort: int = 3181
    addStreamPort: int = -1                # adds over plain TCP (bookie.add_port): -1 off, 0 a free port, else this
    addStreamPortMaxConnections: int = 1024   # bkledger's own: more are refused (at most a quarter of the
                                           # open-file limit)
    bookiePortMaxConnections: int = 1024   # bkledger's own: gRPC closes more at once (at most a quarter of the
                                           # open-file limit)
    bookiePortMaxConcurrentCalls: int = 10000   # bkledger's own: calls open at once on bookiePort (streams,
                                           # long polls, reads); one more gets RESOURCE_EXHAUSTED
    listenAddress: str = "0.0.0.0"         # where the servers bind (default: all interfaces, as BookKeeper)
    advertisedAddress: str = ""            # host part of the bookie id; default: listenAddress, or when that
    #   is 0.0.0.0 this host's address (bookie.core.bookie_address; resolved when the bookie starts)
    listeningInterface: str = ""           # a network interface (eth0): listen on, and advertise, its address
    useHostNameAsBookieID: bool = False    # advertise this host's canonical name instead of its address
    allowLoopback: bool = False            # allow a loopback id / listenAddress (only this host reaches it)
    bookieId: str = ""                     # explicit bookie id; default: advertisedAddress:bookiePort
    journalDirectories: tuple[str, ...] = ("/tmp/bk-txn",)
    ledgerDirectories: tuple[str, ...] = ("/tmp/bk-data",)
    journalSyncData: bool = True
    journalPageCacheFlushIntervalMSec: int = 1000   # ms: fdatasync data acked unsynced (journalSyncData=false)
    journalDirectIO: bool = True           # write journal files with O_DIRECT where the file system allows it
    journalMaxGroupWaitMSec: float = 2.0
    journalBufferedWritesThreshold: int = 512 * 1024
    journalFlushWhenQueueEmpty: bool = True
    journalMaxSizeMB: int = 2048
    journalMaxBackups: int = 5
    flushInterval: int = 60000             # ms between checkpoints (storage flush + lastMark)
    logSizeLimit: int = 1 << 30            # entry log roll size
    entryLogDirectIO: bool = True          # write entry logs with O_DIRECT in whole blocks where allowed
    pageSize: int = 8192                   # bytes per ledger index page (341 entry slots of 24 bytes)
    pageLimit: int = 1024                  # index pages held in memory; more are read from the index files
    nettyMaxFrameSizeBytes: int = 5 * 1024 * 1024   # largest entry (larger: EBADREQ); gRPC messages are capped at
                                           # 1.5 times this (at least 6 MiB) + 64 KiB (bookie.core.request_checks)
    maxReadBatchBytes: int = 4 * 1024 * 1024   # bkledger's own: most bytes of one range-read batch, whatever a
                                           # client asks (ReadRange/ReadRanges max_batch_bytes is clamped to it)
    entryIdWindow: int = 1 << 30           # an add more ids than this past the ledger's last entry/LAC: EBADREQ
    #   (no writer has 2^30 entries in flight: 32 GiB of headers alone; a bulk add's entries share one LAC)
    checkpointFailuresBeforeReadOnly: int = 3   # consecutive failed checkpoints that turn the bookie read-only
    diskUsageThreshold: float = 0.95
    diskUsageLwmThreshold: float = 0.90
    diskCheckInterval: int = 10000         # ms
    readOnlyModeEnabled: bool = True
    forceReadOnlyBookie: bool = False
    zkTimeout: int = 10000                 # ms, ZooKeeper session timeout
    gcWaitTime: int = 1000                 # ms between garbage-collection rounds (<= 0: no GC thread)
    verifyMetadataOnGc: bool = True        # re-read a ledger's metadata right before deleting it locally
    gcOverreplicatedLedgerWaitTime: int = 86400000   # ms between checks for ledgers moved off this bookie
    minorCompactionThreshold: float = 0.2  # compact entry logs whose live-byte ratio is below this ...
    minorCompactionInterval: int = 3600    # ... every this many seconds (<= 0: off)
    majorCompactionThreshold: float = 0.8
    majorCompactionInterval: int = 86400   # s (<= 0: off)
    autoRecoveryDaemonEnabled: bool = True  # `bkledger local up` starts an autorecovery daemon per bookie
    lostBookieRecoveryDelay: int = 0       # s the auditor waits before marking a lost bookie's ledgers
    openLedgerRereplicationGracePeriod: int = 30000  # ms before an open ledger's last fragment is fenced
    auditorPeriodicCheckInterval: int = 604800       # s between full scans of metadata for lost bookies
    rereplicationEntryBatchSize: int = 10  # entries per re-replication batch (range read and add)
    rwRereplicateBackoffMs: int = 5000     # a worker retries a ledger it could not finish after this
    longPollMaxTimeoutMs: int = 10000
    # operations (bookie.metrics, bookie.http_admin); both servers bind listenAddress
    prometheusStatsHttpPort: int = 0       # serve Prometheus metrics at /metrics on this port (0: off)
    httpServerEnabled: bool = False        # the admin HTTP API (/heartbeat, /metrics, /api/v1/...)
    httpServerPort: int = 8080
    httpServerAdminToken: str = ""         # bearer token for state-changing endpoints ("": they are refused)
    httpServerSocketTimeoutMs: int = 10000  # bkledger's own: an HTTP connection idle this long is closed
    httpServerMaxConnections: int = 64     # bkledger's own: more open HTTP connections are answered 503 and closed
    # where adds spend their time (bookie.add_trace): stage histograms and the slow-add log
    addTraceSampleEvery: int = 1           # bkledger's own: stamp 1 add batch in this many (0: none)
    slowAddThresholdMs: float = 50.0       # bkledger's own: a traced batch this slow enters the slow-add log ...
    slowAddLogSize: int = 256              # ... which keeps this many, the newest (/api/v1/bookie/slow_adds)
    # log files (`--log-file FILE`, bookie.log_files): rolled by size, at most logFileMaxBackups kept
    logFileMaxSize: str = "100MB"          # roll at this size (B, KB, MB or GB, as log4j2's size trigger)
    logFileMaxBackups: int = 10            # rolled files kept (FILE.1 newest .. FILE.N), the oldest deleted
    # per-log figures exported by the elected auditor (bookie.log_metrics)
    logMetricsInterval: int = 60           # s between reads of the logs' records in ZooKeeper (0: off)
    logMetricsMaxLogs: int = 1000          # logs exported at most (by name); the rest are counted only
    # ---- security (README "Security"): TLS (bookie.tls; also the autorecovery daemon's client keys) ...
    tlsProviderFactoryClass: str = ""      # org.apache.bookkeeper.tls.TLSContextFactory: serve TLS
    tlsProvider: str = "OpenSSL"
    tlsClientAuthentication: bool = False  # accept only clients with a certificate tlsTrustStore signed
    tlsKeyStoreType: str = "PEM"
    tlsKeyStore: str = ""                  # PEM private key
    tlsKeyStorePasswordPath: str = ""
    tlsCertificatePath: str = ""           # PEM certificate chain; its subjectAltNames must name the bookie's address
    tlsTrustStoreType: str = "PEM"
    tlsTrustStore: str = ""                # PEM CA(s): client certificates (server) and bookies (as a client)
    tlsCertFilesRefreshDurationSeconds: int = 0   # > 0: reload changed certificate files, checked this often
    # ... and ZooKeeper (client.meta.zkauth)
    zkEnableSecurity: bool = False         # znodes the bookie creates get ACLs (cookies, registrations)
    zkDigestUser: str = ""
    zkDigestPasswordPath: str = ""
    strictConfig: bool = False             # refuse unknown keys (default: warn and ignore them, as BookKeeper)

    @property
    def bookie_id(self) -> str:
        if self.bookieId:
            return self.bookieId
        return f"{self.advertisedAddress or self.listenAddress}:{self.bookiePort}"

    @property
    def journal_dir(self) -> Path:
        return Path(self.journalDirectories[0])

    @property
    def ledger_dirs(self) -> list[Path]:
        return [Path(d) for d in self.ledgerDirectories]

    def with_overrides(self, **overrides: Any) -> BookieConfig:
        return from_mapping({**to_mapping(self), **{k: str(v) for k, v in overrides.items()}})


_FIELDS = {f.name: f for f in dataclasses.fields(BookieConfig)}


def _text(key: str, raw: object) -> str:
    """A value as the text a .conf file would hold: a Python caller's True, 3 or 0.5 is taken as
    "true", "3" or "0.5"; anything else but text is refused."""
    if isinstance(raw, str):
        return raw
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, (int, float)):
        return str(raw)
    raise ConfigError(f"bad value {raw!r} for {key}: expected text, a number or a boolean, "
                      f"got {type(raw).__name__}")


def _convert(key: str, raw: str) -> Any:
    default = _FIELDS[key].default
    raw = raw.strip()
    try:
        if isinstance(default, bool):
            if raw.lower() not in ("true", "false"):
                raise ValueError("expected true or false")
            return raw.lower() == "true"
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
        if isinstance(default, tuple):
            parts = tuple(p.strip() for p in raw.split(",") if p.strip())
            if not parts:
                raise ValueError("expected a comma-separated list of directories")
            return parts
        return raw
    except ValueError as exc:
        raise ConfigError(f"bad value {raw!r} for {key}: {exc}") from None


def from_mapping(values: Mapping[str, object]) -> BookieConfig:
    """A validated configuration from key -> text (a number or a boolean is taken as its text, as
    LocalCluster callers write them); BookKeeper's names mapped, unknown keys warned about."""
    for key in values:
        if not isinstance(key, str):
            raise ConfigError(f"bad configuration key {key!r}: expected text, got {type(key).__name__}")
    keys = config_keys.translate({key: _text(key, raw) for key, raw in values.items()}, _FIELDS)
    strict = "strictConfig" in keys.values and _convert("strictConfig", keys.values["strictConfig"])
    if keys.unknown and strict:
        raise ConfigError(f"unknown configuration keys (strictConfig=true): {keys.unknown_text()}")
    for key, near in keys.unknown.items():
        hint = f" (did you mean {near!r}?)" if near else ""
        log.warning("unknown configuration key %r ignored%s; strictConfig=true refuses unknown keys", key, hint)
    for what in keys.mapped:
        log.info("BookKeeper configuration key mapped: %s", what)
    for key in keys.ignored:
        log.info("BookKeeper configuration key %s has no meaning for a bkledger bookie: ignored", key)
    kwargs: dict[str, Any] = {key: _convert(key, raw) for key, raw in keys.values.items()}
    config = BookieConfig(**kwargs)
    validate(config)
    return config


def to_mapping(config: BookieConfig) -> dict[str, str]:
    out: dict[str, str] = {}
    for name in _FIELDS:
        value = getattr(config, name)
        if isinstance(value, bool):
            out[name] = "true" if value else "false"
        elif isinstance(value, tuple):
            out[name] = ",".join(value)
        else:
            out[name] = str(value)
    return out


def validate(config: BookieConfig) -> None:
    if not 0 < config.bookiePort < 65536:
        raise ConfigError(f"bookiePort must be 1..65535, got {config.bookiePort}")
    if not 0 < config.diskUsageThreshold <= 1:
        raise ConfigError("diskUsageThreshold must be in (0, 1]")
    if config.diskUsageLwmThreshold > config.diskUsageThreshold:
        raise ConfigError("diskUsageLwmThreshold must not exceed diskUsageThreshold")
    if config.nettyMaxFrameSizeBytes < 1024:
        raise ConfigError("nettyMaxFrameSizeBytes must be at least 1024")
    if not 0 <= config.minorCompactionThreshold <= config.majorCompactionThreshold <= 1:
        raise ConfigError("need 0 <= minorCompactionThreshold <= majorCompactionThreshold <= 1")
    if config.lostBookieRecoveryDelay < 0 or config.openLedgerRereplicationGracePeriod < 0:
        raise ConfigError("lostBookieRecoveryDelay and openLedgerRereplicationGracePeriod must be >= 0")
    if config.pageSize < 24 or config.pageLimit < 1:
        raise ConfigError("pageSize must be at least 24 (one index slot) and pageLimit at least 1")
    if config.entryIdWindow < 1 or config.checkpointFailuresBeforeReadOnly < 1:
        raise ConfigError("entryIdWindow and checkpointFailuresBeforeReadOnly must be at least 1")
    if config.rereplicationEntryBatchSize < 1:
        raise ConfigError("rereplicationEntryBatchSize must be at least 1")
    if config.maxReadBatchBytes < 1024:
        raise ConfigError("maxReadBatchBytes must be at least 1024")
    _validate_add_port(config)
    _validate_http(config)
    _validate_operations(config)
    if len(config.journalDirectories) != 1:
        raise ConfigError("exactly one journal directory is supported (journalDirectories)")


def _validate_add_port(config: BookieConfig) -> None:
    if not -1 <= config.addStreamPort < 65536:
        raise ConfigError(f"addStreamPort must be -1 (off), 0 (a free port) or 1..65535, got {config.addStreamPort}")
    if config.addStreamPort >= 0 and config.tlsProviderFactoryClass:
        raise ConfigError("addStreamPort carries adds in plaintext and this bookie serves TLS "
                          f"(tlsProviderFactoryClass={config.tlsProviderFactoryClass}): set addStreamPort=-1; "
                          "clients then add over bookiePort, with TLS")


def _validate_http(config: BookieConfig) -> None:
    ports = {"bookiePort": config.bookiePort}
    if config.addStreamPort > 0:
        ports["addStreamPort"] = config.addStreamPort
    if config.prometheusStatsHttpPort:
        ports["prometheusStatsHttpPort"] = config.prometheusStatsHttpPort
    if config.httpServerEnabled:
        ports["httpServerPort"] = config.httpServerPort
    for key, port in ports.items():
        if not 0 < port < 65536:
            raise ConfigError(f"{key} must be 1..65535, got {port}")
    if len(set(ports.values())) < len(ports):
        raise ConfigError(f"{', '.join(ports)} must be different ports, got {ports}")
    if config.httpServerSocketTimeoutMs < 1 or config.httpServerMaxConnections < 1:
        raise ConfigError("httpServerSocketTimeoutMs and httpServerMaxConnections must be at least 1")
    for key in ("addStreamPortMaxConnections", "bookiePortMaxConnections", "bookiePortMaxConcurrentCalls"):
        if not 1 <= getattr(config, key) <= MAX_PORT_LIMIT:   # gRPC aborts the process on a limit of 2^31 - 1
            raise ConfigError(f"{key} must be 1..{MAX_PORT_LIMIT}, got {getattr(config, key)}")


SIZE_UNITS = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}


def size_bytes(text: str) -> int:
    """'100MB' -> bytes (units B, KB, MB, GB, powers of 1024, as log4j2's; a bare number is bytes)."""
    raw = text.strip().upper().replace(" ", "")
    unit = next((u for u in ("KB", "MB", "GB", "B") if raw.endswith(u)), "")
    number = raw[: len(raw) - len(unit)]
    try:
        value = float(number) * SIZE_UNITS[unit or "B"]
    except ValueError:
        raise ConfigError(f"bad size {text!r}: expected a number and a unit (B, KB, MB, GB), e.g. 100MB") from None
    return int(value)


def _validate_operations(config: BookieConfig) -> None:
    if size_bytes(config.logFileMaxSize) < 1024:
        raise ConfigError(f"logFileMaxSize must be at least 1KB, got {config.logFileMaxSize!r}")
    if config.logFileMaxBackups < 1:
        raise ConfigError("logFileMaxBackups must be at least 1 (the file is rolled into FILE.1)")
    if config.logMetricsInterval < 0 or config.logMetricsMaxLogs < 0:
        raise ConfigError("logMetricsInterval and logMetricsMaxLogs must be >= 0")


def parse_properties(text: str) -> dict[str, str]:
    """key -> value as Java's Properties.load reads them (a repeated key: the last one wins)."""
    try:
        return dict(javaproperties.loads(text))
    except ValueError as exc:       # javaproperties.InvalidUEscapeError: a bad \\uXXXX escape
        raise ConfigError(f"not a Java properties file: {exc}") from None


def load(path: Path, **overrides: Any) -> BookieConfig:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read configuration file {path}: {exc.strerror}") from None
    values = parse_properties(text)
    values.update({k: str(v) for k, v in overrides.items()})
    return from_mapping(values)


def render(config: BookieConfig) -> str:
    return "".join(f"{k}={v}\n" for k, v in to_mapping(config).items())
