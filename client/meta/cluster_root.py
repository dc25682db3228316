"""Is there a bkledger cluster at the metadata service URI's root? The answer behind "0 writable bookies".

A cluster's root has the znode `{root}/available` from the first bookie's start on (BookKeeper's
`initNewCluster`; `MetadataStore.init_cluster`). No bookie registered AND no `available` znode means that
the URI points where no cluster ever lived, most often a mistyped root path: the error says so, and names
the roots of this ZooKeeper that do hold a cluster (a bounded look at the top levels), instead of the
"need 3 writable bookies but only 0 are available" that a cluster whose bookies are all down gets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bkledger.client.errors import NoClusterError
from bkledger.client.meta.errors import MetadataAccessDeniedError
from bkledger.client.meta.layout import AVAILABLE

if TYPE_CHECKING:
    from bkledger.client.meta.store import MetadataStore

MAX_LOOKED_AT = 50          # znodes looked at when searching for the roots that hold a cluster


def no_cluster_error(store: MetadataStore) -> NoClusterError | None:
    """NoClusterError if the store's root has no `available` znode (no cluster there), else None."""
    available = store.layout.available
    if store.exists(available):
        return None
    try:
        found = clusters_nearby(store)
    except MetadataAccessDeniedError:          # ACLs hide the other roots: say only what is known
        found = []
    where = f"; clusters found on this ZooKeeper: {', '.join(found)}" if found else ""
    hosts = store.uri.hosts
    return NoClusterError(f"no bkledger cluster at zk://{hosts}{store.uri.root} (nothing under {available}); "
                          f"check the root path of metadataServiceUri{where}")


def require_cluster(store: MetadataStore) -> None:
    """Raise `no_cluster_error(store)` if there is one."""
    error = no_cluster_error(store)
    if error is not None:
        raise error


def clusters_nearby(store: MetadataStore) -> list[str]:
    """Roots of this ZooKeeper that hold `available`: first the wrong root's siblings (a mistyped last
    component: `/app/ledgrs` for `/app/ledgers`), then the top level and one below. At most MAX_LOOKED_AT
    znodes are looked at, so a large ZooKeeper costs no more than a few round trips."""
    parent = store.uri.root.rsplit("/", 1)[0]
    queue: list[tuple[str, bool]] = [(f"{parent}/{name}", False) for name in _children(store, parent)]
    queue += [(f"/{name}", True) for name in store.children("/") if name != "zookeeper"]   # True: look below
    found: list[str] = []
    looked = 0
    while looked < min(len(queue), MAX_LOOKED_AT):      # the queue grows as the top level is looked below
        path, below = queue[looked]
        looked += 1
        children = _children(store, path)
        if AVAILABLE in children:
            found.append(path)
        elif below:
            queue += [(f"{path}/{child}", False) for child in children[:MAX_LOOKED_AT]]
    return list(dict.fromkeys(found))


def _children(store: MetadataStore, path: str) -> list[str]:
    return store.children(path) if path and store.exists(path) else []
