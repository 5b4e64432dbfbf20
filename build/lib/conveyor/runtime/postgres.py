"""A local PostgreSQL for the lake's JDBC catalog (``runtime.postgres``), from Debian's package.

Its data lives under the runtime home, it listens on 127.0.0.1 only (no Unix socket) and trusts
connections from there, like the local Redis. PostgreSQL refuses to run as root: started by root,
``initdb`` and the server run as the ``postgres`` user the package creates, which owns the data.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from conveyor.config import Platform
from conveyor.runtime import processes
from conveyor.runtime.errors import NodeFailedError, RuntimeSetupError, StartTimeoutError
from conveyor.runtime.processes import Daemon

#: The OS user Debian's package creates; the server runs as it when root starts it.
OS_USER = "postgres"
_PACKAGE_BIN = Path("/usr/lib/postgresql")


@dataclass(frozen=True)
class PostgresLayout:
    port: int
    user: str
    database: str
    dir: Path

    @property
    def url(self) -> str:
        return f"jdbc:postgresql://127.0.0.1:{self.port}/{self.database}"

    @property
    def data_dir(self) -> Path:
        return self.dir / "data"

    @property
    def pid_file(self) -> Path:
        return self.dir / "pid"

    @property
    def console_log(self) -> Path:
        return self.dir / "postgres.log"

    @property
    def daemon(self) -> Daemon:
        # The server keeps its argument line, data folder included. SIGINT is its fast shutdown
        # (SIGTERM would wait for every client to disconnect).
        return Daemon("postgres", self.pid_file, self.console_log, f"-D {self.data_dir}", signal.SIGINT)


def postgres_layout(platform: Platform) -> PostgresLayout | None:
    settings = platform.runtime.postgres
    if settings is None:
        return None
    return PostgresLayout(settings.port, settings.user, settings.database, platform.home / "postgres")


def server_binary(name: str) -> str:
    """``name`` (initdb, postgres, pg_isready, psql) of the newest installed PostgreSQL."""
    versions = sorted((p for p in _PACKAGE_BIN.glob(f"*/bin/{name}")),
                      key=lambda p: int(re.sub(r"\D", "", p.parents[1].name) or 0))
    if not versions:
        raise RuntimeSetupError(
            f"PostgreSQL is not installed ({_PACKAGE_BIN}/*/bin/{name} missing): run "
            "`apt-get install -y postgresql` (make setup does it)"
        )
    return str(versions[-1])


def _as_owner(argv: list[str]) -> list[str]:
    """``argv`` run as the data's owner: as is, or as the ``postgres`` user when we are root."""
    if os.geteuid() != 0:
        return argv
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise RuntimeSetupError("setpriv (util-linux) is needed to run PostgreSQL as its own user under root")
    return [setpriv, f"--reuid={OS_USER}", f"--regid={OS_USER}", "--init-groups", "--", *argv]


def _give_to_owner(folder: Path) -> None:
    if os.geteuid() != 0:
        return
    shutil.chown(folder, OS_USER, OS_USER)
    blocked = [p for p in folder.parents if not os.stat(p).st_mode & 0o001]
    if blocked:
        raise RuntimeSetupError(
            f"PostgreSQL runs as user {OS_USER}, which cannot enter {blocked[0]} (mode "
            f"{oct(os.stat(blocked[0]).st_mode & 0o777)}); put runtime.home where others may pass, "
            f"or chmod o+x {blocked[0]}"
        )


def initialise(layout: PostgresLayout) -> None:
    """Create the database cluster once (``initdb``): a superuser ``layout.user``, trust on 127.0.0.1."""
    if (layout.data_dir / "PG_VERSION").is_file():
        return
    layout.data_dir.mkdir(parents=True, exist_ok=True)
    _give_to_owner(layout.data_dir)
    result = subprocess.run(
        _as_owner([server_binary("initdb"), "-D", str(layout.data_dir), "-U", layout.user, "--auth=trust",
                   "--encoding=UTF8", "--locale=C.UTF-8"]),
        capture_output=True, text=True,
    )
    if result.returncode != 0:
        raise NodeFailedError(f"initdb of {layout.data_dir} failed:\n{result.stdout}{result.stderr}")


def argv(layout: PostgresLayout) -> list[str]:
    return _as_owner([
        server_binary("postgres"), "-D", str(layout.data_dir), "-p", str(layout.port),
        "-c", "listen_addresses=127.0.0.1",
        "-c", "unix_socket_directories=",
        # Small and local: a catalog holds one row per table.
        "-c", "shared_buffers=32MB",
        "-c", "max_connections=60",
    ])


def start(layout: PostgresLayout) -> bool:
    """Start the server unless it runs; True when this call started it."""
    if processes.running_pid(layout.daemon) is not None:
        return False
    initialise(layout)
    processes.start(layout.daemon, argv(layout))
    return True


def wait_ready(layout: PostgresLayout, deadline: float) -> None:
    """Wait until the server accepts connections, then create the catalog's database if missing."""
    ready = [server_binary("pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(layout.port), "-U", layout.user,
             "-d", "postgres"]
    while subprocess.run(ready).returncode != 0:
        if processes.running_pid(layout.daemon) is None:
            raise NodeFailedError(f"postgres exited while starting:\n{processes.log_tail(layout.daemon)}")
        if time.monotonic() > deadline:
            raise StartTimeoutError(f"postgres did not answer on 127.0.0.1:{layout.port}; see {layout.console_log}")
        time.sleep(0.2)
    psql = [server_binary("psql"), "-h", "127.0.0.1", "-p", str(layout.port), "-U", layout.user, "-d", "postgres",
            "-v", "ON_ERROR_STOP=1", "-tAc"]
    found = subprocess.run([*psql, f"SELECT 1 FROM pg_database WHERE datname = '{layout.database}'"],
                           capture_output=True, text=True, check=True)
    if found.stdout.strip() != "1":
        subprocess.run([*psql, f'CREATE DATABASE "{layout.database}"'], capture_output=True, text=True, check=True)


def stop(layout: PostgresLayout, timeout: float = 30.0) -> list[str]:
    return processes.stop([layout.daemon], timeout)
