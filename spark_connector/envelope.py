"""The record envelope's old home: the codec lives in `client.log.core.envelope` now (the client's LogWriter
envelopes records too, and the client imports nothing of the connector). This name stays the same module."""

from __future__ import annotations

import sys

from bkledger.client.log.core import envelope as _codec
from bkledger.client.log.core.envelope import *  # noqa: F403 - the names mypy sees here

sys.modules[__name__] = _codec
