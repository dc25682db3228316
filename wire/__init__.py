"""What the bookie and the client both speak, owned by neither: the wire and the entry format.

    wire.codec         protobuf's wire format by hand for the messages that carry megabytes of entries
    wire.range_batch   a ReadRangeBatch parsed by hand from the received bytes
    wire.entry         the header every packaged entry starts with
    wire.gather        cutting chosen entries out of back-to-back entries (striped bulks, read residues)
    wire.native        the batched C module (`_native.c`), where it was built
    wire.heap          glibc's malloc thresholds for processes that move large buffers
    wire.process_metrics  prometheus_client's process, platform and GC collectors, for both's metrics

It imports nothing of bkledger but `bkledger.proto` (tests/unit/test_layers.py holds it to that).
"""
