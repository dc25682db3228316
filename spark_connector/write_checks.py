"""What a Spark append checks against the cluster while it is planned, and the sizing errors in Spark's words.

`check_write_plan` runs on the driver with the planning client (`batch_writer.plan_writer`): the log name
may be created (`client.log.logs.creatable_log_name`: 249 characters for a new log), a cluster lives at
the URI (`client.meta.cluster_root`) and it has at least ensembleSize writable bookies. Each failure is
a BkLedgerOptionError naming the Spark option to change, before any task runs. `in_spark_terms` turns
a client error met later by a task (a bookie stopped meanwhile) into the same words: the client's
parameter names (`ensemble_size`, ...) become the options' (`ensembleSize`, ...).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from bkledger.client.connector import creatable_log_name, no_cluster_error
from bkledger.client.errors import BKError, InvalidLogNameError, InvalidQuorumError, NoClusterError
from bkledger.spark_connector.options import BkLedgerOptionError, WriteOptions

if TYPE_CHECKING:
    from bkledger.client import BookKeeper

SPARK_NAMES = {"ensemble_size": "ensembleSize", "write_quorum": "writeQuorum", "ack_quorum": "ackQuorum"}
_NAMES = re.compile("|".join(SPARK_NAMES))


def check_write_plan(bk: BookKeeper, opts: WriteOptions) -> None:
    """BkLedgerOptionError unless the append can run on this cluster as asked (see the module doc)."""
    if opts.source.log is not None:
        try:
            creatable_log_name(bk, opts.source.log)
        except InvalidLogNameError as exc:
            raise BkLedgerOptionError("log", str(exc)) from None
    writable = bk.store.writable_bookies()
    if not writable:
        missing = no_cluster_error(bk.store)
        if missing is not None:
            raise BkLedgerOptionError("metadataServiceUri", str(missing)) from None
    if len(writable) < opts.ensemble_size:
        raise BkLedgerOptionError(
            "ensembleSize", f"{opts.ensemble_size} is more than the {len(writable)} writable bookies of the "
            f"cluster ({', '.join(writable) or 'none'}): lower ensembleSize (with writeQuorum <= ensembleSize "
            "and ackQuorum <= writeQuorum) or start more bookies")


def in_spark_terms(exc: BKError) -> BKError:
    """A client sizing error (NotEnoughBookiesError, InvalidQuorumError) with the Spark options' names;
    other errors as they are."""
    if isinstance(exc, NoClusterError):
        return BkLedgerOptionError("metadataServiceUri", str(exc))
    if not isinstance(exc, InvalidQuorumError) and "ensemble_size" not in str(exc):
        return exc
    text = _NAMES.sub(lambda m: SPARK_NAMES[m.group(0)], str(exc))
    return BkLedgerOptionError("ensembleSize", text)
