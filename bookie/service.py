"""The standalone bookie process: cookies, storage, the gRPC server, registration and disk checks.

Mirrors BookKeeper's BookieServer: check that its ports can be bound (before anything is written: a
first start on a taken port must not leave cookies under an id it cannot serve), check cookies (R24)
before touching storage, replay the journal,
listen, then register `{root}/available/<bookie id>` in ZooKeeper (ephemeral; `bookie.registration`
keeps it, off the event loop). A disk-usage check turns the bookie read-only above `diskUsageThreshold`
and back below `diskUsageLwmThreshold` (R25), re-registering it under `available/readonly`; a failed
journal or failed ledger storage (checkpoints failing, `Bookie.storage_failed`) also makes it read-only.
A garbage-collection thread (`bookie.gc`) runs every `gcWaitTime` ms.
SIGTERM unregisters, stops the server and GC, and checkpoints. With ZooKeeper away it waits for none of
it: a stop during the start or the first registration interrupts the ZooKeeper wait, and the
unregistration is skipped (logged: the registration ends with the session); the journal is still
closed. `kill -USR1` dumps every thread's stack to the log (bookie.cli).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import shutil
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from bkledger.bookie import tuning
from bkledger.bookie.add_port import AddPort, open_add_port
from bkledger.bookie.address import resolve
from bkledger.bookie.bookie import Bookie, dirs_have_data
from bkledger.bookie.bookie_http import start_bookie_http
from bkledger.bookie.config import BookieConfig, ConfigError
from bkledger.bookie.core import decisions
from bkledger.bookie.core.cookie import Cookie, CookieError, decide
from bkledger.bookie.gc import GarbageCollector
from bkledger.bookie.http_admin import AdminHttpServer
from bkledger.bookie.log_limit import LogLimit, left_out_note
from bkledger.bookie.memory import pin_malloc_thresholds
from bkledger.bookie.registration import Registrar, call_bounded
from bkledger.bookie.server import BookieService, add_to_server, grpc_options
from bkledger.bookie.stop_signals import FALLBACK, STOP_SIGNALS, block_stop_signals, watch_stop_signals
from bkledger.bookie.thread_guard import FAILURES
from bkledger.bookie.tls import server_credentials
from bkledger.client.errors import InvalidOptionError
from bkledger.client.meta.errors import MetadataStoreError
from bkledger.client.meta.store import MetadataStore
from bkledger.client.meta.zkauth import zk_auth
from bkledger.wire.add_stream import REGISTRATION_PROPERTY

log = logging.getLogger("bkledger.bookie")
GC_STOP_WAIT_S = 10.0   # shutdown waits this long for a garbage-collection round to end


class PortInUseError(OSError):
    """A port the bookie is to serve on cannot be bound; the message names it and what to do."""


def _serving_ports(config: BookieConfig) -> list[tuple[str, int]]:
    ports = [("bookiePort", config.bookiePort)]
    if config.addStreamPort > 0:
        ports.append(("addStreamPort", config.addStreamPort))
    if config.prometheusStatsHttpPort:
        ports.append(("prometheusStatsHttpPort", config.prometheusStatsHttpPort))
    if config.httpServerEnabled:
        ports.append(("httpServerPort", config.httpServerPort))
    return ports


def port_in_use(config: BookieConfig, key: str, port: int, why: str) -> PortInUseError:
    fix = ("stop that process; the bookie's id holds its port, so a bookie with data must keep bookiePort"
           if key == "bookiePort" else f"stop that process or set {key} to a free port")
    return PortInUseError(f"cannot listen on {config.listenAddress}:{port} ({key}): {why}. Another process "
                          f"holds it (ss -ltnp 'sport = :{port}' shows which): {fix}")


def check_ports(config: BookieConfig) -> None:
    """Before any cookie is written: every port this bookie serves on can be bound now."""
    for key, port in _serving_ports(config):
        try:
            socket.create_server((config.listenAddress, port)).close()
        except OSError as exc:
            raise port_in_use(config, key, port, exc.strerror or str(exc)) from None


def _cookie_dirs(config: BookieConfig) -> list[Path]:
    return [config.journal_dir, *config.ledger_dirs]


def check_cookies(config: BookieConfig, store: MetadataStore) -> None:
    """R24: refuse to start unless the cookies in ZooKeeper and on every disk agree."""
    expected = Cookie(
        bookie_id=config.bookie_id,
        journal_dir=str(config.journal_dir),
        ledger_dirs=tuple(str(d) for d in config.ledger_dirs),
        instance_id=store.instance_id(),
    )
    stored = store.read_cookie(config.bookie_id)
    zk_cookie = Cookie.decode(stored[0]) if stored is not None else None
    local: list[Cookie | None] = []
    for d in _cookie_dirs(config):
        path = d / "current" / "VERSION"
        local.append(Cookie.decode(path.read_bytes()) if path.exists() else None)
    decision = decide(expected, zk_cookie, local, dirs_have_data(_cookie_dirs(config)))
    if decision.write_local:
        for d in _cookie_dirs(config):
            (d / "current").mkdir(parents=True, exist_ok=True)
            tmp = d / "current" / "VERSION.tmp"
            tmp.write_bytes(expected.encode())
            tmp.replace(d / "current" / "VERSION")
    if decision.write_zk:
        store.write_cookie(config.bookie_id, expected.encode(), None)
        log.info("new bookie %s: cookies written", config.bookie_id)


class BookieServer:
    def __init__(self, config: BookieConfig):
        self.config = config
        self.store = MetadataStore(config.metadataServiceUri, session_timeout=config.zkTimeout / 1000.0,
                                   auth=zk_auth(config))
        self.credentials = server_credentials(config)      # None: plaintext (see bookie.tls)
        self.bookie = Bookie(config, on_fatal=self._on_journal_fatal)
        self.service: BookieService | None = None
        self.server: grpc.aio.Server | None = None
        self.add_port: AddPort | None = None       # addStreamPort (bookie.add_port), when on
        self._stop = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.gc: GarbageCollector | None = None
        self.http: list[AdminHttpServer] = []     # metrics and admin HTTP (bookie.http_admin), off by default
        self.admin_read_only = False              # put read-only through the admin API (held until put back)
        info = {"host": config.advertisedAddress or config.listenAddress, "port": str(config.bookiePort)}
        self.registrar = Registrar(self.store, config.bookie_id, info, max(config.diskCheckInterval, 50) / 1000.0)

    def _on_journal_fatal(self, exc: BaseException) -> None:
        """The journal failed, or ledger storage did (`Bookie.storage_failed`): read-only until restarted."""
        what = "ledger storage failed" if self.bookie.storage_failed else "journal failed"
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):     # the loop is closed: the bookie has stopped anyway
                self._loop.call_soon_threadsafe(self._set_read_only, True, f"{what}: {exc}")

    def _set_read_only(self, read_only: bool, why: str) -> None:
        if self.service is None or self.service.read_only == read_only:
            return
        failed = self.bookie.journal_failed or bool(self.bookie.storage_failed)
        if not read_only and (failed or self.config.forceReadOnlyBookie or self.admin_read_only):
            return
        if read_only and not self.config.readOnlyModeEnabled:
            log.error("%s and readOnlyModeEnabled=false: shutting down", why)
            self._stop.set()
            return
        self.service.read_only = read_only
        log.warning("bookie is now %s: %s", "read-only" if read_only else "writable", why)
        self.registrar.want(read_only)

    def set_admin_read_only(self, read_only: bool) -> None:
        """`PUT /api/v1/bookie/state/readonly` (on the loop): the disk check does not undo it."""
        self.admin_read_only = read_only
        self._set_read_only(read_only, "set through the admin HTTP API")

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        return self._loop

    @property
    def shutting_down(self) -> bool:
        return self._stop.is_set()

    def status_code(self) -> int:
        """BookKeeper's SERVER_STATUS: 1 writable, 0 read-only, -1 not serving (starting or stopping)."""
        if self.service is None or self._stop.is_set():
            return -1
        return 0 if self.service.read_only else 1

    def state_name(self) -> str:
        code = self.status_code()
        return {1: "writable", 0: "read-only"}.get(code, "stopping" if self._stop.is_set() else "starting")

    def _usages(self) -> list[float]:
        out = []
        for d in _cookie_dirs(self.config):
            usage = shutil.disk_usage(d)
            out.append(usage.used / usage.total if usage.total else 1.0)
        return out

    async def _disk_monitor(self) -> None:
        interval = max(self.config.diskCheckInterval, 50) / 1000.0
        while not self._stop.is_set():
            assert self.service is not None
            with FAILURES.guard("disk-check", "a disk-usage check"):   # a failing disk must not end the checks
                usages = self._usages()
                want = decisions.disk_state(
                    usages, self.config.diskUsageThreshold, self.config.diskUsageLwmThreshold, self.service.read_only
                )
                self._set_read_only(want, f"disk usage {max(usages):.1%} (threshold "
                                    f"{self.config.diskUsageThreshold:.0%})")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), interval)

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.set_exception_handler(quiet_accept_failures(LogLimit(ACCEPT_FAILURE_LOG_INTERVAL_S)))
        watch_stop_signals(self._on_stop_signal)
        for sig in STOP_SIGNALS:    # the fallback (see bookie.stop_signals): wakes the loop itself
            self._loop.add_signal_handler(sig, self._on_stop_signal, FALLBACK.format(sig.name))
        cfg = self.config
        check_ports(cfg)
        if not await self._unless_stopped(self._join_cluster, "it joined the cluster in ZooKeeper"):
            await call_bounded("close the ZooKeeper session", self.store.close, 5)
            log.info("bookie %s stopped", cfg.bookie_id)
            return
        self.bookie.start()
        self.service = BookieService(self.bookie, cfg.bookie_id, self._loop)
        self.service.read_only = cfg.forceReadOnlyBookie or self.bookie.journal_failed
        self.server = grpc.aio.server(options=grpc_options(
            cfg, port_connections(cfg.bookiePortMaxConnections, "bookiePortMaxConnections")),
            maximum_concurrent_rpcs=cfg.bookiePortMaxConcurrentCalls)   # each open call holds memory
        add_to_server(self.service, self.server)
        address = f"{cfg.listenAddress}:{cfg.bookiePort}"
        await self._bind(address)
        self.http = start_bookie_http(self)
        await self.server.start()
        await self._open_add_port()
        if not await self._registered(self.service.read_only):
            await self._shutdown(None)
            return
        self.registrar.start()     # keeps the registration from here on, off the loop (see bookie.registration)
        tuning.freeze_startup_heap()  # full GC passes skip what start-up loaded (see bookie.tuning)
        log.info("bookie %s serving %s on %s (journal %s, ledgers %s)", cfg.bookie_id,
                 "TLS" if self.credentials else "plaintext", address,
                 cfg.journal_dir, ",".join(cfg.ledgerDirectories))
        assert self.bookie.storage is not None
        self.gc = GarbageCollector(self.bookie.storage, self.store, cfg, self.bookie.forget_ledger).start()
        monitor = asyncio.create_task(self._disk_monitor())
        await self._stop.wait()
        await self._shutdown(monitor)

    async def _open_add_port(self) -> None:
        """addStreamPort: listen for add streams over plain TCP (bookie.add_port), and register where."""
        cfg = self.config
        if cfg.addStreamPort < 0:
            return
        assert self.service is not None
        try:
            self.add_port = await open_add_port(self.service, cfg.listenAddress, cfg.addStreamPort,
                                                port_connections(cfg.addStreamPortMaxConnections,
                                                                 "addStreamPortMaxConnections"))
        except OSError as exc:
            await self._shutdown(None)
            raise port_in_use(cfg, "addStreamPort", cfg.addStreamPort, exc.strerror or str(exc)) from None
        self.registrar.info[REGISTRATION_PROPERTY] = str(self.add_port.port)
        log.info("bookie %s takes adds over plain TCP on %s:%d (addStreamPort)", cfg.bookie_id,
                 cfg.listenAddress, self.add_port.port)

    def _join_cluster(self) -> None:
        """Connect to ZooKeeper, create the cluster's znodes if missing, check the cookies (R24)."""
        self.store.start()
        self.store.init_cluster()
        check_cookies(self.config, self.store)

    async def _unless_stopped(self, work: Callable[[], None], what: str,
                              on_stop: Callable[[], None] | None = None) -> bool:
        """Run `work` (ZooKeeper calls) off the loop: True once it is done, False if a stop signal came first.
        The stop interrupts its ZooKeeper waits (`on_stop` first, for a wait of its own): with ZooKeeper
        away it would wait out the connect timeout (15 s) or the retry deadline (2 x zkTimeout) and end in
        a traceback, the SIGTERM unheard meanwhile."""
        working = asyncio.ensure_future(asyncio.to_thread(work))
        stopping = asyncio.ensure_future(self._stop.wait())
        await asyncio.wait({working, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if working.done():
            stopping.cancel()
            working.result()
            return True
        if on_stop is not None:
            on_stop()
        self.store.interrupt()
        try:
            await working
        except MetadataStoreError as exc:     # the interrupted call's, or RegistrationAbandonedError
            log.info("bookie %s: stopped before %s: %s", self.config.bookie_id, what, exc)
        return False

    async def _bind(self, address: str) -> None:
        """Bind the gRPC port; taken since check_ports (a race): close what was opened, PortInUseError."""
        assert self.server is not None
        try:
            bound = (self.server.add_secure_port(address, self.credentials) if self.credentials
                     else self.server.add_insecure_port(address))
        except RuntimeError:
            bound = 0
        if bound == 0:
            await asyncio.to_thread(self.bookie.close)
            await call_bounded("close the ZooKeeper session", self.store.close, 5)
            raise port_in_use(self.config, "bookiePort", self.config.bookiePort, "taken since the check at start")

    async def _registered(self, read_only: bool) -> bool:
        """The first registration; False if a stop signal came first. After a crash the bookie waits
        for its earlier session's node to expire (up to the session timeout, as BookKeeper does), and
        SIGTERM must not wait with it, nor (ZooKeeper gone meanwhile) for that wait's ZooKeeper calls to run
        out their retry deadline (2 x zkTimeout: exit 1 after 19 s with the default zkTimeout). A stop ends
        the registrar's wait at its next look (RegistrationAbandonedError)."""
        return await self._unless_stopped(lambda: self.registrar.register_now(read_only), "it registered",
                                          on_stop=self.registrar.stop)

    def _on_stop_signal(self, what: str) -> None:
        log.info("bookie %s got %s", self.config.bookie_id, what)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)

    async def _shutdown(self, monitor: asyncio.Task[None] | None) -> None:
        log.info("bookie %s shutting down", self.config.bookie_id)
        if monitor is not None:
            monitor.cancel()
        self.registrar.stop()
        # bounded, and skipped while ZooKeeper is away: the ephemeral node goes with the session anyway
        if self.store.connected:
            await call_bounded("unregister", lambda: self.store.unregister_bookie(self.config.bookie_id), 5)
        else:
            log.warning("ZooKeeper is not connected: the registration ends with the session; skipped unregistering "
                        "%s (it goes when ZooKeeper expires the session, after zkTimeout=%d ms)",
                        self.store.layout.bookie(self.config.bookie_id, self.service is not None
                                                 and self.service.read_only), self.config.zkTimeout)
        self.store.interrupt()     # garbage collection waiting for an absent ZooKeeper ends at its next retry
        if self.add_port is not None:
            await self.add_port.close()
        if self.server is not None:
            await self.server.stop(grace=2)
        for http in self.http:
            await asyncio.to_thread(http.stop)
        if self.gc is not None and not await asyncio.to_thread(self.gc.stop, GC_STOP_WAIT_S):
            log.warning("garbage collection still waits (for ZooKeeper?) after %.0f s; stopping without it",
                        GC_STOP_WAIT_S)
        await asyncio.to_thread(self.bookie.close)
        await call_bounded("close the ZooKeeper session", self.store.close, 5)
        log.info("bookie %s stopped", self.config.bookie_id)


ACCEPT_FAILURE_LOG_INTERVAL_S = 10.0
ExceptionHandler = Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object]


def port_connections(configured: int, key: str) -> int:
    """A port's connection limit (`key`: addStreamPortMaxConnections, bookiePortMaxConnections), but at most
    a quarter of the process's open-file limit, so that the two ports' connections together leave half of
    it to the journal, the entry logs, the index files and the checkpoint (a flood of connections that took
    them all failed every checkpoint and every new file; bookie.add_port)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or configured <= soft // 4:
        return configured
    log.info("%s=%d lowered to %d: a quarter of the open-file limit (%d)", key, configured, max(1, soft // 4), soft)
    return max(1, soft // 4)


def quiet_accept_failures(limit: LogLimit) -> ExceptionHandler:
    """The loop's exception handler: asyncio logs a failed accept (out of file descriptors, say) with its
    traceback each time it tries again, which a client opening connections at will turns into a flood of
    log lines; those are limited to one per interval (bookie.log_limit). Everything else: asyncio's own."""
    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if not str(context.get("message", "")).startswith("socket.accept() out of system resource"):
            loop.default_exception_handler(context)
            return
        left_out = limit.allow()
        if left_out is not None:
            log.warning("a listening socket cannot accept: %r (out of file descriptors? too many connections); "
                        "it tries again in 1 s%s", context.get("exception"), left_out_note(left_out))
    return handle


def run_bookie(config: BookieConfig) -> int:
    block_stop_signals()  # before any thread exists: the watcher thread takes them (see bookie.stop_signals)
    pin_malloc_thresholds()  # freed buffers are reused, and RSS does not follow the largest bursts (bookie.memory)
    try:
        asyncio.run(BookieServer(resolve(config)).run())   # advertisedAddress: the id to register (bookie.address)
    except CookieError as exc:
        log.error("refusing to start: %s", exc)
        return 3
    except PortInUseError as exc:
        log.error("refusing to start: %s", exc)
        return 4
    except (ConfigError, InvalidOptionError) as exc:
        log.error("bad configuration: %s", exc)
        return 2
    except MetadataStoreError as exc:      # ZooKeeper unreachable at start, say: one line, no traceback
        log.error("cannot start: %s", exc)
        return 1
    return 0
