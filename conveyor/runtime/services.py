"""Conveyor's own long-running services (gateways, replicators, the watcher) run as local daemons
next to the brokers, so that `conveyor down` stops them with everything else.

Each service is ``python -m conveyor <args>`` under conveyor.runtime.supervise, which starts it
again when it fails on its own, with its pid file (the supervisor's) and console log under
``<home>/services/<name>/``; its full argument line is the marker that identifies it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from conveyor.config import Platform
from conveyor.runtime import processes
from conveyor.runtime.processes import Daemon


def _folder(platform: Platform, name: str) -> Path:
    return platform.home / "services" / name


def _daemon(platform: Platform, name: str, args: list[str]) -> Daemon:
    folder = _folder(platform, name)
    return Daemon(name, folder / "pid", folder / "console.log", " ".join(["-m", "conveyor", *args]))


def start_service(platform: Platform, name: str, args: list[str]) -> tuple[int, bool]:
    """Start ``conveyor <args>`` as daemon ``name`` unless it runs; returns (pid, started now)."""
    daemon = _daemon(platform, name, args)
    pid = processes.running_pid(daemon)
    if pid is not None:
        return pid, False
    _folder(platform, name).mkdir(parents=True, exist_ok=True)
    (_folder(platform, name) / "args.json").write_text(json.dumps(args))
    return processes.start(daemon, [sys.executable, "-m", "conveyor.runtime.supervise",
                                    sys.executable, "-m", "conveyor", *args]), True


def service_daemons(platform: Platform) -> list[Daemon]:
    """Every service ever started for this platform (running or not)."""
    root = platform.home / "services"
    if not root.is_dir():
        return []
    return [_daemon(platform, folder.name, json.loads((folder / "args.json").read_text()))
            for folder in sorted(root.iterdir()) if (folder / "args.json").is_file()]


def service_log_file(platform: Platform, name: str) -> Path:
    return _folder(platform, name) / "console.log"


def service_log_tail(platform: Platform, name: str) -> str:
    return processes.log_tail(Daemon(name, _folder(platform, name) / "pid", service_log_file(platform, name), ""))
