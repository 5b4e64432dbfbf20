"""Start, find and stop the local daemons by pid file.

A pid file alone is not proof: after a reboot the number may belong to another program. A process
counts as ours only while its command line still holds the marker we started it with, so
``conveyor down`` stops exactly what ``conveyor up`` started and nothing else.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Daemon:
    name: str
    pid_file: Path
    console_log: Path
    #: A string our process keeps in its command line for as long as it lives.
    marker: str
    #: What asks it to stop cleanly.
    stop_signal: signal.Signals = signal.SIGTERM


def _cmdline(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # A zombie has an empty command line: it is dead for our purposes.
    return raw.replace(b"\0", b" ").decode(errors="replace") or None


def running_pid(daemon: Daemon) -> int | None:
    """The daemon's pid if it runs, else None (a stale pid file is removed)."""
    try:
        pid = int(daemon.pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    cmdline = _cmdline(pid)
    if cmdline is None or daemon.marker not in cmdline:
        daemon.pid_file.unlink(missing_ok=True)
        return None
    return pid


def start(daemon: Daemon, argv: list[str]) -> int:
    """Start ``argv`` as the daemon, detached from this process (own session, output to its
    console log). The running process must show the daemon's marker in its command line."""
    daemon.console_log.parent.mkdir(parents=True, exist_ok=True)
    daemon.pid_file.parent.mkdir(parents=True, exist_ok=True)
    with open(daemon.console_log, "ab") as log:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    daemon.pid_file.write_text(f"{proc.pid}\n")
    # Until the child has exec'd, its command line is still ours, without the marker; anyone
    # asking in that window would take it for dead. Return only once it shows its marker.
    deadline = time.monotonic() + 30
    while proc.poll() is None and time.monotonic() < deadline:
        cmdline = _cmdline(proc.pid)
        if cmdline is not None and daemon.marker in cmdline:
            break
        time.sleep(0.01)
    return proc.pid


def _reap(pid: int) -> None:
    # Daemons started by this very process (tests, `conveyor up` still running) are our children:
    # reap them so they do not linger as zombies.
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def signal_daemon(daemon: Daemon, sig: signal.Signals) -> int | None:
    pid = running_pid(daemon)
    if pid is not None:
        os.kill(pid, sig)
    return pid


def wait_gone(daemon: Daemon, pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(pid)
        cmdline = _cmdline(pid)
        if cmdline is None or daemon.marker not in cmdline:
            return True
        time.sleep(0.1)
    return False


def stop(daemons: list[Daemon], timeout: float = 30.0) -> list[str]:
    """Signal every daemon to stop at once, SIGKILL those still alive after ``timeout``; names stopped."""
    pids = {d.name: (d, signal_daemon(d, d.stop_signal)) for d in daemons}
    stopped = []
    for name, (daemon, pid) in pids.items():
        if pid is None:
            continue
        if not wait_gone(daemon, pid, timeout):
            # The whole group (a daemon leads its own session): a supervised service's child too.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            wait_gone(daemon, pid, 10.0)
        daemon.pid_file.unlink(missing_ok=True)
        stopped.append(name)
    return stopped


def kill(daemon: Daemon) -> int | None:
    """SIGKILL, as a crash would; returns the pid killed."""
    pid = signal_daemon(daemon, signal.SIGKILL)
    if pid is not None:
        wait_gone(daemon, pid, 10.0)
    return pid


def log_tail(daemon: Daemon, lines: int = 20) -> str:
    try:
        text = daemon.console_log.read_text(errors="replace")
    except FileNotFoundError:
        return "(no output)"
    return "\n".join(text.strip().splitlines()[-lines:]) or "(no output)"
