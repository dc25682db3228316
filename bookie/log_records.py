"""Records as an operator sees them: the record envelope decoded for `bkledger log tail` and `shell
readledger`, and the console producer of `bkledger log append` (lines of stdin or files, one record each).

A ledger whose custom metadata names the record envelope (`bkledger.envelope`, what the Spark writer and
`log append` write) holds (key, timestamp[, headers], value) per entry (`client.log.core.envelope`); any
other ledger holds bare values. `log append` appends through `LogWriter.append_async(value, key=...,
timestamp=...)`, which envelopes. `shown()` turns one entry into the fields the CLI prints: key, timestamp,
headers and value decoded, or with `raw` the entry's bytes as stored. Bytes print as UTF-8 (undecodable bytes as
`\\xNN`) or hex; text output escapes control characters (`printable`), JSON output keeps them (JSON escapes).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import itertools
import json
import os
import sys
from collections.abc import Iterable, Iterator
from typing import IO, TYPE_CHECKING, Any

from bkledger.bookie.shell_io import printable
from bkledger.client.errors import BKError
from bkledger.client.log.records import NO_TIMESTAMP, Timestamp

if TYPE_CHECKING:
    from bkledger.client import BookKeeper
    from bkledger.client.log.core.meta import Position

MAX_IN_FLIGHT = 1000           # appends queued before the producer waits for the oldest one


class RecordError(Exception):
    """Input the console producer cannot turn into a record (a bad --timestamp); the message says why."""


def show_bytes(data: bytes | None, hex_out: bool) -> str | None:
    if data is None:
        return None
    return data.hex() if hex_out else data.decode("utf-8", "backslashreplace")


def iso_us(timestamp_us: int) -> str:
    """Microseconds since the epoch as ISO 8601 UTC (what `--timestamp` accepts back)."""
    moment = datetime.datetime.fromtimestamp(timestamp_us / 1e6, datetime.UTC)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def shown(payload: bytes, envelope: int, raw: bool = False, hex_out: bool = False) -> dict[str, Any]:
    """One entry's printable fields: key, timestamp_us, timestamp (ISO), value (or `error` when an entry of
    an enveloped ledger does not decode: its raw bytes are the value then)."""
    from bkledger.client.log.core import envelope as env

    out: dict[str, Any] = {"size": len(payload)}
    if raw or envelope == env.NONE:
        out["value"] = show_bytes(payload, hex_out)
        return out
    try:
        rec = env.decode_record(payload, envelope)
    except env.EnvelopeError as exc:
        out.update(value=show_bytes(payload, hex_out), error=str(exc))
        return out
    ts = rec.timestamp_us
    out.update(key=show_bytes(rec.key, hex_out), timestamp_us=ts, timestamp=None if ts is None else iso_us(ts),
               value=show_bytes(rec.value, hex_out))
    if rec.headers is not None:
        out["headers"] = [[k, show_bytes(v, hex_out)] for k, v in rec.headers]
    return out


def text_fields(fields: dict[str, Any], width: int = 0) -> list[str]:
    """The fields of `shown` as text columns: key=..., ts=..., the value (cut to `width`; 0: never)."""
    value = printable(fields["value"])
    if 0 < width < len(value):
        value = value[: max(width - 3, 0)] + "..."
    cols = []
    if fields.get("key") is not None:
        cols.append(f"key={printable(fields['key'])}")
    if fields.get("timestamp") is not None:
        cols.append(f"ts={fields['timestamp']}")
    if fields.get("headers"):
        cols.append("headers=" + printable(",".join(f"{k}={'' if v is None else v}" for k, v in fields["headers"])))
    if fields.get("error"):
        cols.append(f"(undecodable envelope: {fields['error']})")
    return [*cols, value]


class Envelopes:
    """The record envelope version of each (logical) ledger of a log, learnt from the log's metadata and,
    where it recorded none, from the ledger's custom metadata; cached."""

    def __init__(self, bk: BookKeeper, name: str) -> None:
        self._bk, self._name = bk, name
        self._known: dict[int, int] = {}

    def of(self, ledger_id: int) -> int:
        if ledger_id not in self._known:
            self._learn(ledger_id)
        return self._known.get(ledger_id, 0)

    def _learn(self, ledger_id: int) -> None:
        from bkledger.client.log.core import meta as lm

        meta = self._bk.log_metadata(self._name, from_ledger=ledger_id)
        for where in lm.logical_ledgers(meta):
            if where.ledger_id not in self._known:
                self._known[where.ledger_id] = (where.envelope if where.envelope is not None
                                                else ledger_envelope(self._bk, where.physical))
        if ledger_id not in self._known:                   # not listed (any more): ask the ledger itself
            self._known[ledger_id] = ledger_envelope(self._bk, ledger_id)


def ledger_envelope(bk: BookKeeper, ledger_id: int) -> int:
    """The envelope version a ledger's custom metadata names (0: none, or the ledger is gone)."""
    from bkledger.client.log.core import envelope as env

    try:
        return env.version_of(bk.ledger_metadata(ledger_id).custom_metadata)
    except env.EnvelopeVersionError as exc:
        return exc.version                  # `shown` says of each entry: upgrade bkledger
    except BKError:
        return env.NONE


# ---- tail -------------------------------------------------------------------------------------------
def tail(bk: BookKeeper, args: argparse.Namespace, start: Any) -> int:
    """Print the log's records from `start`: `POSITION<TAB>[key=K<TAB>][ts=T<TAB>]VALUE` lines, or one
    JSON object a line with --json; stops after --max records or --timeout idle seconds (never with --follow)."""
    envelopes = Envelopes(bk, args.name)
    with bk.open_log_reader(args.name, start, password=args.password.encode()) as reader:
        timeout = None if args.follow else args.timeout
        for rec in reader.read(max_records=args.max, timeout=timeout):
            version = 0 if args.raw else envelopes.of(rec.ledger_id)
            fields = shown(rec.payload, version, args.raw, args.hex)
            if args.json:
                line = json.dumps({"position": str(rec.position), "ledger_id": rec.ledger_id,
                                   "entry_id": rec.entry_id, **fields}, sort_keys=True)
            else:
                line = "\t".join([str(rec.position), *text_fields(fields)])
            print(line, flush=True)
    return 0


# ---- append (the console producer) ------------------------------------------------------------------
def parse_timestamp(text: str) -> int | None:
    """--timestamp: `none`, `now` (each record's append time), milliseconds since the epoch (Kafka's unit)
    or an ISO 8601 time (UTC unless it names a zone). Microseconds since the epoch, None for none; -1: now."""
    if text == "none":
        return None
    if text == "now":
        return -1
    if text.lstrip("-").isdigit():
        return int(text) * 1000
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise RecordError(f"--timestamp {text!r}: give now, none, milliseconds since the epoch or an ISO 8601 "
                          "time such as 2026-01-31T12:00:00Z") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    delta = moment - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def lines_of(files: Iterable[str], stdin: IO[bytes]) -> Iterator[bytes]:
    """The lines of the files (`-`: stdin; none: stdin) without their line ends, as read."""
    for path in list(files) or ["-"]:
        stream = stdin if path == "-" else open(path, "rb")     # noqa: SIM115 - closed below
        try:
            for line in stream:
                yield line.rstrip(b"\r\n") if line.endswith(b"\n") else line
        finally:
            if stream is not stdin:
                stream.close()


def record_of(line: bytes, args: argparse.Namespace) -> tuple[bytes | None, bytes]:
    """(key, value) of one input line: key from --key or (--key-separator) the line's head."""
    key = args.key.encode() if args.key is not None else None
    value = line
    if args.key_separator:
        head, sep, rest = line.partition(args.key_separator.encode())
        if sep:
            key, value = head, rest
    return key, value


def append_timestamp(timestamp: int | None) -> Timestamp | None:
    """`parse_timestamp`'s answer as LogWriter.append takes it (None: the writer's clock at the append)."""
    if timestamp is None:
        return NO_TIMESTAMP
    if timestamp == -1:
        return None
    return datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(microseconds=timestamp)


def append(bk: BookKeeper, args: argparse.Namespace) -> int:
    """Append each input line as one enveloped record through a log writer; a summary on stderr (stdout
    with --json). Refuses to fence a live writer of the log unless --fence-writer. If appending fails
    midway, stderr says how many records were acknowledged before the error."""
    from bkledger.client.log.core import envelope as env

    timestamp = append_timestamp(parse_timestamp(args.timestamp))
    _check_target(bk, args)
    acked = Acked()
    lines = lines_of(args.files, sys.stdin.buffer)
    head = next(lines, None)                 # no input: no writer, no empty ledger in the log
    if head is not None:
        try:
            with bk.open_log_writer(args.name, ensemble_size=args.ensemble, write_quorum=args.write_quorum,
                                    ack_quorum=args.ack_quorum, password=args.password.encode(),
                                    envelope=env.V1) as writer:
                for line in itertools.chain([head], lines):
                    key, value = record_of(line, args)
                    acked.pending.append(writer.append_async(value, key=key, timestamp=timestamp))
                    if len(acked.pending) >= MAX_IN_FLIGHT:
                        acked.settle()
                acked.settle()
        except BaseException:
            if acked.count:
                print(f"bkledger log append: {acked.count} records were acknowledged before the error "
                      f"({acked.first} .. {acked.last}); the rest were maybe not written", file=sys.stderr)
            raise
    result = {"log": args.name, "records": acked.count, "first": None if acked.first is None else str(acked.first),
              "last": None if acked.last is None else str(acked.last)}
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        span = f" ({acked.first} .. {acked.last})" if acked.first is not None else ""
        print(f"appended {acked.count} records to log {args.name}{span}", file=sys.stderr)
    return 0


def _check_target(bk: BookKeeper, args: argparse.Namespace) -> None:
    """The input files exist, the log exists (or --create), and no live writer would be fenced (or
    --fence-writer); RecordError saying what to do otherwise."""
    from bkledger.client.log.liveness import live_writer

    for path in args.files:
        if path != "-" and not os.path.isfile(path):
            raise RecordError(f"{path}: no such file")
    exists = args.name in bk.list_logs()
    if not exists and not args.create:
        raise RecordError(f"log {args.name!r} does not exist: create it (bkledger log create {args.name}) or "
                          "add --create")
    if exists and not args.fence_writer:
        holder = live_writer(bk, bk.log_metadata(args.name))
        if holder is not None:
            raise RecordError(f"log {args.name!r} has a live writer (ledger {holder['ledger_id']}, host "
                              f"{holder.get('host', '?')} pid {holder.get('pid', '?')}); appending would fence it "
                              "out: stop it, or add --fence-writer")


class Acked:
    """The appends queued and those acknowledged so far (count, first and last position)."""

    def __init__(self) -> None:
        self.pending: list[concurrent.futures.Future[Position]] = []
        self.count = 0
        self.first: Position | None = None
        self.last: Position | None = None

    def settle(self) -> None:
        """Wait for the queued appends, in order (each bounded by 60 s)."""
        for fut in self.pending:
            pos = fut.result(60)
            self.first = pos if self.first is None else self.first
            self.last = pos
            self.count += 1
        self.pending.clear()
