"""Byte-range packing's old home: it lives in `client.log.core.gather` now (the record envelope's codec,
which the client uses too, packs with it). This name stays the same module."""

from __future__ import annotations

import sys

from bkledger.client.log.core import gather as _gather
from bkledger.client.log.core.gather import *  # noqa: F403 - the names mypy sees here

sys.modules[__name__] = _gather
