"""The pure parts of `bkledger log` (issue 45 item 4): escaping for tables and lines, --timestamp, sizes
and durations, and an entry shown with and without the record envelope."""

from __future__ import annotations

import pytest

from bkledger.bookie import log_cli
from bkledger.bookie.log_records import RecordError, parse_timestamp, shown, text_fields
from bkledger.bookie.shell import printable, table
from bkledger.spark_connector import envelope as env


def test_tables_escape_control_characters():
    """A payload with a newline, a tab, an ANSI escape or a zero-width space stays one aligned cell."""
    out = table(("entry", "payload"), [(0, "a\nb\tc\x1b[2Jd\u200b"), (1, "plain")])
    lines = out.splitlines()
    assert len(lines) == 4 and "\x1b" not in out and "\u200b" not in out
    assert lines[2].endswith("a\\nb\\tc\\x1b[2Jd\\u200b")
    assert printable("caf\u00e9 \u65e5\u672c") == "caf\u00e9 \u65e5\u672c"     # printable text is kept


def test_timestamps():
    assert parse_timestamp("none") is None
    assert parse_timestamp("now") == -1
    assert parse_timestamp("1700000000000") == 1_700_000_000_000_000          # milliseconds, as Kafka
    assert parse_timestamp("2026-01-31T12:00:00Z") == parse_timestamp("2026-01-31T13:00:00+01:00")
    assert parse_timestamp("1970-01-01T00:00:01.5") == 1_500_000
    with pytest.raises(RecordError, match="ISO 8601"):
        parse_timestamp("yesterday")


def test_sizes_and_durations():
    assert log_cli._limit("7d", log_cli._SECONDS, "--max-age") == 7 * 86400
    assert log_cli._limit("90", log_cli._SECONDS, "--max-age") == 90
    assert log_cli._limit("512m", log_cli._SIZES, "--max-bytes") == 512 << 20
    assert log_cli._limit("1GB", log_cli._SIZES, "--max-bytes") == 1 << 30
    assert log_cli._limit("none", log_cli._SIZES, "--max-bytes") is None
    assert log_cli._limit(None, log_cli._SIZES, "--max-bytes") is False
    with pytest.raises(log_cli.UsageError, match="--max-bytes"):
        log_cli._limit("lots", log_cli._SIZES, "--max-bytes")


def test_shown_decodes_the_envelope_or_keeps_bare_values():
    payload = env.encode(b"k\x00", 1_000_000, b"v\nw")
    fields = shown(payload, env.V1)
    assert (fields["key"], fields["timestamp"], fields["value"]) == ("k\x00", "1970-01-01T00:00:01.000000Z", "v\nw")
    assert text_fields(fields) == ["key=k\\x00", "ts=1970-01-01T00:00:01.000000Z", "v\\nw"]
    assert shown(payload, env.NONE)["value"] == payload.decode("utf-8", "backslashreplace")
    assert shown(payload, env.V1, raw=True, hex_out=True)["value"] == payload.hex()
    broken = shown(b"short", env.V1)
    assert broken["value"] == "short" and "shorter than" in broken["error"]
