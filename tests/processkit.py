"""Processes the tests start, stopped after the test that started them.

Apart from tests/conftest.py on purpose: pytest loads that file as the module ``conftest`` and
the kits import it as ``tests.conftest``, two modules with a list each, so the kits' processes were
tracked in a list the autouse fixture never read. This module is only ever imported as
``tests.processkit``."""

from __future__ import annotations

import subprocess

#: Service processes tests start (conftest's ``outlived_by_nothing`` stops those still running after their test).
CHILDREN: list[subprocess.Popen] = []


def track(process: subprocess.Popen) -> subprocess.Popen:
    """``process``, stopped at the end of the test that started it if it still runs then (a test
    that fails half-way leaves no worker copying, and loading the machine, for the tests after it)."""
    CHILDREN.append(process)
    return process


def stop_survivors() -> None:
    """Stop every tracked process still running."""
    left = [p for p in CHILDREN if p.poll() is None]
    CHILDREN.clear()
    for process in left:
        stop_process(process)


def stop_process(process: subprocess.Popen, timeout: float = 60.0) -> None:
    """SIGTERM ``process`` and wait for it; SIGKILL after ``timeout`` seconds (a loaded machine)."""
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
