"""bkledger: a replicated, ledger-backed log store modelled on Apache BookKeeper, with a PySpark data source.

One import root for everything the distribution ships, so that nothing in a user's environment shadows
it or is shadowed by it (a job's own `client.py`, proto-plus's `proto`):

    bkledger.client            the client: ledgers, logs, the BookKeeper facade
    bkledger.bookie            the storage server, the `bkledger` command, the local cluster
    bkledger.spark_connector   the `bkledger` Spark data source
    bkledger.proto             the wire contract and its generated code

In a source checkout these are the repository's top-level folders (this folder links to them); an
installed wheel holds them under `bkledger/`.
"""

from __future__ import annotations

import os as _os
import sys as _sys
from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("bkledger")
except _metadata.PackageNotFoundError:  # a source checkout that was never installed
    __version__ = "0+unknown"

# Fork safety (bkledger.client.runtime): gRPC's fork handlers made the children of a process holding a
# client die with SIGSEGV (a SparkSession's JVM launch, a multiprocessing child). gRPC reads this setting
# once, when it is first imported; a value the user set is kept.
# Whether gRPC's fork handlers are off or the user chose the setting (client.runtime warns otherwise).
grpc_fork_setting_known = "grpc" not in _sys.modules or "GRPC_ENABLE_FORK_SUPPORT" in _os.environ
if "grpc" not in _sys.modules:
    _os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
