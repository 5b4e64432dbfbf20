"""The pipeline commands without servers: their help, and arguments refused before Spark starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def conveyor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conveyor", *args], capture_output=True, text=True, timeout=60,
                          cwd=ROOT)


def test_pipeline_and_lake_commands_are_listed():
    assert {"lake", "audit"} <= set(conveyor("pipeline", "--help").stdout.split())
    assert "status" in conveyor("lake", "--help").stdout


def test_once_and_every_together_are_refused():
    run = conveyor("pipeline", "lake", "--once", "--every", "30m")
    assert run.returncode == 2
    assert "give --once or --every, not both" in run.stderr


def test_a_bad_interval_is_refused_with_one_line():
    run = conveyor("pipeline", "lake", "--every", "soon")
    assert run.returncode == 2
    assert "must be a duration such as 30s, 15m, 7d" in run.stderr
    assert "Traceback" not in run.stderr


def test_a_topic_the_platform_does_not_declare_is_refused_before_spark_starts():
    run = conveyor("pipeline", "lake", "--topics", "nope")
    assert run.returncode == 1
    assert "not declared in platform.yaml: nope" in run.stderr


def test_a_realtime_start_that_is_neither_earliest_nor_latest_is_refused():
    run = conveyor("pipeline", "realtime", "--from", "middle")
    assert run.returncode == 2
    assert "--from" in run.stderr and "Traceback" not in run.stderr
