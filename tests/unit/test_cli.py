"""The command line without servers: help, and a bad platform file's one-line-per-problem error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def conveyor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conveyor", *args], capture_output=True, text=True, timeout=60,
                          cwd=ROOT)


def test_help_lists_the_commands():
    run = conveyor("--help")
    assert run.returncode == 0
    for command in ("up", "down", "status", "topics", "smoke"):
        assert command in run.stdout


def test_bad_platform_file_exits_2_with_each_problem_and_its_path(tmp_path):
    bad = tmp_path / "platform.yaml"
    bad.write_text(
        "clusters:\n"
        "  dc1: {role: writable, brokers: 1}\n"
        "topics:\n"
        "  ad-events: {partitions: 0}\n"
        "  notifications: {partitions: 3, replication_factor: 2}\n"
    )
    run = conveyor("config", "check", "--platform", str(bad))
    assert run.returncode == 2
    assert "topics.ad-events.partitions: must be >= 1" in run.stderr
    assert "topics.notifications.replication_factor: is 2 but cluster 'dc1' has 1 broker(s)" in run.stderr
    assert "Traceback" not in run.stderr


def test_platform_file_from_environment(tmp_path):
    run = subprocess.run([sys.executable, "-m", "conveyor", "config", "check"], capture_output=True, text=True,
                         timeout=60, cwd=tmp_path, env={"CONVEYOR_PLATFORM": str(ROOT / "platform.yaml"),
                                                        "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr
    assert "central" in run.stdout


def test_demo_config_check_summarises_replication():
    run = conveyor("config", "check")
    assert run.returncode == 0, run.stderr
    assert "ad-events (12 x 3, 2)" in run.stdout
