"""A private PostgreSQL cluster for tests that must restart or kill the server (store outages,
the chaos suite): never the shared server at 127.0.0.1:5432, which nobody may stop.

    from support.private_postgres import PrivatePostgres

    with PrivatePostgres.running() as cluster:      # initdb + start, skipped if impossible
        url = cluster.url()                         # postgresql://postgres@127.0.0.1:PORT/postgres
        cluster.restart_fast()                      # `pg_ctl restart -m fast`
        cluster.kill_postmaster()                   # SIGKILL the postmaster (its children die
        cluster.start()                             #   of it), then start: crash recovery
        with cluster.standby() as standby:          # an asynchronous streaming standby
            standby.detach()                        #   that stops receiving (a partition)
            standby.promote()                       #   and becomes a primary (new timeline)
    # stopped (immediate) and its directory removed

`initdb` into a fresh directory under the system temporary directory, owned by the `postgres`
OS user when the tests run as root (initdb and the server refuse to run as root; both are run
with `runuser -u postgres --`); trust authentication, the superuser `postgres`, listening on
127.0.0.1 only on a free port, no Unix socket. The binaries are those of the directory named
by `COORDINATOR_TEST_PG_BIN`, or else of the newest /usr/lib/postgresql/*/bin. Where they (or
`runuser` and the `postgres` user, as root) are missing, `PrivatePostgres.running()` skips the
test with the reason, and fails it when `CI=true` (CI must run these tests).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import psycopg

from support.needs import unavailable

__all__ = ["PrivatePostgres", "postgres_binaries"]

BIN_VARIABLE = "COORDINATOR_TEST_PG_BIN"
SUPERUSER = "postgres"
OS_USER = "postgres"
START_TIMEOUT = 60.0


def _unavailable(reason: str) -> NoReturn:
    __tracebackhide__ = True
    unavailable(
        f"a private PostgreSQL cluster cannot be run: {reason}",
        f"install PostgreSQL server binaries or set {BIN_VARIABLE}",
    )


def postgres_binaries() -> Path | None:
    """The directory holding `initdb`, `pg_ctl` and `postgres`, or None."""
    named = os.environ.get(BIN_VARIABLE)
    candidates = (
        [Path(named)]
        if named
        else sorted(
            Path("/usr/lib/postgresql").glob("*/bin"),
            key=lambda path: int(path.parent.name) if path.parent.name.isdigit() else 0,
            reverse=True,
        )
    )
    for candidate in candidates:
        if all((candidate / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres")):
            return candidate
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (not yet reaped by its parent) is as good as gone
    with contextlib.suppress(OSError):
        status = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        if status and status[0] == "Z":
            return False
    return True


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
            if len(fields) > 1 and int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


@dataclass
class PrivatePostgres:
    """One private cluster: its directory, port and binaries (see the module docstring)."""

    directory: Path
    port: int
    binaries: Path
    as_user: str | None  # the OS user the server runs as (None: the current user)

    @property
    def data(self) -> Path:
        return self.directory / "data"

    @property
    def logfile(self) -> Path:
        return self.directory / "server.log"

    def url(self, database: str = "postgres", user: str = SUPERUSER) -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}"

    # -- life cycle -----------------------------------------------------------------------------

    @classmethod
    @contextlib.contextmanager
    def running(cls) -> Iterator[PrivatePostgres]:
        """A started cluster for the `with` block; stopped and removed afterwards."""
        cluster = cls.create()
        try:
            cluster.start()
            yield cluster
        finally:
            cluster.cleanup()

    @classmethod
    @contextlib.contextmanager
    def running_with(cls, database: str, role: str) -> Iterator[PrivatePostgres]:
        """`running`, with a database and a login role for a deployment's runtime role."""
        with cls.running() as cluster:
            with psycopg.connect(cluster.url(), autocommit=True) as admin:
                admin.execute(f'CREATE ROLE "{role}" LOGIN')
                admin.execute(f'CREATE DATABASE "{database}"')
            yield cluster

    @classmethod
    def create(cls) -> PrivatePostgres:
        """`initdb` a new cluster (not started); skips or fails where that is impossible."""
        binaries = postgres_binaries()
        if binaries is None:
            _unavailable("no PostgreSQL server binaries (initdb, pg_ctl, postgres)")
            raise AssertionError("unreachable")
        as_user: str | None = None
        if os.geteuid() == 0:
            try:
                pwd.getpwnam(OS_USER)
            except KeyError:
                _unavailable(f"running as root and there is no `{OS_USER}` OS user")
            if shutil.which("runuser") is None:
                _unavailable("running as root and `runuser` is missing")
            as_user = OS_USER
        directory = Path(tempfile.mkdtemp(prefix="coordinator-pg-"))
        cluster = cls(directory, _free_port(), binaries, as_user)
        try:
            if as_user is not None:
                account = pwd.getpwnam(as_user)
                os.chown(directory, account.pw_uid, account.pw_gid)
            cluster._run(
                "initdb",
                "-D", str(cluster.data),
                "-U", SUPERUSER,
                "--auth=trust",
                "--encoding=UTF8",
                "--no-instructions",
            )  # fmt: skip
            settings = (
                "listen_addresses = '127.0.0.1'\n"
                f"port = {cluster.port}\n"
                "unix_socket_directories = ''\n"
                "fsync = off\n"  # no machine crash is simulated: the kernel keeps the pages
                "max_connections = 200\n"
            )
            config = cluster.data / "postgresql.conf"
            cluster._run("sh", "-c", f"cat >> '{config}'", stdin=settings, tool=False)
        except BaseException:
            cluster.cleanup()
            raise
        return cluster

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.logfile), "-w", "start")
        self.wait_ready()

    def stop(self, mode: str = "fast") -> None:
        """`pg_ctl stop -m MODE` (smart, fast or immediate)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart_fast(self) -> float:
        """`pg_ctl restart -m fast`, waiting until connections are accepted again; the seconds
        the restart command took (a figure to report, never to assert)."""
        began = time.monotonic()
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.logfile), "-m", "fast", "-w", "restart"
        )
        took = time.monotonic() - began
        self.wait_ready()
        return took

    def postmaster_pid(self) -> int | None:
        try:
            first = (self.data / "postmaster.pid").read_text().splitlines()[0]
        except (OSError, IndexError):
            return None
        return int(first) if first.strip().isdigit() else None

    def kill_postmaster(self, timeout: float = 30.0) -> None:
        """SIGKILL the postmaster; wait until it and its children are gone (the children end
        when they notice its death; any left at `timeout` are killed too) and remove its
        stale lock file, so that `start` runs crash recovery on a cluster no process holds."""
        pid = self.postmaster_pid()
        if pid is None or not _alive(pid):
            raise AssertionError("the private PostgreSQL server is not running")
        children = _children(pid)
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + timeout
        while any(_alive(each) for each in [pid, *children]):
            if time.monotonic() > deadline:
                for each in children:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(each, signal.SIGKILL)
                deadline = time.monotonic() + timeout
            time.sleep(0.05)
        # Until its new parent reaps it (late in some containers, whose PID 1 is slow to), the
        # dead postmaster is a zombie that the next server would take for a running one: its
        # lock file is stale, as after a machine crash, and goes.
        with contextlib.suppress(FileNotFoundError):
            (self.data / "postmaster.pid").unlink()

    def accepts_connections(self) -> bool:
        try:
            with psycopg.connect(self.url(), connect_timeout=2) as connection:
                connection.execute("SELECT 1")
        except psycopg.Error:
            return False
        return True

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while not self.accepts_connections():
            if time.monotonic() > deadline:
                raise AssertionError("the private PostgreSQL server did not accept connections")
            time.sleep(0.05)

    def cleanup(self) -> None:
        """Stop the server (immediately) if it runs and remove the cluster's directory."""
        pid = self.postmaster_pid()
        if pid is not None and _alive(pid):
            with contextlib.suppress(AssertionError, subprocess.TimeoutExpired):
                self.stop("immediate")
            if _alive(pid):
                with contextlib.suppress(AssertionError, ProcessLookupError):
                    self.kill_postmaster()
        shutil.rmtree(self.directory, ignore_errors=True)

    def log(self) -> str:
        try:
            return self.logfile.read_text(errors="replace")
        except OSError:
            return ""

    # -- a standby ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def standby(self) -> Iterator[PrivatePostgres]:
        """An asynchronous streaming standby of this running cluster, started on its own port:
        `pg_basebackup -R -X stream` into a new directory (`synchronous_standby_names` stays
        empty, so the primary never waits for it). Stopped and removed after the block."""
        directory = Path(tempfile.mkdtemp(prefix="coordinator-pg-standby-"))
        standby = PrivatePostgres(directory, _free_port(), self.binaries, self.as_user)
        try:
            if self.as_user is not None:
                account = pwd.getpwnam(self.as_user)
                os.chown(directory, account.pw_uid, account.pw_gid)
            standby._run(
                "pg_basebackup",
                "-D", str(standby.data),
                "-h", "127.0.0.1",
                "-p", str(self.port),
                "-U", SUPERUSER,
                "-R",
                "-X", "stream",
                "-c", "fast",
            )  # fmt: skip
            config = standby.data / "postgresql.conf"
            standby._run(
                "sh", "-c", f"cat >> '{config}'", stdin=f"port = {standby.port}\n", tool=False
            )
            standby.start()
            yield standby
        finally:
            standby.cleanup()

    def is_standby(self) -> bool:
        with psycopg.connect(self.url(), connect_timeout=2) as connection:
            row = connection.execute("SELECT pg_is_in_recovery()").fetchone()
        return bool(row and row[0])

    def replayed(self) -> str:
        """The last WAL position this standby replayed (`pg_last_wal_replay_lsn`)."""
        with psycopg.connect(self.url(), connect_timeout=2) as connection:
            row = connection.execute("SELECT pg_last_wal_replay_lsn()::text").fetchone()
        return str(row[0]) if row else ""

    def detach(self) -> None:
        """Stop receiving WAL from the primary (an empty `primary_conninfo`, reloaded): as a
        standby cut off by a partition, it keeps what it has and falls behind."""
        auto = self.data / "postgresql.auto.conf"
        self._run("sh", "-c", f"cat >> '{auto}'", stdin="primary_conninfo = ''\n", tool=False)
        self._run("pg_ctl", "-D", str(self.data), "reload")

    def promote(self) -> None:
        """`pg_ctl promote -w`: the standby ends recovery on a new timeline and accepts writes."""
        self._run("pg_ctl", "-D", str(self.data), "-w", "promote")

    # -- running the tools ----------------------------------------------------------------------

    def _run(
        self, program: str, *arguments: str, stdin: str | None = None, tool: bool = True
    ) -> None:
        command: Sequence[str] = [str(self.binaries / program) if tool else program, *arguments]
        if self.as_user is not None:
            command = ["runuser", "-u", self.as_user, "--", *command]
        done = subprocess.run(
            command,
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
            timeout=START_TIMEOUT,
            cwd=self.directory,
        )
        if done.returncode != 0:
            raise AssertionError(
                f"{program} {arguments[:1]} failed ({done.returncode}): {done.stderr[-2000:]}"
            )
