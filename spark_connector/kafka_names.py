"""Kafka's option names and what bkledger calls them (`KAFKA_NAMES`, `kafka_hint`), and the choices of a
read of logs that the Kafka-like options give (`LogChoice`, `TimeBound`): below both `options` and
`kafka_options`, which parses them."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping

# Kafka source/sink option -> (the bkledger option, or None if there is none; what to know)
KAFKA_NAMES: dict[str, tuple[str | None, str]] = {
    "subscribe": ("log", "a comma-separated list of logs"),
    "topic": ("log", "or a string column named log, as Kafka's topic column"),
    "assign": ("log", "a log has no partitions: name whole logs"),
    "subscribePattern": ("logPattern", "a Python regex matched against the whole log name"),
    "startingOffsets": ("startingPositions", 'JSON like {"orders": {"12": 0}}: ledger id -> entry id'),
    "endingOffsets": ("endingPositions", 'JSON like {"orders": {"14": -1}}'),
    "startingOffsetsByTimestamp": ("startingPositionsByTimestamp", 'one time per log: {"orders": 1700000000000}'),
    "endingOffsetsByTimestamp": ("endingPositionsByTimestamp", 'one time per log: {"orders": 1700000000000}'),
    "kafka.bootstrap.servers": ("metadataServiceUri", "the ZooKeeper of the cluster and its root, e.g. "
                                                      "zk://127.0.0.1:2181/ledgers"),
    "maxOffsetsPerTrigger": ("maxEntriesPerTrigger", "streaming reads; maxBytesPerTrigger bounds bytes"),
    "maxRecordsPerPartition": ("maxEntriesPerPartition", "batch reads; targetPartitionBytes bounds bytes"),
    "minOffsetsPerTrigger": (None, "a trigger reads what is there, up to maxEntriesPerTrigger"),
    "maxTriggerDelay": (None, "a trigger reads what is there, up to maxEntriesPerTrigger"),
    "groupIdPrefix": (None, "a reader needs no consumer group: Spark's checkpoint keeps the positions; option "
                            "cursor makes a query's progress visible outside Spark"),
    "kafka.group.id": (None, "a reader needs no consumer group: Spark's checkpoint keeps the positions; option "
                             "cursor makes a query's progress visible outside Spark"),
    "startingOffsetsByTimestampStrategy": (None, "a time before a log's first record starts at its first"),
    "kafkaConsumer.pollTimeoutMs": (None, "reads time out by the client setting readTimeout"),
    "fetchOffset.numRetries": (None, "reads retry other bookies of the ensemble by themselves"),
    "fetchOffset.retryIntervalMs": (None, "reads retry other bookies of the ensemble by themselves"),
}


def kafka_hint(key: str, known: Mapping[str, str]) -> str | None:
    """What to tell a user who gave Kafka's option `key` (lower-cased) to bkledger; None if it is not one.
    `known` maps the lower-cased names of the options this query takes to their spelling."""
    spelled = {name.lower(): name for name in KAFKA_NAMES}
    if key not in spelled:
        if key.startswith("kafka."):
            return ("kafka.* settings are Kafka client settings; bkledger's client settings (TLS, ZooKeeper "
                    "credentials) go by their BookKeeper names, e.g. tlsTrustStore, zkDigestUser")
        return None
    name = spelled[key]
    ours, note = KAFKA_NAMES[name]
    if ours is None:
        return f"{name} is a Kafka option with no bkledger equivalent ({note})"
    usable = "" if ours.lower() in known else " (not an option of this query)"
    return f"{name} is Kafka's name: use {ours}{usable}: {note}"


KAFKA_READ = ("logPattern", "startingTimestamp", "endingTimestamp", "startingPositionsByTimestamp",
              "endingPositionsByTimestamp", "minPartitions")


@dataclasses.dataclass(frozen=True)
class LogChoice:
    """The logs a read covers: the names of option `log`, or the logs whose whole name matches `pattern`."""

    names: tuple[str, ...] = ()
    pattern: str | None = None

    def resolve(self, existing: Iterable[str]) -> list[str]:
        """The logs to read now, sorted: the named ones (missing ones too: reading them fails), or those
        of `existing` that match the pattern."""
        if self.pattern is None:
            return sorted(self.names)
        regex = re.compile(self.pattern)
        return sorted(name for name in existing if regex.fullmatch(name))


@dataclasses.dataclass(frozen=True)
class TimeBound:
    """A time bound in ms since the epoch: one for every log (`everywhere`) or per log (`by_log`)."""

    everywhere: int | None = None
    by_log: Mapping[str, int] = dataclasses.field(default_factory=dict)

    def for_log(self, name: str) -> int | None:
        return self.everywhere if self.everywhere is not None else self.by_log.get(name)

    @property
    def given(self) -> bool:
        return self.everywhere is not None or bool(self.by_log)
