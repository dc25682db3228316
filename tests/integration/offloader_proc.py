"""An offloader process (one round of `bookie.offloader.Offloader`) that kills itself (SIGKILL) right after
one step, for tests/integration/test_log_offloader.py:

    python -m tests.integration.offloader_proc URI LOG STORE STEP

STEP: `delta` (after the offload run's Delta commit), `cas` (after the CAS that swapped the files in),
`delete` (after the first batch of bookie copies was deleted, before its `offloaded-<run>` znode is). The
kill is a real kill -9 of this process: no cleanup runs, its ZooKeeper session (and lock) lingers until it
expires (4 s).
"""

from __future__ import annotations

import sys

from bkledger.bookie.offloader import Offloader
from bkledger.client import BookKeeper
from bkledger.client.log import offload, offload_store
from tests.integration.offload_proc import killed_after


def main() -> None:
    uri, name, store, step = sys.argv[1:5]
    if step == "delta":
        offload_store.commit = killed_after(offload_store.commit)
    elif step == "cas":
        offload.commit_changes = killed_after(offload.commit_changes)
    elif step == "delete":
        BookKeeper.delete_ledgers = killed_after(BookKeeper.delete_ledgers)    # type: ignore[method-assign]
    else:
        raise SystemExit(f"unknown step {step!r}")
    with BookKeeper(uri, zkTimeout=4.0) as bk:        # its lock goes soon after the kill
        Offloader(bk, store_uri=store, names=[name]).run_once()
    raise SystemExit("the round finished without reaching the step")


if __name__ == "__main__":
    main()
