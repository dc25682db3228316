"""A real, standalone ZooKeeper server on 127.0.0.1, run from the jars that the pyspark wheel ships.

Owns the ZooKeeper process of `bkledger local up` and of the test fixtures: it writes a `zoo.cfg`
and a quiet log4j2 configuration into the data directory, starts
`org.apache.zookeeper.server.quorum.QuorumPeerMain` (standalone mode, as `zkServer.sh start` does)
with the machine's Java, and waits until the server answers. BookKeeper's own test harness does the
same with `ZooKeeperServerMain` in-process; here the server is always a separate JVM, so a later
process (`bkledger local down`) can stop it by pid with `stop_pid`.

A low tickTime (500 ms) makes session expiry fast in tests; maxSessionTimeout is large enough for
the usual 10-30 s client sessions.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from bkledger.bookie.local import port_claims

MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
HOST = "127.0.0.1"
TICK_TIME_MS = 500
MIN_SESSION_TIMEOUT_MS = 1_000
MAX_SESSION_TIMEOUT_MS = 120_000
_LOG4J2_XML = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="ERROR">
  <Appenders>
    <Console name="out" target="SYSTEM_OUT">
      <PatternLayout pattern="%d{ISO8601} %-5p [%t] %c{1}: %m%n"/>
    </Console>
  </Appenders>
  <Loggers>
    <Root level="WARN"><AppenderRef ref="out"/></Root>
  </Loggers>
</Configuration>
"""


class ZooKeeperError(RuntimeError):
    """The ZooKeeper server could not be found, started or stopped; the message says why and what to do."""


def find_java() -> str:
    """$JAVA_HOME/bin/java if set and present, else `java` on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("java")
    if found:
        return found
    raise ZooKeeperError(
        "no Java found: set JAVA_HOME or put `java` (17 or later, as Spark needs) on PATH "
        "to run the embedded ZooKeeper, or pass metadataServiceUri of an external ensemble"
    )


def find_jars_dir() -> Path:
    """The `jars/` directory of the installed pyspark wheel, which holds zookeeper-3.x.jar."""
    try:
        import pyspark
    except ImportError as exc:
        raise ZooKeeperError("pyspark is not installed; its wheel ships the ZooKeeper jars we run") from exc
    jars = Path(pyspark.__file__).resolve().parent / "jars"
    if not any(jars.glob("zookeeper-*.jar")):
        raise ZooKeeperError(f"no zookeeper-*.jar in {jars}: reinstall pyspark (pip install pyspark)")
    return jars


_HANDED_OUT: set[int] = set()


def free_port(host: str = HOST) -> int:
    """A port free now and not handed out before by this process, nor claimed by another one: the kernel
    may offer a port again once the probing socket is closed, and a cluster set up with the same port for a
    bookie and its metrics server failed to start (seen twice in a day); two processes picking ports at once
    (parallel test workers, two clusters) can meet the same way (`port_claims`)."""
    while True:
        port = _offered_port(host)
        if port not in _HANDED_OUT and port_claims.claim(port):
            _HANDED_OUT.add(port)
            return port


def _offered_port(host: str) -> int:
    """A port the kernel offers now (free at this instant)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def reserve_ports(*ports: int) -> None:
    """Ports free_port must not hand out (a restarted cluster's kept ports, bound a moment later); claimed
    machine-wide too where no other process holds them."""
    kept = [p for p in ports if p]
    _HANDED_OUT.update(kept)
    for port in kept:
        port_claims.claim(port)


def four_letter_word(port: int, word: str = "ruok", timeout: float = 1.0, host: str = HOST) -> bytes:
    """Send a ZooKeeper four-letter command (must be whitelisted) and return the whole answer."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(word.encode("ascii"))
        chunks = []
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


def is_serving(port: int, host: str = HOST) -> bool:
    """True if a ZooKeeper on host:port serves requests (`srvr` shows its mode; `ruok` answers
    `imok` as soon as the process runs, even before the database is loaded)."""
    try:
        return b"Mode: " in four_letter_word(port, "srvr", host=host)
    except OSError:
        return False


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(ChildProcessError):  # our own zombie child: reap it
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    return True


def stop_pid(pid: int, timeout: float = 10.0) -> None:
    """Stop a ZooKeeper started earlier (possibly by another process): SIGTERM, wait, then SIGKILL."""
    if pid <= 0 or not pid_alive(pid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and pid_alive(pid):
        time.sleep(0.05)


def render_config(data_dir: Path, port: int, host: str = HOST) -> str:
    return "\n".join([
        f"tickTime={TICK_TIME_MS}",
        "initLimit=10",
        "syncLimit=5",
        f"dataDir={data_dir / 'data'}",
        f"clientPort={port}",
        f"clientPortAddress={host}",
        "maxClientCnxns=0",
        "admin.enableServer=false",
        "4lw.commands.whitelist=ruok,stat,srvr,mntr,cons,dump",
        f"minSessionTimeout={MIN_SESSION_TIMEOUT_MS}",
        f"maxSessionTimeout={MAX_SESSION_TIMEOUT_MS}",
        "autopurge.snapRetainCount=3",
        "autopurge.purgeInterval=1",
        "",
    ])


class ZooKeeperServer:
    """One standalone ZooKeeper JVM on 127.0.0.1 (or `host`, e.g. an address inside a network namespace
    a test made). `start()` blocks until it serves; `stop()` ends it."""

    def __init__(self, java: str | None = None, heap: str = "256m",
                 system_properties: dict[str, str] | None = None, host: str = HOST):
        """`system_properties`: extra JVM -D settings, e.g. ZooKeeper's superDigest (bookie.local.secure)."""
        self.java = java
        self.heap = heap
        self.system_properties = dict(system_properties or {})
        self.host = host
        self.port = 0
        self.pid = 0
        self.data_dir: Path | None = None
        self.log_path: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def connect_string(self) -> str:
        """host:port for kazoo / BookKeeper's zkServers."""
        return f"{self.host}:{self.port}"

    def metadata_service_uri(self, root: str = "/ledgers") -> str:
        return f"zk://{self.connect_string}{root}"

    def command(self, config_path: Path, log4j_path: Path) -> list[str]:
        java = self.java or find_java()
        classpath = str(find_jars_dir() / "*")
        return [
            java, f"-Xmx{self.heap}", "-Xss1m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-Djava.net.preferIPv4Stack=true",
            f"-Dlog4j.configurationFile={log4j_path}", f"-Dlog4j2.configurationFile={log4j_path}",
            "-Dzookeeper.jmx.log4j.disable=true", "-Dzookeeper.admin.enableServer=false",
            *(f"-D{k}={v}" for k, v in self.system_properties.items()),
            "-cp", classpath, MAIN_CLASS, str(config_path),
        ]

    def start(self, data_dir: Path, port: int = 0, timeout: float = 30.0) -> None:
        """Write zoo.cfg under data_dir, start the JVM and wait (bounded) until it answers `ruok`."""
        if self._proc is not None and self._proc.poll() is None:
            raise ZooKeeperError(f"this ZooKeeper is already running (pid {self.pid}, port {self.port})")
        data_dir = Path(data_dir).resolve()
        (data_dir / "data").mkdir(parents=True, exist_ok=True)
        self.port = port or free_port(self.host)
        if is_serving(self.port, self.host):
            raise ZooKeeperError(f"port {self.port} already has a ZooKeeper; pick another or stop that one")
        config_path, log4j_path = data_dir / "zoo.cfg", data_dir / "log4j2.xml"
        config_path.write_text(render_config(data_dir, self.port, self.host))
        log4j_path.write_text(_LOG4J2_XML)
        self.data_dir, self.log_path = data_dir, data_dir / "zookeeper.log"
        cmd = self.command(config_path, log4j_path)
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=data_dir, start_new_session=True,
            )
        self.pid = self._proc.pid
        (data_dir / "zookeeper.pid").write_text(f"{self.pid}\n")
        self._wait_serving(timeout)

    def _wait_serving(self, timeout: float) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self._proc.poll()
            if code is not None:
                self._proc = None
                raise ZooKeeperError(f"ZooKeeper exited with code {code} at start; see {self.log_path}:\n"
                                     + self._log_tail())
            if is_serving(self.port, self.host):
                return
            time.sleep(0.05)
        self.stop()
        raise ZooKeeperError(f"ZooKeeper did not answer on {self.connect_string} within {timeout:.0f}s; "
                             f"see {self.log_path}:\n{self._log_tail()}")

    def _log_tail(self, lines: int = 20) -> str:
        if self.log_path is None:
            return ""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    @property
    def running(self) -> bool:
        if self._proc is not None:
            return self._proc.poll() is None
        return bool(self.pid) and pid_alive(self.pid)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, wait up to `timeout`, then SIGKILL. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5.0)
        elif self.pid:
            stop_pid(self.pid, timeout)
        self.pid = 0

    @classmethod
    def attach(cls, pid: int, port: int) -> ZooKeeperServer:
        """A handle on a server started by another process (for status and `stop()`)."""
        server = cls()
        server.pid, server.port = pid, port
        return server

    def __enter__(self) -> ZooKeeperServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
