"""What a process loads as it starts: a bookie or autorecovery daemon does not load the whole client (half a
CPU-second at each start, and the suite starts hundreds), and `bkledger.client`'s names still all resolve."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import bkledger.client

LOADED = "import json, sys; {setup}; print(json.dumps([m for m in sys.modules if m.startswith('bkledger.client.')]))"


def _loaded_after(setup: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", LOADED.format(setup=setup)], capture_output=True, text=True,
                          timeout=60, check=True)
    return set(json.loads(done.stdout))


@pytest.mark.parametrize("command", ["bookie", "autorecovery"])
def test_a_daemon_parser_and_the_bookie_service_load_no_client_handle(command: str) -> None:
    loaded = _loaded_after(f"from bkledger.bookie.cli import build_parser; build_parser({command!r})"
                           "; import bkledger.bookie.service")
    assert "bkledger.client.meta.store" in loaded                  # what a bookie does use: its metadata
    assert not loaded & {"bkledger.client.bookkeeper", "bkledger.client.ledger_handle", "bkledger.client.writer",
                         "bkledger.client.log.writer"}, sorted(loaded)


def test_the_whole_parser_still_has_every_command() -> None:
    from bkledger.bookie.cli import COMMANDS, build_parser

    choices = next(a for a in build_parser()._actions if a.dest == "command").choices
    assert choices is not None and list(choices) == list(COMMANDS)


def test_every_public_client_name_resolves_and_unknown_ones_fail() -> None:
    for name in bkledger.client.__all__:
        assert getattr(bkledger.client, name) is not None, name
    assert set(bkledger.client.__all__) <= set(dir(bkledger.client))
    with pytest.raises(AttributeError, match="no_such_name"):
        bkledger.client.no_such_name  # noqa: B018
