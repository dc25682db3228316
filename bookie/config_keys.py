"""BookKeeper's own configuration keys on a bkledger bookie, and keys nobody knows.

Owns the translation of a configuration's keys before they are converted (bookie.config): BookKeeper's
names that mean the same as ours are mapped (`zkServers` + `zkLedgersRootPath` to `metadataServiceUri`
as BookKeeper's AbstractConfiguration builds it, `journalDirectory` to `journalDirectories`,
`verifyMetadataOnGC`); BookKeeper's keys that have no meaning here (`ledgerStorageClass`, thread pools,
RocksDB, Netty, ...) are accepted and listed as ignored; any other key is unknown, with a "did you mean"
from difflib. The caller warns about unknown keys and ignores them, as BookKeeper does, or refuses them
with `strictConfig=true`. Pure: no I/O, no logging.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Collection, Mapping

# BookKeeper (conf/bk_server.conf, ServerConfiguration, AbstractConfiguration) keys with no meaning here.
BOOKKEEPER_IGNORED_KEYS = frozenset({
    "allocatorExitOnOutOfMemory", "allocatorLeakDetectionPolicy", "allocatorOutOfMemoryPolicy",
    "allocatorPoolingConcurrency", "allocatorPoolingPolicy", "allowEphemeralPorts",
    "allowMultipleDirsUnderSameDiskPartition", "allowShadedLedgerManagerFactoryClass", "allowStorageExpansion",
    "auditorAcquireConcurrentOpenLedgerOperationsTimeOutMSec", "auditorLedgerVerificationPercentage",
    "auditorMaxNumberOfConcurrentOpenLedgerOperations", "auditorPeriodicBookieCheckInterval",
    "auditorReplicasCheckInterval", "authorizedRoles", "bookieAddressResolverEnabled",
    "bookieAuthProviderFactoryClass", "bookieDeathWatchInterval", "byteBufAllocatorSizeInitial",
    "byteBufAllocatorSizeMax", "byteBufAllocatorSizeMin", "closeChannelOnResponseTimeout",
    "codahaleStatsCSVEndpoint", "codahaleStatsGraphiteEndpoint", "codahaleStatsJmxEndpoint",
    "codahaleStatsOutputFrequencySeconds", "codahaleStatsPrefix", "codahaleStatsSlf4jEndpoint",
    "compactionMaxOutstandingRequests", "compactionRate", "compactionRateByBytes", "compactionRateByEntries",
    "dataIntegrityChecking", "dataIntegrityStampMissingCookies",
    "dbStorage_directIOEntryLoggerMaxFdCacheTimeSeconds", "dbStorage_directIOEntryLoggerReadBufferSizeMB",
    "dbStorage_directIOEntryLoggerTotalReadBufferSizeMB", "dbStorage_directIOEntryLoggerTotalWriteBufferSizeMB",
    "dbStorage_readAheadCacheBatchBytesSize", "dbStorage_readAheadCacheBatchSize",
    "dbStorage_readAheadCacheMaxSizeMb", "dbStorage_rocksDB_blockCacheSize", "dbStorage_rocksDB_blockSize",
    "dbStorage_rocksDB_bloomFilterBitsPerKey", "dbStorage_rocksDB_checksum_type",
    "dbStorage_rocksDB_format_version", "dbStorage_rocksDB_logPath", "dbStorage_rocksDB_maxSizeInLevel1MB",
    "dbStorage_rocksDB_numFilesInLevel0", "dbStorage_rocksDB_numLevels", "dbStorage_rocksDB_sstSizeInMB",
    "dbStorage_rocksDB_writeBufferSizeMB", "dbStorage_writeCacheMaxSizeMb", "defaultRocksdbConf",
    "desiredNumZonesPerWriteQuorum", "digestType", "disableServerSocketBind", "diskUsageWarnThreshold",
    "dlog.bkcAckQuorumSize", "dlog.bkcEnsembleSize", "dlog.bkcWriteQuorumSize", "enableBusyWait",
    "enableDigestTypeAutodetection", "enableHealthCheck", "enableLocalTransport", "enableStatistics",
    "enableTaskExecutionStats", "enforceMinNumFaultDomainsForWrite", "enforceMinNumRacksPerWriteQuorum",
    "enforceStrictZoneawarePlacement", "ensemblePlacementPolicy", "entryFormatterClass",
    "entryLocationCompactionInterval", "entryLocationRocksdbConf", "entryLogFilePreallocationEnabled",
    "entryLogPerLedgerCounterLimitsMultFactor", "entryLogPerLedgerEnabled", "entrylogMapAccessExpiryTimeInSeconds",
    "exposeDefaultJVMMetrics", "extraServerComponents", "fileInfoCacheInitialCapacity",
    "fileInfoFormatVersionToWrite", "fileInfoMaxIdleTime", "flushEntrylogBytes", "forceAllowCompaction",
    "gcEntryLogMetadataCacheEnabled", "gcEntryLogMetadataCachePath", "gcMetadataOpRateLimit",
    "gcOverreplicatedLedgerMaxConcurrentRequests", "httpServerClass", "httpServerHost",
    "httpServerKeyStorePassword", "httpServerKeyStorePath", "httpServerTlsEnable", "httpServerTrustStorePassword",
    "httpServerTrustStorePath", "ignoreExtraServerComponentsStartupFailures", "ignoreLocalNodeInPlacementPolicy",
    "inFlightReadEntryNumInLedgerChecker", "indexDirectories", "isForceGCAllowWhenNoSpace", "isThrottleByBytes",
    "journalAdaptiveGroupWrites", "journalAlignmentSize", "journalBufferedEntriesThreshold",
    "journalChannelProvider", "journalFormatVersionToWrite", "journalMaxMemorySizeMb", "journalPreAllocSizeMB",
    "journalQueueSize", "journalRemoveFromPageCache", "journalReuseFiles", "journalWriteBufferSizeKB",
    "journalWriteData", "ledgerIdFormatterClass", "ledgerManagerFactoryClass",
    "ledgerManagerFactoryDisableClassCheck", "ledgerManagerType", "ledgerMetadataRocksdbConf",
    "ledgerMetadataVersion", "ledgerStorageClass", "limitStatsLogging",
    "localConsistencyCheckOnStartup", "localScrubInterval", "localScrubRateLimit",
    "lockReleaseOfFailedLedgerGracePeriod", "majorCompactionMaxTimeMillis", "maxAddsInProgressLimit",
    "maxBatchReadSize", "maxPendingAddRequestsPerThread", "maxPendingReadRequestsPerThread",
    "maxReadsInProgressLimit", "maximumNumberOfActiveEntryLogs", "metastoreImplClass", "metastoreMaxEntriesPerScan",
    "minNumRacksPerWriteQuorum", "minNumZonesPerWriteQuorum", "minUsableSizeForEntryLogCreation",
    "minUsableSizeForHighPriorityWrites", "minUsableSizeForIndexFileCreation", "minorCompactionMaxTimeMillis",
    "networkTopologyScriptFileName", "networkTopologyScriptNumberArgs", "numAddWorkerThreads",
    "numHighPriorityWorkerThreads", "numJournalCallbackThreads", "numLongPollWorkerThreads",
    "numOfMemtableFlushThreads", "numReadWorkerThreads", "openFileLimit",
    "org.apache.bookkeeper.conf.readsystemproperties", "passwd", "permittedStartupUsers",
    "persistBookieStatusEnabled", "preserveMdcForTaskExecution", "prometheusStatsHttpAddress",
    "prometheusStatsLatencyRolloverSeconds", "readBufferSizeBytes", "readOnlyModeOnAnyDiskFullEnabled",
    "readWorkerThreadsThrottlingEnabled", "registrationManagerClass", "reorderReadSequenceEnabled",
    "replicationRateByBytes", "reppDnsResolverClass", "requestTimerNumTicks", "requestTimerTickDurationMs",
    "sanityCheckMetricsEnabled", "serverNumAcceptorThreads", "serverNumIOThreads", "serverSockKeepalive",
    "serverTcpKeepCnt", "serverTcpKeepIdle", "serverTcpKeepIntvl", "serverTcpLinger", "serverTcpNoDelay",
    "serverWriteBufferHighWaterMark", "serverWriteBufferLowWaterMark", "shadedLedgerManagerFactoryClassPrefix",
    "skipListArenaChunkSize", "skipListArenaMaxAllocSize", "skipListSizeLimit", "skipReplayJournalInvalidRecord",
    "sortedLedgerStorageEnabled", "statsProviderClass", "stickyReadSEnabled",
    "storage.cluster.controller.schedule.interval.ms", "storage.range.store.dirs", "storage.serve.readonly.tables",
    "storageserver.grpc.port", "storeSystemTimeAsLedgerCreationTime",
    "storeSystemTimeAsLedgerUnderreplicatedMarkTime", "tlsEnabledCipherSuites", "tlsEnabledProtocols",
    "tlsTrustStorePasswordPath", "useShortHostName", "useTargetEntryLogSizeForGc",
    "useTransactionalCompaction", "waitTimeoutOnResponseBackpressureMs", "writeBufferSizeBytes",
    "zkReplicationTaskRateLimit", "zkRequestRateLimit", "zkRetryBackoffMaxMs", "zkRetryBackoffMaxRetries",
    "zkRetryBackoffStartMs",
})

# BookKeeper's name -> ours, where they mean the same (ours wins when both are set, as in BookKeeper).
RENAMED_KEYS = {"journalDirectory": "journalDirectories", "verifyMetadataOnGC": "verifyMetadataOnGc"}
# read to build metadataServiceUri when it is not set
ZK_KEYS = ("zkServers", "zkLedgersRootPath", "ledgerManagerFactoryClass")
DEFAULT_LEDGERS_ROOT = "/ledgers"
# BookKeeper's ledger manager factories (by class name) -> the layout part of a metadata service URI
_LAYOUTS = {"HierarchicalLedgerManagerFactory": "hierarchical", "LongHierarchicalLedgerManagerFactory":
            "longhierarchical", "FlatLedgerManagerFactory": "flat", "LegacyHierarchicalLedgerManagerFactory":
            "legacyhierarchical"}


@dataclasses.dataclass
class Translated:
    """The values under our names, and what was set aside: each with the reason or a suggestion."""

    values: dict[str, str]
    mapped: list[str] = dataclasses.field(default_factory=list)       # "journalDirectory -> journalDirectories"
    ignored: list[str] = dataclasses.field(default_factory=list)      # BookKeeper keys with no meaning here
    unknown: dict[str, str | None] = dataclasses.field(default_factory=dict)   # key -> a close known key

    def unknown_text(self) -> str:
        return "; ".join(f"{key!r}" + (f" (did you mean {near!r}?)" if near else "")
                         for key, near in self.unknown.items())


def translate(values: Mapping[str, str], fields: Collection[str]) -> Translated:
    """Sort `values` into our keys (`fields`), BookKeeper's mapped and ignored keys, and unknown keys."""
    out = Translated({k: v for k, v in values.items() if k in fields})
    for key, value in values.items():
        if key in fields:
            continue
        if key in RENAMED_KEYS:
            ours = RENAMED_KEYS[key]
            if ours in values:
                out.ignored.append(f"{key} ({ours} is set and wins)")
            else:
                out.values[ours] = value
                out.mapped.append(f"{key} -> {ours}")
        elif key in ZK_KEYS:
            continue
        elif key in BOOKKEEPER_IGNORED_KEYS:
            out.ignored.append(key)
        else:
            out.unknown[key] = suggest(key, fields)
    _metadata_uri(values, fields, out)
    return out


def _metadata_uri(values: Mapping[str, str], fields: Collection[str], out: Translated) -> None:
    """BookKeeper's fallback: "zk+" + layout + "://" + zkServers (',' -> ';') + zkLedgersRootPath."""
    given = [k for k in ZK_KEYS if k in values and k not in fields]
    if not given:
        return
    servers = values.get("zkServers", "").strip()
    if "metadataServiceUri" in values or not servers:
        why = "metadataServiceUri is set and wins" if servers else "no zkServers"
        out.ignored.extend(f"{k} ({why})" for k in given)
        return
    root = values.get("zkLedgersRootPath", "").strip() or DEFAULT_LEDGERS_ROOT
    layout = layout_of(values.get("ledgerManagerFactoryClass", ""))
    hosts = ";".join(h.strip() for h in servers.split(",") if h.strip())
    out.values["metadataServiceUri"] = f"zk+{layout}://{hosts}{root}"
    out.mapped.append(f"{' + '.join(given)} -> metadataServiceUri={out.values['metadataServiceUri']}")


def layout_of(factory_class: str) -> str:
    """The layout of a ledger manager factory class name; "null" (not set) when none or unknown."""
    return _LAYOUTS.get(factory_class.strip().rsplit(".", 1)[-1], "null")


def known_keys(fields: Collection[str]) -> set[str]:
    """Every key a configuration may hold without a warning: ours and BookKeeper's."""
    return {*fields, *RENAMED_KEYS, *ZK_KEYS, *BOOKKEEPER_IGNORED_KEYS}


def suggest(key: str, fields: Collection[str]) -> str | None:
    """The closest known key to a misspelt one (ours first), or None."""
    for pool in (fields, known_keys(fields)):
        near = difflib.get_close_matches(key, list(pool), n=1, cutoff=0.75)
        if near:
            return near[0]
    lowered = {k.lower(): k for k in known_keys(fields)}
    return lowered.get(key.lower())
