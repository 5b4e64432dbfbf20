"""``conveyor gateway generate``'s pacing: batches go out on a schedule with several requests
awaiting answers, so a slow answer no longer caps the rate at batch / response time (the demo
asked for 2,000/s and got 606/s at a batch p99 of 1.7 s); a run that falls short says why."""

from __future__ import annotations

import time
from typing import Any

import pytest

from conveyor_sdk.publisher import Published, PublishError
from conveyor.gateway.generate import AdTraffic, GenerateResult, Pacing, run, shortfall


def test_batches_are_due_on_a_fixed_schedule():
    pacing = Pacing(rate=2000, batch=200, in_flight=16)
    assert [pacing.due(i) for i in range(4)] == [0.0, 0.1, 0.2, pytest.approx(0.3)]
    assert pacing.batches(20) == 200
    assert pacing.batches(0.05) == 1  # a run sends at least one batch
    assert pacing.batches(1.05) == 11


def test_the_ceiling_is_requests_in_flight_times_batch_over_response_time():
    # The demo's old loop: one request at a time, 200 events, 0.33 s answers -> about 606/s.
    assert Pacing(2000, 200, 1).ceiling(0.33) == pytest.approx(606, rel=0.01)
    assert Pacing(2000, 200, 16).ceiling(0.33) == pytest.approx(9697, rel=0.01)


def result(rate: float, accepted: int, seconds: float, latencies: list[float], slot_wait: float = 0.0,
           synthesis: float = 0.0, failed: int = 0, in_flight: int = 16) -> GenerateResult:
    return GenerateResult(accepted, accepted, seconds, latencies, Pacing(rate, 200, in_flight), slot_wait, synthesis,
                          failed, "gave up after 8 attempts: HTTP 503" if failed else None)


def test_a_run_that_reaches_its_rate_says_nothing():
    assert shortfall(result(2000, 19_500, 10, [0.05] * 100)) is None  # 97.5 %


def test_a_run_held_back_by_the_gateways_answers_names_their_response_time_and_the_requests_in_flight():
    line = shortfall(result(2000, 12_000, 10, [1.0] * 50 + [1.7] * 10, slot_wait=6.0, in_flight=2))
    assert line is not None and "\n" not in line
    assert line.startswith("reached 1,200 events/s of the 2,000/s asked: the gateways' answers limited it")
    assert "p50 1.00 s, p99 1.70 s at 2 in flight carry about 400/s" in line
    assert "--in-flight" in line


def test_a_run_held_back_by_making_events_says_so():
    line = shortfall(result(2000, 10_000, 10, [0.01] * 50, synthesis=8.0))
    assert line is not None and "could not make events fast enough" in line and "160.0 ms per batch of 200" in line


def test_failed_batches_come_first():
    line = shortfall(result(2000, 10_000, 10, [0.01] * 50, slot_wait=9, failed=3))
    assert line is not None and "3 batch(es) failed (gave up after 8 attempts: HTTP 503)" in line


class SlowGateway:
    """Answers every batch after ``seconds``, like a gateway waiting for acks=all; several
    requests may wait at once, as on a real gateway."""

    def __init__(self, seconds: float, fail: bool = False) -> None:
        self.seconds = seconds
        self.fail = fail

    def publish(self, topic: str, events: list[dict[str, Any]]) -> Published:
        time.sleep(self.seconds)
        if self.fail:
            raise PublishError("gateway refused the batch (403): no ACL", 403)
        return Published(len(events), 1, self.seconds)


def test_requests_in_flight_carry_the_rate_past_a_slow_answer():
    # 0.25 s per answer: one request at a time carries 400/s; eight carry 3,200/s.
    done = run([SlowGateway(0.25)], "ad-events", rate=1000, duration=1.0, batch=100,  # type: ignore[list-item]
               traffic=AdTraffic(seed=1), in_flight=8)
    assert done.accepted == 1000 and done.rate >= 950 and shortfall(done) is None
    assert 0.9 <= done.span <= 1.1


def test_one_request_in_flight_falls_short_and_says_the_answers_limited_it():
    done = run([SlowGateway(0.25)], "ad-events", rate=1000, duration=1.0, batch=100,  # type: ignore[list-item]
               traffic=AdTraffic(seed=1), in_flight=1)
    assert done.rate < 500
    line = shortfall(done)
    assert line is not None and "the gateways' answers limited it" in line and "at 1 in flight" in line


def test_refused_batches_are_counted_not_raised():
    done = run([SlowGateway(0.0, fail=True)], "ad-events", rate=1000, duration=0.2, batch=100,  # type: ignore[list-item]
               traffic=AdTraffic(seed=1))
    assert done.accepted == 0 and done.failed == 2
    assert "2 batch(es) failed (gateway refused the batch (403): no ACL)" in (shortfall(done) or "")
