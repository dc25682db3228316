"""The bookie pins glibc's malloc thresholds unless the operator chose them (bookie.memory)."""

from __future__ import annotations

import pytest

from bkledger.bookie import memory


def test_pinned_unless_the_environment_chose(monkeypatch: pytest.MonkeyPatch) -> None:
    names = sorted(env for env, _ in memory.BOOKIE_THRESHOLDS.values())
    for name in names:
        monkeypatch.setenv(name, "131072")
    assert memory.pin_malloc_thresholds() == []
    monkeypatch.delenv("MALLOC_TOP_PAD_")
    assert memory.pin_malloc_thresholds() == ["MALLOC_TOP_PAD_"]
    for name in names:
        monkeypatch.delenv(name, raising=False)
    # glibc (the only libc this project runs on) accepts all three
    assert sorted(memory.pin_malloc_thresholds()) == names
