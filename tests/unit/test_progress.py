"""bookie.progress: the three output modes, and Ctrl-C turned into a stop request (then an interrupt)."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import select
import signal
import struct
import termios

import pytest

from bkledger.bookie.progress import Progress, choose_mode, human_bytes, stop_on_interrupt


def run(progress: Progress) -> None:
    with progress:
        progress.begin(4, 4_000_000)
        for _ in range(4):
            progress.note("a fragment copied")
            progress.advance(items=1, nbytes=1_000_000)


def test_lines_mode_prints_totals_steps_and_an_end_line():
    out = io.StringIO()
    run(Progress("recover", stream=out, interval=0))
    lines = out.getvalue().splitlines()
    assert lines[0] == "recover: 4 ledgers, ~4.0 MB"
    assert lines[1].startswith("recover: 1/4 ledgers, 1.0 MB of ~4.0 MB, ") and "/s" in lines[1]
    assert "left" in lines[1]
    assert lines[-1].startswith("recover: 4/4 ledgers, 4.0 MB of ~4.0 MB") and "(done after" in lines[-1]
    assert not any("fragment" in line for line in lines)


def test_lines_mode_is_periodic():
    out = io.StringIO()
    run(Progress("recover", stream=out, interval=3600))
    assert len(out.getvalue().splitlines()) == 2          # the totals and the end, nothing in between


def test_json_mode_prints_nothing():
    out = io.StringIO()
    progress = Progress("recover", stream=out, json_output=True)
    assert progress.mode == "off"
    run(progress)
    assert out.getvalue() == ""


def read_all(fd: int) -> str:
    chunks = []
    while select.select([fd], [], [], 0.2)[0]:
        chunks.append(os.read(fd, 65536))
    return b"".join(chunks).decode(errors="replace")


def on_pty(columns: int) -> tuple[str, str]:
    """The mode chosen for, and what a run shows on, a pty `columns` wide (0: a pty nobody sized)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    try:
        with os.fdopen(slave, "w", closefd=False) as stream:
            mode = choose_mode(False, stream)
            run(Progress("recover", stream=stream, interval=0))
        return mode, read_all(master)
    finally:
        os.close(master)
        os.close(slave)


def test_bar_on_a_terminal():
    mode, shown = on_pty(120)
    assert mode == "bar"
    assert "\r" in shown and "recover" in shown
    assert "4/4 ledgers" in shown and "4.00M" in shown and "B/s" in shown


def test_terminal_with_no_size_gets_plain_lines():
    """A terminal that reports no size (0 columns: a pty nobody sized, as under some job runners) gets the
    plain progress lines, not a bar that may vanish: every step is there, one line each."""
    mode, shown = on_pty(0)
    assert mode == "lines"
    lines = shown.replace("\r\n", "\n").splitlines()
    assert lines[0] == "recover: 4 ledgers, ~4.0 MB"
    assert [line.split(",")[0] for line in lines[1:5]] == [f"recover: {n}/4 ledgers" for n in range(1, 5)]
    assert "(done after" in lines[-1] and "\r" not in shown.replace("\r\n", "")


def test_byte_estimate_exceeded_grows_the_bar_total():
    out = io.StringIO()
    progress = Progress("recover", stream=out, mode="bar")
    progress.begin(1, 10)
    progress.advance(items=1, nbytes=25)
    assert progress._bar is not None and progress._bar.total == 25
    progress.close()


def test_first_ctrl_c_asks_to_stop_second_interrupts():
    out = io.StringIO()
    progress = Progress("recover", stream=out, interval=3600)
    before = signal.getsignal(signal.SIGINT)
    with stop_on_interrupt(progress):
        os.kill(os.getpid(), signal.SIGINT)
        assert progress.stop_asked
        assert progress.stop_requested()
        assert "Ctrl-C: stopping after the step in hand" in out.getvalue()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before


def test_human_bytes():
    assert human_bytes(999) == "999 B"
    assert human_bytes(1500) == "1.5 KB"
    assert human_bytes(2_500_000_000) == "2.5 GB"
