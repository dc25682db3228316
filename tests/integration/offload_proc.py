"""An offloader process that kills itself (SIGKILL) right after one step of an offload run, for the crash
matrix of tests/integration/test_log_offload_crash.py:

    python -m tests.integration.offload_proc URI LOG STORE MAX_FILE_BYTES STEP

STEP: `parquet` (after the first Parquet file is written), `delta` (after the Delta commit), `cas` (after
the CAS that points the log at the files). The kill is a real kill -9 of this process: no cleanup runs.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from bkledger.client import BookKeeper
from bkledger.client.log import offload, offload_store


def killed_after(call: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(call)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        call(*args, **kwargs)
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    return wrapper


def main() -> None:
    uri, name, store, max_file_bytes, step = sys.argv[1:6]
    if step == "parquet":
        offload_store.write_file = killed_after(offload_store.write_file)
    elif step == "delta":
        offload_store.commit = killed_after(offload_store.commit)
    elif step == "cas":
        offload.commit_changes = killed_after(offload.commit_changes)
    else:
        raise SystemExit(f"unknown step {step!r}")
    with BookKeeper(uri) as bk:
        bk.offload_log(name, store, max_file_bytes=int(max_file_bytes))
    raise SystemExit("the offload finished without reaching the step")


if __name__ == "__main__":
    main()
