"""Helpers of the bench smoke tests (tests/integration/bench/): every bench a new user runs, at its
smallest size, from this checkout. Each starts its own platform, measures Conveyor's path and its
peer's (or the goal's measure, where the peer is a figure), and writes its figures to a folder of
the test's (CONVEYOR_BENCH_RESULTS), so bench/results keeps the real runs. The smoke tests are
split into files by part so that pytest-xdist spreads them over its workers; ``make test`` runs
them all, so a bench that breaks fails the suite, and ``make bench-smoke`` runs them alone.

Ports: a bench's platform starts 700 above the session's first port. A session holds ports from
its first port - 600 to + 661 (tests/conftest.base_port), and the next worker's sessions begin
2,000 below, so a bench may use up to about +690 from its own first port (the largest offset a
bench adds is 640, the balance bench's Prometheus; the dispatcher bench's node takes +400 to +403).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import ROOT, base_port


def bench_port(offset: int = 0) -> int:
    """The first port of a bench's platform, plus ``offset``."""
    return base_port() + 700 + offset


def _run(name: str, args: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    with subprocess.Popen([sys.executable, "-m", f"bench.{name}", *args], cwd=ROOT, env={**os.environ, **env},
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as bench:
        try:
            out, err = bench.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            # Interrupted, not killed: its own cleanup stops the platform it started, whose brokers
            # would otherwise outlive it and load every later test of the suite.
            bench.send_signal(signal.SIGINT)
            try:
                bench.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                bench.kill()
                bench.communicate()
            raise
    return subprocess.CompletedProcess(bench.args, bench.returncode, out, err)


def run_bench(name: str, results: Path, *args: str, ports: bool = True, timeout: float = 600) -> dict[str, Any]:
    """``python -m bench.<name> args`` run to its end (on :func:`bench_port` when it starts a
    platform); the figures it wrote, with its standard output under ``stdout``."""
    done = _run(name, [*args, *(["--base-port", str(bench_port())] if ports else [])],
                {"CONVEYOR_BENCH_RESULTS": str(results)}, timeout)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    return {"stdout": done.stdout, **json.loads((results / f"{name}.json").read_text())}


def refusal(name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -m bench.<name> args`` expected to stop before it starts anything."""
    return _run(name, list(args), env or {}, timeout=60)
