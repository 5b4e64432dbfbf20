"""The lake and views commands without servers: their help, and arguments refused before Spark starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def conveyor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conveyor", *args], capture_output=True, text=True, timeout=60,
                          cwd=ROOT)


def test_the_lake_and_views_nouns_list_their_verbs():
    assert {"run", "status", "audit"} <= set(conveyor("lake", "--help").stdout.split())
    assert {"run", "get"} <= set(conveyor("views", "--help").stdout.split())


def test_once_and_every_together_are_refused():
    run = conveyor("lake", "run", "--once", "--every", "30m")
    assert run.returncode == 2
    assert "give --once or --every, not both" in run.stderr


def test_a_bad_interval_is_refused_with_one_line():
    run = conveyor("lake", "run", "--every", "soon")
    assert run.returncode == 2
    assert "must be a duration such as 30s, 15m, 7d" in run.stderr
    assert "Traceback" not in run.stderr


def test_a_topic_the_platform_does_not_declare_is_refused_before_spark_starts():
    run = conveyor("lake", "run", "--topics", "nope")
    assert run.returncode == 1
    assert "not declared in platform.yaml: nope" in run.stderr


def test_a_realtime_start_that_is_neither_earliest_nor_latest_is_refused():
    run = conveyor("views", "run", "--from", "middle")
    assert run.returncode == 2
    assert "--from" in run.stderr and "Traceback" not in run.stderr
