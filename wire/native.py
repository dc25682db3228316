"""The batched CRC32C of `_native.c`, where it was built: `NATIVE` is the module, or None.

`setup.py` builds it as an optional extension, so an install without a C compiler still works; then
packaging and verifying go one entry at a time through google-crc32c, with the same bytes and the same
answers (tests/unit/test_native_crc32c.py holds the two to each other).
"""

from __future__ import annotations

from types import ModuleType


def _load() -> ModuleType | None:
    try:
        from bkledger.wire import _native  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _native


NATIVE = _load()
