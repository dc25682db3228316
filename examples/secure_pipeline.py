"""The secure demo: a `local up --secure` cluster used by the client, the shell and a Spark job.

    python examples/secure_pipeline.py     # (make demo-secure) no arguments; well under a minute

1. Starts a local cluster with `secure=True` (what `bkledger local up --secure` does): a throwaway CA,
   bookie and client certificates and ZooKeeper credentials under `<dir>/secure/`; bookies serve TLS and
   accept only clients with a certificate the CA signed; every znode gets ZooKeeper ACLs; an autorecovery
   daemon runs beside each bookie with the bookie's certificate as its client certificate.
2. The shell (`bkledger shell simpletest` and `whoisauditor`) finds the settings through the cluster dir.
3. A Spark job appends to a log and reads it back, with the client settings passed as options.
4. What is refused: a plaintext client (BookieTlsError), a client without a certificate, and a ZooKeeper
   session without the credentials (MetadataAccessDeniedError).
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bkledger.bookie.local.cluster import LocalCluster
from bkledger.client import BookKeeper
from bkledger.client.config import ClientConfig
from bkledger.client.errors import BKError
from examples.pipeline import banner, make_session

LOG = "secure_orders"


def shell(cluster: LocalCluster, *verb: str) -> dict[str, Any]:
    """`bkledger shell VERB --dir <cluster dir> --json`: the shell takes the cluster's client settings."""
    done = subprocess.run([sys.executable, "-m", "bkledger.bookie.cli", "shell", *verb, "--dir", str(cluster.base_dir),
                           "--json"], capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"bkledger shell {' '.join(verb)} failed: {done.stderr.strip()}")
    return dict(json.loads(done.stdout))


def spark_round_trip(spark: Any, uri: str, options: dict[str, str], rows: int) -> int:
    df = spark.range(0, rows, numPartitions=2).selectExpr(
        "cast(concat('order-', id) as binary) as key", "cast(cast(id * 3 as string) as binary) as value")
    df.write.format("bkledger").option("metadataServiceUri", uri).option("log", LOG).options(**options) \
        .mode("append").save()
    back = spark.read.format("bkledger").option("metadataServiceUri", uri).option("log", LOG).options(**options)
    count = int(back.load().count())
    print(f"Spark appended {rows} rows to log {LOG!r} over TLS and read back {count}")
    return count


def refused(uri: str, what: str, options: dict[str, str]) -> str:
    """Try to write one entry with these settings; the error's type and message."""
    try:
        with BookKeeper(uri, config=ClientConfig.from_options({"addEntryTimeoutSec": 3.0, **options})) as bk:
            bk.create_ledger(3, 2, 2).add_entry(b"x", timeout=60)
    except BKError as exc:
        print(f"{what}: refused with {type(exc).__name__}: {exc}")
        return type(exc).__name__
    raise AssertionError(f"{what} was not refused")


def run(cluster: LocalCluster, spark: Any, rows: int) -> dict[str, Any]:
    uri, options = cluster.metadata_service_uri, cluster.client_options
    banner("1. client settings of the secure cluster (bkledger local status --json)")
    print(json.dumps(cluster.status()["clientSettings"], indent=2))

    banner("2. the shell over TLS (settings from the cluster dir)")
    test = shell(cluster, "simpletest", "-n", "100")
    print(f"simpletest: wrote and read back {test['read']} entries on {', '.join(test['ensemble'])}: "
          f"{'OK' if test['ok'] else 'FAILED'}")
    auditor = shell(cluster, "whoisauditor")["auditor"]
    print(f"auditor (autorecovery over TLS): {auditor}")

    banner("3. a Spark job over TLS, settings as options")
    count = spark_round_trip(spark, uri, options, rows)

    banner("4. what is refused")
    zk_only = {k: v for k, v in options.items() if k.startswith("zk")}
    plaintext = refused(uri, "plaintext client", zk_only)
    no_cert = refused(uri, "client without a certificate", {**options, "tlsClientAuthentication": "false"})
    no_zk = refused(uri, "ZooKeeper session without credentials",
                    {k: v for k, v in options.items() if not k.startswith("zk")})
    return {"simpletest_ok": bool(test["ok"]), "auditor": auditor, "rows": count,
            "refusals": [plaintext, no_cert, no_zk]}


def main(rows: int = 5_000, spark: Any = None) -> dict[str, Any]:
    """Run the secure demo; with `spark` given (tests) that session is used and left running."""
    logging.basicConfig(level=logging.CRITICAL)
    started = time.monotonic()
    own_session = spark is None
    with tempfile.TemporaryDirectory(prefix="bkledger-secure-demo-") as tmp:
        cluster = LocalCluster(Path(tmp) / "cluster")
        try:
            banner("0. bkledger local up --secure: ZooKeeper with ACLs + 3 TLS bookies + autorecovery")
            cluster.up(3, secure=True)
            print(f"metadataServiceUri = {cluster.metadata_service_uri}")
            print(f"certificates and credentials in {cluster.base_dir / 'secure'}")
            if spark is None:
                spark = make_session("bkledger-secure-demo")
            result = run(cluster, spark, rows)
        finally:
            if own_session and spark is not None:
                spark.stop()
            cluster.down()
            print("cluster stopped", flush=True)
    banner(f"done in {time.monotonic() - started:.1f} s")
    return result


if __name__ == "__main__":
    main()
