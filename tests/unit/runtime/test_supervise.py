"""The local runtime's supervisor: a service that fails on its own is started again, one that ends
well or with a usage error is not, and SIGTERM stops the service and the supervisor."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import eventually

#: A service that counts its starts in a file, fails its first ``fail`` starts with ``status`` (or
#: aborts, for a negative one), then runs until it is signalled.
_SERVICE = """
import os, signal, sys, time
runs = sys.argv[1]
count = (int(open(runs).read()) if os.path.exists(runs) else 0) + 1
open(runs, "w").write(str(count))
if count <= int(sys.argv[2]):
    status = int(sys.argv[3])
    os.kill(os.getpid(), -status) if status < 0 else sys.exit(status)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    time.sleep(0.1)
"""


def _supervised(tmp_path: Path, fail: int, status: int) -> tuple[subprocess.Popen, Path]:
    script, runs = tmp_path / "service.py", tmp_path / "runs"
    script.write_text(_SERVICE)
    return subprocess.Popen([sys.executable, "-m", "conveyor.runtime.supervise", sys.executable, str(script),
                             str(runs), str(fail), str(status)], stderr=subprocess.PIPE, text=True), runs


def _runs(runs: Path) -> int:
    return int(runs.read_text()) if runs.exists() and runs.read_text() else 0


def test_a_service_that_fails_or_aborts_is_started_again_and_sigterm_stops_both(tmp_path: Path) -> None:
    supervisor, runs = _supervised(tmp_path, fail=2, status=-signal.SIGABRT)
    try:
        eventually(lambda: _runs(runs) == 3, 30, "the service's third start (after two aborts)")
        time.sleep(0.5)
        assert supervisor.poll() is None
    finally:
        supervisor.send_signal(signal.SIGTERM)
        status = supervisor.wait(30)
    assert status == 0, supervisor.stderr.read() if supervisor.stderr else ""
    assert _runs(runs) == 3
    log = supervisor.stderr.read() if supervisor.stderr else ""
    assert log.count("ended with signal 6") == 2, log


def test_a_usage_error_is_not_started_again(tmp_path: Path) -> None:
    supervisor, runs = _supervised(tmp_path, fail=1, status=2)
    assert supervisor.wait(30) == 2
    assert _runs(runs) == 1
