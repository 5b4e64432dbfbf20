"""The benches' own arithmetic: the lake bench's medians and ratios, its command line, and CPU
seconds counted over a process tree whose members come and go."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import pytest

from bench.common import cpu_since, tree_cpu
from bench.lake_ingest import PATHS, Round, _paths, _sizes, size_result


def test_a_size_reports_the_median_of_each_figure_apart_with_every_round():
    rounds = {
        "user_job": [Round(20.0, 30.0), Round(10.0, 12.0), Round(12.0, 11.0)],
        "iceberg_sink": [Round(15.0, 16.0, 3.0, 6), Round(14.0, 14.0, 3.1, 5), Round(16.0, 15.0, 2.9, 6)],
        "lake": [Round(16.0, 24.0), Round(15.0, 22.0), Round(17.0, 30.0)],
    }
    result = size_result(1_000_000, 1024, rounds, 3.5, {})
    assert result["seconds"] == {"librdkafka": 3.5, "user_job": 12.0, "iceberg_sink": 15.0, "lake": 16.0}
    # Seconds and CPU seconds are each the median of their own rounds, not one round's pair.
    assert result["cpu_seconds"] == {"user_job": 12.0, "iceberg_sink": 15.0, "lake": 24.0}
    assert result["events_per_cpu_second"]["lake"] == round(1_000_000 / 24.0)
    assert result["ratio_to_user_job"]["lake"] == 0.75
    assert result["lake_per_cpu_second_to_sink"] == {"lake": 0.62}
    assert result["rounds"]["iceberg_sink"][1] == {"seconds": 14.0, "cpu_seconds": 14.0,
                                                   "first_commit_seconds": 3.1, "commits": 5}
    assert result["rounds"]["lake"][0] == {"seconds": 16.0, "cpu_seconds": 24.0}


def test_a_size_without_the_users_job_or_the_sink_has_no_ratio_to_them():
    result = size_result(2000, 1000, {"lake": [Round(1.0, 2.0)]}, 0.1, {})
    assert result["ratio_to_user_job"] == {} and result["lake_per_cpu_second_to_sink"] == {}


def test_sizes_and_paths_are_read_from_lists_and_refused_by_name():
    assert _sizes("5000000,1_000_000,1000000") == [1_000_000, 5_000_000]
    assert _paths("lake,iceberg_sink") == ("iceberg_sink", "lake")  # in the bench's order
    with pytest.raises(argparse.ArgumentTypeError, match="counts separated by commas"):
        _sizes("1M")
    with pytest.raises(argparse.ArgumentTypeError, match="positive"):
        _sizes("0")
    with pytest.raises(argparse.ArgumentTypeError, match="choose from " + ", ".join(PATHS)):
        _paths("lake,spark")


# A parent that, as Spark's Python daemon does, ignores SIGCHLD, so that the worker it forks is
# reaped by the kernel and its CPU time reaches no parent's cutime. The worker burns CPU, waits
# to be counted, then ends.
_DAEMON = """
import os, signal, sys, time
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
if os.fork() == 0:
    end = time.process_time() + 0.6
    while time.process_time() < end:
        pass
    print("burnt", flush=True)
    time.sleep(3)  # long enough to be counted on a loaded machine
    os._exit(0)
time.sleep(30)
"""


def test_cpu_of_a_tree_whose_worker_ended_unwaited_is_never_negative():
    daemon = subprocess.Popen([sys.executable, "-c", _DAEMON], stdout=subprocess.PIPE, text=True)
    try:
        assert daemon.stdout.readline().strip() == "burnt"
        before = tree_cpu(daemon.pid)
        assert len(before) == 2 and sum(before.values()) >= 0.5, before
        deadline = time.monotonic() + 20
        while len(tree_cpu(daemon.pid)) == 2:  # the worker ends, reaped by the kernel
            assert time.monotonic() < deadline, "the worker did not end"
            time.sleep(0.1)
        after = tree_cpu(daemon.pid)
        # The fault happened: summed over the tree, the worker's whole history went missing.
        assert sum(after.values()) - sum(before.values()) < -0.4
        assert 0 <= cpu_since(before, daemon.pid) < 0.4
    finally:
        daemon.kill()
        daemon.wait()
