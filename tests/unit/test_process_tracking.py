"""A process a kit starts with ``track`` is stopped once its test ends, even when the test fails
half-way: a replicator worker left copying loads the machine for every test after it. The two
tests run in this order, in one process (the suite distributes by file)."""

from __future__ import annotations

import subprocess

from tests.processkit import track

_STARTED: list[subprocess.Popen] = []


def test_a_kit_starts_a_process_and_the_test_ends_without_stopping_it() -> None:
    _STARTED.append(track(subprocess.Popen(["sleep", "600"])))
    assert _STARTED[0].poll() is None


def test_the_process_was_stopped_when_the_test_that_started_it_ended() -> None:
    assert _STARTED, "the first test did not run before this one"
    process = _STARTED[0]
    try:
        assert process.poll() is not None, "a tracked process outlived its test"
    finally:
        process.kill()
        process.wait()
