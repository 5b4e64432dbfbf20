"""The command line without servers: help, a bad platform file's one-line-per-problem error, a
platform path that cannot be read (a directory, not UTF-8, unreadable) and a cluster nobody started
answered in one line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


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


def _one_line_error(run: subprocess.CompletedProcess, path: Path, problem: str) -> None:
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("error: ") and str(path) in lines[0] and problem in lines[0], lines[0]


def test_a_platform_path_that_is_a_directory_is_one_line_and_exit_2(tmp_path):
    run = conveyor("config", "check", "--platform", str(tmp_path))
    _one_line_error(run, tmp_path, "is a directory")


def test_a_platform_file_that_is_not_utf8_is_one_line_and_exit_2(tmp_path):
    latin1 = tmp_path / "platform.yaml"
    latin1.write_bytes("clusters: {}\n# caf\u00e9\n".encode("latin-1"))
    run = conveyor("config", "check", "--platform", str(latin1))
    _one_line_error(run, latin1, "is not UTF-8")


def test_a_platform_path_through_a_file_is_one_line_and_exit_2(tmp_path):
    through = tmp_path / "platform.yaml" / "platform.yaml"
    through.parent.write_text("clusters: {}\n")
    run = conveyor("config", "check", "--platform", str(through))
    _one_line_error(run, through, "not a directory")


def test_an_unreadable_platform_file_is_one_line_and_exit_2(tmp_path):
    locked = tmp_path / "platform.yaml"
    locked.write_text((ROOT / "platform.yaml").read_text())
    locked.chmod(0)
    command = [sys.executable, "-m", "conveyor", "config", "check", "--platform", str(locked)]
    if os.geteuid() == 0:
        # Root reads a mode-000 file through CAP_DAC_OVERRIDE; without that capability (and
        # CAP_DAC_READ_SEARCH) root is held to the mode bits like anyone else.
        setpriv = shutil.which("setpriv")
        drop = [setpriv, "--bounding-set", "-dac_override,-dac_read_search", "--"] if setpriv else []
        probe = subprocess.run([*drop, "cat", str(locked)], capture_output=True) if drop else None
        if probe is None or probe.returncode == 0:
            pytest.skip("running as root, and setpriv cannot drop the capabilities that let root read a mode-000 file")
        command = [*drop, *command]
    run = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=ROOT)
    _one_line_error(run, locked, "permission denied")


def test_a_cluster_nobody_started_is_one_line_naming_its_bootstrap_and_exit_2(tmp_path):
    """Before `conveyor up` writes where its clusters are, a command that needs one says so."""
    platform = tmp_path / "platform.yaml"
    platform.write_text("runtime: {home: home}\nclusters:\n  dc1: {role: writable}\n")
    run = conveyor("topics", "plan", "--platform", str(platform))
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        "error: clusters.dc1.bootstrap is not set: give the cluster's bootstrap servers in platform.yaml, or run "
        "`conveyor up` to start it on this machine"]
