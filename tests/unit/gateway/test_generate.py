"""``conveyor generate``'s seed: a new one each run, so runs never repeat each other's event ids
(the lake keeps one event per id and would drop a repeat as a retry); ``--seed`` repeats a run."""

from __future__ import annotations

import re
from typing import Any

import pytest
from typer.testing import CliRunner

from conveyor.cli import app
from conveyor_sdk import publisher
from conveyor_sdk.publisher import Published
from conveyor.gateway.generate import AdTraffic, run


class Recorder:
    """A Publisher that accepts everything and keeps the event ids it was given."""

    sent: list[str] = []

    def __init__(self, url: str, token: str, **_: Any) -> None:
        pass

    def publish(self, topic: str, events: list[dict[str, Any]]) -> Published:
        Recorder.sent.extend(e["event_id"] for e in events)
        return Published(len(events), 1, 0.001)

    def close(self) -> None:
        pass


def ids_of_run(traffic: AdTraffic | None = None) -> list[str]:
    Recorder.sent = []
    run([Recorder("http://gateway", "token")], "ad-events", rate=2000, duration=0.2, batch=100, traffic=traffic)
    assert Recorder.sent
    return Recorder.sent


def test_two_runs_without_a_seed_send_disjoint_event_ids():
    first, second = ids_of_run(), ids_of_run()
    assert not set(first) & set(second)


def test_two_runs_with_the_same_seed_send_the_same_event_ids():
    first, second = ids_of_run(AdTraffic(seed=12345)), ids_of_run(AdTraffic(seed=12345))
    # Batches are answered in any order (several await answers at once); the events are the same.
    assert set(first) == set(second)
    assert set(ids_of_run(AdTraffic(seed=12346))).isdisjoint(first)


@pytest.fixture
def generate(monkeypatch: pytest.MonkeyPatch):
    """``conveyor generate`` with ``args`` through a Recorder: its output and the ids it sent."""
    monkeypatch.setattr(publisher, "Publisher", Recorder)

    def invoke(*args: str) -> tuple[str, list[str]]:
        Recorder.sent = []
        result = CliRunner().invoke(app, ["generate", "--token", "demo-adserver-token", "--url", "http://gateway",
                                          "--rate", "500", "--duration", "1", "--batch", "100", *args])
        assert result.exit_code == 0, result.output
        return result.output, list(Recorder.sent)
    return invoke


def test_the_command_prints_a_new_seed_each_run_and_seed_repeats_a_run(generate):
    first_output, first = generate()
    second_output, second = generate()
    seeds = [re.search(r"seed (\d+); rerun with --seed \1 to send the same events", output)
             for output in (first_output, second_output)]
    assert all(seeds), first_output
    assert seeds[0][1] != seeds[1][1]
    assert first and second and not set(first) & set(second)
    again_output, again = generate("--seed", seeds[0][1])
    assert f"seed {seeds[0][1]};" in again_output
    assert again and set(again) == set(first)
