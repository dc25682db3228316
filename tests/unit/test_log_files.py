"""Rotated log files (bookie.log_files) and their keys: logFileMaxSize, logFileMaxBackups (issue 45 item 5)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bkledger.bookie import config as bkconfig
from bkledger.bookie.config import ConfigError, size_bytes

CHILD = """
import logging, os, sys
from bkledger.bookie.log_files import use_log_file
use_log_file(sys.argv[1], 2048, 3)
log = logging.getLogger("child")
logging.getLogger().setLevel(logging.INFO)
for i in range(400):
    log.info("record %04d %s", i, "x" * 40)
    if i % 50 == 0:
        os.write(2, b"stray stderr %d\\n" % i)      # as a C library or a dying thread writes
        print("stray stdout", i, flush=True)
"""


def test_sizes_parse_as_log4j2_writes_them() -> None:
    assert size_bytes("100MB") == 100 << 20
    assert size_bytes("1 GB") == 1 << 30
    assert size_bytes("64kb") == 64 << 10
    assert size_bytes("4096") == 4096
    with pytest.raises(ConfigError, match="bad size"):
        size_bytes("lots")


def test_bad_log_file_keys_are_refused() -> None:
    assert bkconfig.from_mapping({}).logFileMaxBackups == 10
    for bad in ({"logFileMaxSize": "12"}, {"logFileMaxSize": "big"}, {"logFileMaxBackups": "0"},
                {"logMetricsInterval": "-1"}):
        with pytest.raises(ConfigError):
            bkconfig.from_mapping(bad)


def test_the_file_rolls_keeps_max_backups_and_takes_stray_output(tmp_path: Path) -> None:
    log = tmp_path / "bookie.log"
    done = subprocess.run([sys.executable, "-c", CHILD, str(log)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and done.stderr == ""          # everything went to the file
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["bookie.log", "bookie.log.1", "bookie.log.2", "bookie.log.3"]
    for name in files:
        assert (tmp_path / name).stat().st_size < 2048 + 200
    text = "".join((tmp_path / n).read_text() for n in reversed(files[1:])) + log.read_text()
    assert "record 0399" in text and "stray stderr 350" in text and "stray stdout 350" in text
