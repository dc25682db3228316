"""A local cluster on this machine: a real ZooKeeper and N real bookie processes on 127.0.0.1.

Used by `bkledger local up|down|status`, by `make demo` and by the integration-test fixtures. Beside
each bookie runs an autorecovery daemon (`bkledger autorecovery`, log `bookie-<i>/autorecovery.log`)
unless disabled. Each bookie also takes adds on an add port of its own (`addStreamPort`, bookie.add_port;
not in a secure cluster, whose bookies serve TLS only). With `secure`, bookies serve TLS with client
authentication and every znode gets ZooKeeper ACLs (material in `<dir>/secure/`, see
bookie.local.secure). The state (addresses, ports, pids of bookies and daemons, directories) lives in
`<dir>/cluster.json`, so another process can stop the cluster or find a bookie to kill, pause or restart.

`down` keeps the data and the state; `up` over the same directory restarts that cluster: ZooKeeper on
its port over its data, each bookie with its configuration, so with its port and id (a bookie's id is
address:port, and its cookies hold it). A kept port that another process holds now is refused before
anything starts, naming the port and the fix. `down(wipe=True)` (`local down --wipe`) deletes it all.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bkledger.bookie import config as bkconfig
from bkledger.bookie.local.secure import SecureMaterial
from bkledger.bookie.local.zookeeper import ZooKeeperServer, free_port, pid_alive, reserve_ports, stop_pid
from bkledger.client.config import CLIENT_CONF_ENV, ClientConfig
from bkledger.client.meta.store import MetadataStore
from bkledger.client.meta.zkauth import zk_auth

log = logging.getLogger("bkledger.local")

STATE_FILE = "cluster.json"
# a local cluster's bookies serve this host only: on loopback, which a bookie refuses unless allowed
LOOPBACK = {"listenAddress": "127.0.0.1", "allowLoopback": "true"}


class ClusterError(RuntimeError):
    """The local cluster could not be started, found or stopped; the message says why."""


@dataclasses.dataclass
class BookieProcess:
    index: int
    bookie_id: str
    port: int
    conf: str
    journal_dir: str
    ledger_dirs: list[str]
    log: str
    pid: int = 0
    autorecovery_pid: int = 0       # the autorecovery daemon beside the bookie (0: none)
    metrics_port: int = 0           # the bookie's prometheusStatsHttpPort (0: off)
    http_port: int = 0              # the bookie's admin HTTP port (0: off)
    autorecovery_metrics_port: int = 0   # the autorecovery daemon's prometheusStatsHttpPort (0: off)
    add_port: int = 0               # the bookie's addStreamPort (0: off, or one the system picks)

    @property
    def autorecovery_log(self) -> str:
        return str(Path(self.log).with_name("autorecovery.log"))

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def urls(self) -> dict[str, str]:
        """Where the bookie and its autorecovery daemon answer over HTTP (`local status`): Prometheus
        metrics, and the admin API's bookie info (`/api/v1` itself is no route: it answers 404)."""
        out = {}
        if self.metrics_port:
            out["metrics"] = f"http://127.0.0.1:{self.metrics_port}/metrics"
        if self.http_port:
            out["admin"] = f"http://127.0.0.1:{self.http_port}/api/v1/bookie/info"
        if self.autorecovery_metrics_port:
            out["autorecovery_metrics"] = f"http://127.0.0.1:{self.autorecovery_metrics_port}/metrics"
        return out


class LocalCluster:
    def __init__(self, base_dir: Path | str):
        self.base_dir = Path(base_dir).resolve()
        self.zk_port = 0
        self.zk_pid = 0
        self.metadata_service_uri = ""
        self.bookies: list[BookieProcess] = []
        self.autorecovery = True
        self.secure = False
        self.embedded_zookeeper = True     # ours to start and stop (else one given by port, e.g. tests')
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    # ---- security ---------------------------------------------------------------------------
    @property
    def client_options(self) -> dict[str, Any]:
        """What a client needs besides the URI: the TLS and ZooKeeper settings of a secure cluster."""
        return SecureMaterial(self.base_dir).client_options() if self.secure else {}

    def metadata_store(self) -> MetadataStore:
        """A metadata store session with the cluster's credentials (call start() or use `with`)."""
        return MetadataStore(self.metadata_service_uri, auth=zk_auth(ClientConfig.from_options(self.client_options)))

    # ---- state file -----------------------------------------------------------------------
    @property
    def state_path(self) -> Path:
        return self.base_dir / STATE_FILE

    def save(self) -> None:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.status(), indent=2))
        tmp.replace(self.state_path)

    @classmethod
    def load(cls, base_dir: Path | str) -> LocalCluster:
        cluster = cls(base_dir)
        if not cluster.state_path.exists():
            raise ClusterError(f"no local cluster in {cluster.base_dir} (start one with: bkledger local up)")
        state = json.loads(cluster.state_path.read_text())
        cluster.zk_port = state["zookeeper"]["port"]
        cluster.zk_pid = state["zookeeper"]["pid"]
        cluster.embedded_zookeeper = bool(state["zookeeper"].get("embedded", cluster.zk_pid))  # older state: no key
        cluster.metadata_service_uri = state["metadataServiceUri"]
        cluster.autorecovery = bool(state.get("autorecovery", False))
        cluster.secure = bool(state.get("secure", False))
        cluster.bookies = [
            BookieProcess(**{k: v for k, v in b.items() if k not in ("address", "alive", "autorecovery_alive", "urls")})
            for b in state["bookies"]
        ]
        return cluster

    @classmethod
    def load_running(cls, base_dir: Path | str) -> LocalCluster:
        """`load`, and ClusterError at once if the cluster is stopped (its own ZooKeeper is not running),
        rather than a client's wait for a ZooKeeper that is not there."""
        cluster = cls.load(base_dir)
        if cluster.embedded_zookeeper and not (cluster.zk_pid and pid_alive(cluster.zk_pid)):
            raise ClusterError(f"the local cluster in {cluster.base_dir} is stopped: start it with bkledger local "
                               f"up --dir {base_dir}")
        return cluster

    def status(self, health: bool = False) -> dict[str, Any]:
        """The cluster's state; with `health`, each live bookie's own account of itself too (its admin HTTP
        `/api/v1/bookie/state`: writable or read-only, checkpoint failures, the last checkpoint, thread failures)."""
        out = self._status()
        if health:
            for b in out["bookies"]:
                b["health"] = bookie_health(b["http_port"]) if b["alive"] and b["http_port"] else None
        return out

    def _status(self) -> dict[str, Any]:
        return {
            "dir": str(self.base_dir),
            "zookeeper": {"address": f"127.0.0.1:{self.zk_port}", "port": self.zk_port, "pid": self.zk_pid,
                          "alive": bool(self.zk_pid) and pid_alive(self.zk_pid), "embedded": self.embedded_zookeeper},
            "metadataServiceUri": self.metadata_service_uri,
            "autorecovery": self.autorecovery,
            **self._client_status(),
            "bookies": [
                {**dataclasses.asdict(b), "address": b.address, "alive": bool(b.pid) and pid_alive(b.pid),
                 "autorecovery_alive": bool(b.autorecovery_pid) and pid_alive(b.autorecovery_pid), "urls": b.urls}
                for b in self.bookies
            ],
        }

    def _client_status(self) -> dict[str, Any]:
        """How a client connects: `secure`, and for a secure cluster its client config file and settings."""
        if not self.secure:
            return {"secure": False}
        material = SecureMaterial(self.base_dir)
        return {"secure": True, "clientConf": str(material.client_conf),
                "env": {CLIENT_CONF_ENV: str(material.client_conf)}, "clientSettings": self.client_options}

    # ---- up -------------------------------------------------------------------------------
    def up(
        self,
        num_bookies: int | None = 3,
        conf_overrides: dict[str, str] | None = None,
        timeout: float = 60.0,
        zookeeper_port: int = 0,
        root: str = "/ledgers",
        scheme: str = "zk",
        autorecovery: bool | None = None,
        secure: bool = False,
    ) -> None:
        """Start ZooKeeper (or use the one on `zookeeper_port`, then it is not ours to stop) and bookies.

        Beside each bookie an autorecovery daemon (`bkledger autorecovery`) runs unless `autorecovery` is
        False (None: the `autoRecoveryDaemonEnabled` key, default true). Local clusters default to
        `lostBookieRecoveryDelay=2` s and a 10 s `openLedgerRereplicationGracePeriod` (settable).
        `secure`: TLS with client certificates and ZooKeeper ACLs (bookie.local.secure).
        Over a directory that holds a stopped cluster, that cluster is restarted (`restart`); then
        `zookeeper_port`, `root` and `scheme` are those kept, and `num_bookies` only adds bookies
        (None: 3 for a new cluster, the kept ones on a restart).
        """
        overrides = dict(conf_overrides or {})
        if autorecovery is None:
            autorecovery = overrides.get("autoRecoveryDaemonEnabled", "true").strip().lower() == "true"
        self.autorecovery = autorecovery
        kept = self._kept()
        self.base_dir.mkdir(parents=True, exist_ok=True)
        if kept is not None:
            self.restart(kept, num_bookies, overrides, timeout, secure)
            return
        if not secure and SecureMaterial(self.base_dir).exists:
            raise ClusterError(f"{self.base_dir} holds a cluster made with --secure (its znodes have ACLs): "
                               "start it with bkledger local up --secure, or use another --dir")
        num_bookies = 3 if num_bookies is None else num_bookies
        self.secure = secure
        zk_properties = SecureMaterial(self.base_dir).ensure().zookeeper_properties() if secure else {}
        self.embedded_zookeeper = not zookeeper_port
        if zookeeper_port:
            self.zk_port, self.zk_pid = zookeeper_port, 0
        else:
            zk = ZooKeeperServer(system_properties=zk_properties)
            zk.start(self.base_dir / "zookeeper", port=0)
            self.zk_port, self.zk_pid = zk.port, zk.pid
        self.metadata_service_uri = f"{scheme}://127.0.0.1:{self.zk_port}{root}"
        with self.metadata_store() as store:
            store.init_cluster()
        for _ in range(num_bookies):
            self.add_bookie(overrides)
        self.save()
        self.wait_registered(timeout)
        self.wait_autorecovery(timeout)     # each daemon started beside its bookie in add_bookie

    def _kept(self) -> LocalCluster | None:
        """The stopped cluster kept in this directory, if any; ClusterError if it is running."""
        if not self.state_path.exists():
            return None
        old = LocalCluster.load(self.base_dir)
        running = [pid for pid in (old.zk_pid, *(b.pid for b in old.bookies)) if pid and pid_alive(pid)]
        if running:
            raise ClusterError(f"a local cluster is already running in {self.base_dir} (bkledger local down)")
        return old

    def restart(self, kept: LocalCluster, num_bookies: int | None, overrides: dict[str, str], timeout: float,
                secure: bool) -> None:
        """Start the stopped cluster `kept` again: the same ZooKeeper port and data, each bookie with its
        configuration (port, id, directories; `overrides` applied on top), then `num_bookies` minus
        those as new bookies. A cluster made with `secure` restarts secure, with or without it. The
        autorecovery daemons start once every bookie is registered: an auditor started earlier would
        take the bookies not yet back for lost."""
        if secure and not kept.secure:
            raise ClusterError(f"{self.base_dir} holds a cluster made without --secure: start it without "
                               "--secure, or delete it (bkledger local down --wipe) and start a new one")
        self.zk_port, self.metadata_service_uri = kept.zk_port, kept.metadata_service_uri
        self.embedded_zookeeper, self.secure, self.bookies = kept.embedded_zookeeper, kept.secure, kept.bookies
        reserve_ports(self.zk_port, *(p for b in self.bookies for p in (b.port, b.metrics_port, b.http_port,
                                                                         b.autorecovery_metrics_port)))
        self._check_kept_ports()
        if self.embedded_zookeeper:
            zk_properties = SecureMaterial(self.base_dir).ensure().zookeeper_properties() if self.secure else {}
            zk = ZooKeeperServer(system_properties=zk_properties)
            zk.start(self.base_dir / "zookeeper", port=self.zk_port)
            self.zk_pid = zk.pid
        self.save()
        for proc in self.bookies:
            self._reconfigure(proc, overrides)
            self.start_bookie(proc.index)
        wanted = (len(self.bookies) or 3) if num_bookies is None else num_bookies
        if self.bookies and wanted != len(self.bookies):
            log.warning("%d bookies asked for, %d kept: %s", wanted, len(self.bookies),
                        "adding the others" if wanted > len(self.bookies) else
                        "starting them all (bkledger shell decommission ID moves a bookie's data off it)")
        while len(self.bookies) < wanted:
            self.add_bookie(overrides, autorecovery=False)
        self.save()
        self.wait_registered(timeout)
        if self.autorecovery:
            for proc in self.bookies:
                self.start_autorecovery(proc.index)
            self.wait_autorecovery(timeout)

    def _check_kept_ports(self) -> None:
        """Before anything starts: the ports that name the cluster (ZooKeeper's: its metadataServiceUri)
        and its bookies (a bookie's id) must be free; a taken metrics or admin port is moved."""
        fix = (f"free it (ss -ltnp 'sport = :{{port}}' shows which process holds it) and run bkledger local up "
               f"--dir {self.base_dir} again; or, to drop the data, bkledger local down --wipe --dir {self.base_dir}")
        if self.embedded_zookeeper and not bindable(self.zk_port):
            raise ClusterError(f"ZooKeeper's port {self.zk_port}, kept in {self.state_path} (the metadataServiceUri "
                               f"{self.metadata_service_uri} names it), is taken now: " + fix.format(port=self.zk_port))
        for proc in self.bookies:
            if not bindable(proc.port):
                raise ClusterError(f"bookie-{proc.index}'s port {proc.port}, kept in {self.state_path} (its id "
                                   f"{proc.bookie_id} is in its cookies), is taken now: " + fix.format(port=proc.port))
            for attr in ("metrics_port", "http_port", "autorecovery_metrics_port", "add_port"):
                port = getattr(proc, attr)
                if port and not bindable(port):
                    setattr(proc, attr, free_port())
                    log.warning("bookie-%d: its %s %d is taken now; using %d", proc.index, attr.replace("_", " "),
                                port, getattr(proc, attr))

    def _reconfigure(self, proc: BookieProcess, overrides: dict[str, str]) -> None:
        """Rewrite a kept bookie's configuration: what it had, its (possibly moved) operations ports,
        and `overrides` on top."""
        ports = {"prometheusStatsHttpPort": str(proc.metrics_port), "allowLoopback": "true"}  # confs before it
        if proc.http_port:
            ports["httpServerPort"] = str(proc.http_port)
        if proc.add_port:
            ports["addStreamPort"] = str(proc.add_port)
        try:
            config = bkconfig.load(Path(proc.conf)).with_overrides(**{**ports, **overrides})
        except bkconfig.ConfigError as exc:
            raise ClusterError(f"bookie-{proc.index}: {proc.conf}: {exc}") from None
        Path(proc.conf).write_text(bkconfig.render(config))
        proc.port, proc.bookie_id = config.bookiePort, config.bookie_id
        proc.metrics_port = config.prometheusStatsHttpPort
        proc.http_port = config.httpServerPort if config.httpServerEnabled else 0
        proc.add_port = max(config.addStreamPort, 0)

    def add_bookie(self, conf_overrides: dict[str, str], autorecovery: bool | None = None) -> BookieProcess:
        index = len(self.bookies)
        port = free_port()
        home = self.base_dir / f"bookie-{index}"
        journal, ledgers = home / "journal", home / "ledgers"
        values = {
            "metadataServiceUri": self.metadata_service_uri,
            "bookiePort": str(port),
            **LOOPBACK,
            "journalDirectories": str(journal),
            "ledgerDirectories": str(ledgers),
            "diskCheckInterval": "1000",
            "flushInterval": "5000",
            "lostBookieRecoveryDelay": "2",
            "openLedgerRereplicationGracePeriod": "10000",
            "rwRereplicateBackoffMs": "1000",
            **_operations_ports(conf_overrides),
            **({} if self.secure or "addStreamPort" in conf_overrides else {"addStreamPort": str(free_port())}),
            **(SecureMaterial(self.base_dir).bookie_options(index) if self.secure else {}),
            **conf_overrides,
        }
        try:
            config = bkconfig.from_mapping(values)
        except bkconfig.ConfigError as exc:
            raise ClusterError(f"bookie-{index}'s configuration: {exc}") from None
        home.mkdir(parents=True, exist_ok=True)
        conf_path = home / "bookie.conf"
        conf_path.write_text(bkconfig.render(config))
        proc = BookieProcess(index, config.bookie_id, port, str(conf_path), str(journal),
                             [str(d) for d in config.ledger_dirs], str(home / "bookie.log"),
                             metrics_port=config.prometheusStatsHttpPort,
                             http_port=config.httpServerPort if config.httpServerEnabled else 0,
                             add_port=max(config.addStreamPort, 0))
        self.bookies.append(proc)
        self.start_bookie(index)
        if self.autorecovery if autorecovery is None else autorecovery:
            self.start_autorecovery(index)
        return proc

    def start_autorecovery(self, index: int) -> BookieProcess:
        """Start the autorecovery daemon beside bookie `index` (auditor election + replication worker)."""
        proc = self.bookies[index]
        if proc.autorecovery_pid and pid_alive(proc.autorecovery_pid):
            raise ClusterError(f"autorecovery of {proc.bookie_id} is already running (pid {proc.autorecovery_pid})")
        # its own metrics port: the bookie's configuration file names the bookie's
        if proc.metrics_port and not proc.autorecovery_metrics_port:
            proc.autorecovery_metrics_port = free_port()
        extra = ["--set", f"prometheusStatsHttpPort={proc.autorecovery_metrics_port}"]
        proc.autorecovery_pid = self._spawn("autorecovery", proc.conf, proc.autorecovery_log, extra)
        self.save()
        return proc

    def wait_autorecovery(self, timeout: float = 60.0) -> None:
        """Until every autorecovery daemon this cluster runs with a metrics port answers a scrape (it opens
        the port once its auditor and worker threads run): `up` returns with the daemons started, not
        merely spawned, so a scrape or a status right after it finds them. The daemon's own answer counts,
        not a connection (another process may hold a free port for a moment) nor a log line (a log may
        roll by size). A daemon that exits meanwhile is a ClusterError."""
        deadline = time.monotonic() + timeout
        waiting = [b for b in self.bookies if b.autorecovery_pid and b.autorecovery_metrics_port]
        while waiting:
            dead = [b for b in waiting if not pid_alive(b.autorecovery_pid)]
            if dead:
                raise ClusterError(f"the autorecovery daemon of {dead[0].bookie_id} exited at start; see "
                                   f"{dead[0].autorecovery_log}:\n" + _tail(dead[0].autorecovery_log))
            waiting = [b for b in waiting if not serves_autorecovery_metrics(b.autorecovery_metrics_port)]
            if waiting and time.monotonic() > deadline:
                raise ClusterError(f"the autorecovery daemons of {[b.bookie_id for b in waiting]} did not serve "
                                   f"their metrics within {timeout:.0f}s")
            if waiting:
                time.sleep(0.05)

    def stop_autorecovery(self, index: int, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int | None:
        """Stop (SIGTERM) or kill (SIGKILL) the autorecovery daemon beside bookie `index`."""
        proc = self.bookies[index]
        if not proc.autorecovery_pid:
            return None
        code = _stop_process(proc.autorecovery_pid, sig, timeout, self._children.pop(proc.autorecovery_pid, None))
        proc.autorecovery_pid = 0
        self._save_quietly()
        return code

    def _save_quietly(self) -> None:
        """Record a stop; a full disk must not keep the other processes running (`down` goes on)."""
        try:
            self.save()
        except OSError as exc:
            log.warning("could not record the cluster state in %s: %s", self.state_path, exc)

    def _spawn(self, command: str, conf: str, log: str, extra: list[str] | None = None) -> int:
        """Run `bkledger <command> --conf <conf>` in its own session, output appended to `log`, which the
        process rolls by size once it has read its configuration (`--log-file`, bookie.log_files)."""
        with open(log, "ab") as logf:
            child = subprocess.Popen(
                [sys.executable, "-m", "bkledger.bookie.cli", command, "--conf", conf, "--log-file", log,
                 *(extra or [])],
                stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )
        self._children[child.pid] = child
        return child.pid

    def start_bookie(self, index: int) -> BookieProcess:
        proc = self.bookies[index]
        if proc.pid and pid_alive(proc.pid):
            raise ClusterError(f"bookie {proc.bookie_id} is already running (pid {proc.pid})")
        proc.pid = self._spawn("bookie", proc.conf, proc.log)
        self.save()
        return proc

    def wait_registered(self, timeout: float = 60.0, ids: list[str] | None = None) -> None:
        want = set(ids if ids is not None else [b.bookie_id for b in self.bookies])
        deadline = time.monotonic() + timeout
        with self.metadata_store() as store:
            while True:
                have = set(store.writable_bookies()) | set(store.readonly_bookies())
                serving = all(accepts(b.port) for b in self.bookies if b.bookie_id in want)
                if want <= have and serving:
                    return
                dead = [b for b in self.bookies if b.bookie_id in want and not pid_alive(b.pid)]
                if dead:
                    raise ClusterError(f"bookie {dead[0].bookie_id} exited at start; see {dead[0].log}:\n"
                                       + _tail(dead[0].log))
                if time.monotonic() > deadline:
                    raise ClusterError(f"bookies {sorted(want - have)} did not register within {timeout:.0f}s")
                time.sleep(0.05)

    # ---- faults and stop ------------------------------------------------------------------
    def signal_bookie(self, index: int, sig: int) -> None:
        proc = self.bookies[index]
        if proc.pid:
            os.kill(proc.pid, sig)

    def kill_bookie(self, index: int) -> None:
        """kill -9, and wait until the process is gone."""
        self.stop_bookie(index, sig=signal.SIGKILL)

    def stop_bookie(self, index: int, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int | None:
        proc = self.bookies[index]
        if not proc.pid:
            return None
        code = _stop_process(proc.pid, sig, timeout, self._children.pop(proc.pid, None))
        proc.pid = 0
        self._save_quietly()
        return code

    def _stop_all(self, pids: list[int]) -> None:
        """SIGTERM to each running process of `pids`, then wait for each (SIGKILL after 20 s)."""
        running = [pid for pid in pids if pid and pid_alive(pid)]
        for pid in running:
            _send(pid, signal.SIGTERM)
        for pid in running:
            _await_exit(pid, 20.0, self._children.pop(pid, None))

    def down(self, wipe: bool = False) -> None:
        """Stop every process of the cluster, also when the disk is full or one of them resists. The
        daemons, then the bookies, are sent SIGTERM all at once and then waited for: a bookie with
        clients' streams open waits out its gRPC grace (2 s), and one after the other that added up.
        The data and the state stay for the next `up`, unless `wipe` (then the directory is deleted)."""
        if not (self.bookies or self.zk_pid or self.zk_port):
            return      # nothing started or loaded (e.g. `up` refused): the state on disk is not ours
        self._stop_all([proc.autorecovery_pid for proc in self.bookies])
        for proc in self.bookies:
            proc.autorecovery_pid = 0
        self._stop_all([proc.pid for proc in self.bookies])
        for proc in self.bookies:
            proc.pid = 0
        self._save_quietly()
        if self.zk_pid:
            stop_pid(self.zk_pid)
            self.zk_pid = 0
            self._save_quietly()
        if wipe and self.state_path.exists():
            shutil.rmtree(self.base_dir)


def _stop_process(pid: int, sig: int, timeout: float, child: subprocess.Popen[bytes] | None) -> int | None:
    return _await_exit(pid, timeout, child) if _send(pid, sig) else None


def _send(pid: int, sig: int) -> bool:
    """SIGCONT (a paused process must be able to act on it), then `sig`; False if the process is gone."""
    try:
        os.kill(pid, signal.SIGCONT)
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def _await_exit(pid: int, timeout: float, child: subprocess.Popen[bytes] | None) -> int | None:
    """The exit code (None if not our child), after SIGKILL if it has not exited within `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child is not None:
            code = child.poll()
            if code is not None:
                return code
        elif not pid_alive(pid):
            return None
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    return child.wait(timeout=10) if child is not None else None


def _operations_ports(overrides: dict[str, str]) -> dict[str, str]:
    """A free port for each bookie's metrics and admin HTTP, unless the overrides choose them (0: off)."""
    out = {}
    if "prometheusStatsHttpPort" not in overrides:
        out["prometheusStatsHttpPort"] = str(free_port())
    if "httpServerEnabled" not in overrides and "httpServerPort" not in overrides:
        out.update(httpServerEnabled="true", httpServerPort=str(free_port()))
    return out


def bindable(port: int) -> bool:
    """Whether a server could listen on 127.0.0.1:port now."""
    try:
        socket.create_server(("127.0.0.1", port)).close()
        return True
    except OSError:
        return False


def bookie_health(http_port: int, timeout: float = 2.0) -> dict[str, Any] | None:
    """A bookie's `/api/v1/bookie/state` answer, or None if it does not answer within `timeout`."""
    got = _get(http_port, "/api/v1/bookie/state", timeout)
    if got is None or got[0] != 200:
        return None
    try:
        return json.loads(got[1])
    except ValueError:
        return None


def serves_autorecovery_metrics(port: int, timeout: float = 2.0) -> bool:
    """Whether an autorecovery daemon's metrics answer on 127.0.0.1:port."""
    got = _get(port, "/metrics", timeout)
    return got is not None and got[0] == 200 and b"autorecovery_ENABLED" in got[1]


def _get(port: int, path: str, timeout: float) -> tuple[int, bytes] | None:
    """(status, body) of a GET of 127.0.0.1:port`path`, or None if nothing answers within `timeout`."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def accepts(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:port (the bookie listens only once ready)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _tail(path: str, lines: int = 20) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
