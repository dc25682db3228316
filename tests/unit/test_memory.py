"""The bookie pins glibc's mmap threshold unless the operator chose one (bookie.memory)."""

from __future__ import annotations

import pytest

from bookie import memory


def test_pinned_unless_the_environment_chose(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    assert memory.pin_mmap_threshold() is False
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_")
    assert memory.pin_mmap_threshold() is True  # glibc (the only libc this project runs on) accepts it
