"""The entry format's header: what starts every packaged entry, on the wire and on the bookie's disk."""

from __future__ import annotations

import struct

HEADER = struct.Struct(">qqqq")          # ledgerId | entryId | lastAddConfirmed | length
HEADER_SIZE = HEADER.size                # 32 bytes, BookKeeper's METADATA_LENGTH; the digest and payload follow
