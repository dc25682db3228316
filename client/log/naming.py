"""Whether a log name may be used to create a log: `client.log.core.names` plus one look at ZooKeeper.

A new log's name has at most 249 characters; a log whose longer name was stored before that rule keeps
working, so a name refused only for its length is accepted when its log exists.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bkledger.client.errors import InvalidLogNameError
from bkledger.client.log.core.names import check_log_name
from bkledger.client.log.store import log_path

if TYPE_CHECKING:
    from bkledger.client.log.facade import BookKeeperFacade as BookKeeper


def creatable_log_name(bk: BookKeeper, name: str) -> str:
    """`name` if a log of that name may be created (`check_log_name`), or already exists; else
    InvalidLogNameError."""
    try:
        return check_log_name(name)
    except InvalidLogNameError as exc:
        if exc.reason != "length":
            raise
        check_log_name(name, new=False)
        if bk.store.exists(log_path(bk.store, name)):
            return name
        raise
