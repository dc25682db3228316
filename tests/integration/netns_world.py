"""A small network of network namespaces for fault tests: ZooKeeper, bookies and the client each
reachable only through their own address, as on separate machines.

Run inside `unshare -n -m --propagation private` (see tests/integration/netns.py): the process's own
namespace becomes the router ("hub") and holds ZooKeeper on 10.77.0.1; each bookie i runs in namespace
`b<i>` at 10.77.<i>.2 (all on port 3181, advertised by `advertisedAddress`), and the client in `cl` at
10.77.200.2. Every namespace reaches the others through the hub. Faults are rules: a blackhole rule in
the hub drops what one address sends to another (one way); two of them cut a pair both ways. Nothing
here touches the machine's own network: the namespaces, the tmpfs on /run and every process die with
the unshared process (and `stop` ends the processes first).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bkledger.bookie import config as bkconfig
from bkledger.bookie.local.zookeeper import ZooKeeperServer
from bkledger.client.meta.store import MetadataStore

ZK_ADDRESS = "10.77.0.1"
CLIENT_ADDRESS = "10.77.200.2"
BOOKIE_PORT = 3181
CLONE_NEWNET = 0x40000000


def sh(*args: str) -> None:
    done = subprocess.run(args, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")


def bookie_address(index: int) -> str:
    return f"10.77.{index}.2"


class World:
    def __init__(self, base: Path, bookies: int):
        self.base = base
        self.count = bookies
        self.zk = ZooKeeperServer(host=ZK_ADDRESS)
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.uri = ""

    # ---- topology -------------------------------------------------------------------------
    def build(self) -> None:
        sh("mount", "-t", "tmpfs", "tmpfs", "/run")          # private /run/netns (our own mount namespace)
        Path("/proc/sys/net/ipv4/ip_forward").write_text("1\n")
        for knob in ("ip_early_demux", "tcp_early_demux"):   # else established local TCP skips the rules
            Path(f"/proc/sys/net/ipv4/{knob}").write_text("0\n")
        sh("ip", "link", "set", "lo", "up")
        Path("/run/netns").mkdir(exist_ok=True)                # the hub by name too, for `ip netns exec hub`
        Path("/run/netns/hub").touch()
        sh("mount", "--bind", "/proc/self/ns/net", "/run/netns/hub")
        sh("ip", "addr", "add", f"{ZK_ADDRESS}/32", "dev", "lo")
        sh("ip", "rule", "add", "pref", "100", "lookup", "local")   # fault rules (pref 10) must come before
        sh("ip", "rule", "del", "pref", "0", "lookup", "local")     # local delivery, or ZooKeeper is unreachable-proof
        self._attach("cl", 200)
        for i in range(1, self.count + 1):
            self._attach(f"b{i}", i)

    def _attach(self, name: str, subnet: int) -> None:
        sh("ip", "netns", "add", name)
        sh("ip", "link", "add", f"h{subnet}", "type", "veth", "peer", "name", "eth0", "netns", name)
        sh("ip", "addr", "add", f"10.77.{subnet}.1/24", "dev", f"h{subnet}")
        sh("ip", "link", "set", f"h{subnet}", "up")
        for command in (["link", "set", "lo", "up"], ["addr", "add", f"10.77.{subnet}.2/24", "dev", "eth0"],
                        ["link", "set", "eth0", "up"], ["route", "add", "default", "via", f"10.77.{subnet}.1"]):
            sh("ip", "netns", "exec", name, "ip", *command)

    # ---- processes ------------------------------------------------------------------------
    def start(self, bookie_conf: dict[str, str] | None = None) -> None:
        self.zk.start(self.base / "zookeeper", port=2181, timeout=60)
        self.uri = f"zk://{ZK_ADDRESS}:2181/ledgers"
        with MetadataStore(self.uri, session_timeout=10.0) as store:
            store.init_cluster()
        for i in range(1, self.count + 1):
            self.start_bookie(i, bookie_conf or {})

    def start_bookie(self, index: int, extra: dict[str, str]) -> None:
        home = self.base / f"bookie-{index}"
        home.mkdir(parents=True, exist_ok=True)
        values = {"metadataServiceUri": self.uri, "bookiePort": str(BOOKIE_PORT),
                  "listenAddress": bookie_address(index), "advertisedAddress": bookie_address(index),
                  "journalDirectories": str(home / "journal"), "ledgerDirectories": str(home / "ledgers"),
                  "gcWaitTime": "0", "zkTimeout": "4000", **extra}
        conf = home / "bookie.conf"
        conf.write_text(bkconfig.render(bkconfig.from_mapping(values)))
        with open(home / "bookie.log", "ab") as log:
            self.procs[index] = subprocess.Popen(
                ["ip", "netns", "exec", f"b{index}", sys.executable, "-m", "bkledger.bookie.cli", "bookie",
                 "--conf", str(conf)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def enter_client_namespace(self) -> None:
        """Move this process into `cl`. Only before any thread exists (setns applies to the caller only)."""
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open("/run/netns/cl", os.O_RDONLY)
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns into the client namespace failed")
        finally:
            os.close(fd)

    def bookie_id(self, index: int) -> str:
        return f"{bookie_address(index)}:{BOOKIE_PORT}"

    def index_of(self, bookie_id: str) -> int:
        return int(bookie_id.split(".")[2])

    def pause(self, index: int, sig: int = signal.SIGSTOP) -> None:
        """Signal the bookie process itself (the child of `ip netns exec`, which execs it)."""
        os.kill(self.procs[index].pid, sig)

    # ---- faults ---------------------------------------------------------------------------
    # Faults are policy rules in the hub, the network between the namespaces: packets matching them are
    # dropped silently on the way, as by a failed link or firewall (the sender sees no error, only silence).
    def drop(self, source: str, destination: str) -> None:
        """Packets from `source` to `destination` are dropped (one way). Callable from any namespace."""
        sh(*hub_rule("add", source, destination))

    def heal(self, source: str, destination: str) -> None:
        sh(*hub_rule("del", source, destination))

    def blackhole(self, namespace: str, destination: str, add: bool = True) -> None:
        """Inside `namespace`: a blackhole route, so it sends nothing to `destination` (one way)."""
        sh("ip", "netns", "exec", namespace, "ip", "route", "add" if add else "del", "blackhole", f"{destination}/32")

    def cut(self, a: str, b: str) -> None:
        """Addresses a and b can no longer reach each other, both ways."""
        self.drop(a, b)
        self.drop(b, a)

    def stop(self) -> None:
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGCONT)
                proc.kill()
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
        self.zk.stop(timeout=5)


def hub_rule(verb: str, source: str, destination: str) -> list[str]:
    """The command that adds or deletes the hub's rule dropping packets from `source` to `destination`."""
    return ["ip", "netns", "exec", "hub", "ip", "rule", verb, "pref", "10", "from", source, "to", destination,
            "blackhole"]


def wait_until(what: str, check: object, timeout: float) -> None:
    """Poll `check()` (bounded) until it is true; AssertionError naming `what` otherwise."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
