"""What keeps one client from holding a dispatcher node's resources: the first frame's deadline,
the cap on a nack's retry delay, and idle readers retired (no brokers: the pure parts, and the
reader's bookkeeping without its Kafka thread)."""

from __future__ import annotations

import queue
import threading
import time
from pathlib import Path

import pytest

from conveyor.config import ConfigError, Dispatch, load_platform, parse_platform
from conveyor.dispatch.errors import ReaderStopped
from conveyor.dispatch.fanout import Client
from conveyor.dispatch.metrics import NodeMetrics
from conveyor_sdk.protos import dispatch_pb2 as pb
from conveyor.dispatch.source import Source
from conveyor.dispatch.streams import FirstFrameTimeout, Inbound, invalid

ROOT = Path(__file__).resolve().parents[3]
HOURS_10_MS = 10 * 3600 * 1000


def nack(delay_ms: int) -> pb.ReadRequest:
    return pb.ReadRequest(nacks=[pb.Nack(ids=pb.Ids(partitions=[0], offsets=[1]), retry_delay_ms=delay_ms)])


def test_the_settings_have_defaults_and_read_durations():
    settings = Dispatch()
    assert (settings.subscribe_timeout, settings.max_retry_delay, settings.reader_idle_timeout) == (5.0, 300.0, 60.0)
    assert (settings.max_readers, settings.max_readers_per_service) == (128, 32)
    tuned = Dispatch(subscribe_timeout="500ms", max_retry_delay="1m", reader_idle_timeout="2s")
    assert (tuned.subscribe_timeout, tuned.max_retry_delay, tuned.reader_idle_timeout) == (0.5, 60.0, 2.0)


def test_a_zero_timeout_is_refused_with_its_path():
    data = {"clusters": {"central": {"role": "read", "brokers": 1}}, "dispatch": {"subscribe_timeout": 0}}
    with pytest.raises(ConfigError) as refused:
        parse_platform(data)
    assert "dispatch.subscribe_timeout: must be > 0" in str(refused.value)


def test_a_retry_delay_above_the_limit_is_refused_naming_the_field_and_the_limit():
    assert invalid(nack(300_000), 300_000) is None
    why = invalid(nack(HOURS_10_MS), 300_000)
    assert why == ("nacks[0].retry_delay_ms is 36000000 ms, above the node's limit of 300000 ms "
                   "(dispatch.max_retry_delay)")
    two = pb.ReadRequest(nacks=[*nack(0).nacks, *nack(300_001).nacks])
    assert invalid(two, 300_000).startswith("nacks[1].retry_delay_ms is 300001 ms")


def test_the_other_frame_checks_still_hold():
    again = pb.ReadRequest(subscribe=pb.Subscribe(topic="t"))
    assert invalid(again, 1) == "a stream subscribes once, in its first frame"
    assert invalid(pb.ReadRequest(acks=pb.Ids(partitions=[0], offsets=[])), 1) == "ids have 1 partitions but 0 offsets"
    assert invalid(pb.ReadRequest(credit=3), 1) is None


class FakeReader:
    def __init__(self) -> None:
        self.handled: list[pb.ReadRequest] = []
        self.disconnected = threading.Event()

    def handle(self, client: Client, request: pb.ReadRequest) -> None:
        self.handled.append(request)

    def disconnect(self, client: Client) -> None:
        self.disconnected.set()


def frames(q: queue.SimpleQueue) -> object:
    return iter(q.get, None)


def test_a_stream_that_sends_nothing_times_out_and_its_thread_goes_when_the_stream_ends():
    sent: queue.SimpleQueue = queue.SimpleQueue()
    inbound = Inbound(frames(sent), 300_000, "test-in-silent")
    thread = next(t for t in threading.enumerate() if t.name == "test-in-silent")
    with pytest.raises(FirstFrameTimeout):
        inbound.first(0.2)
    inbound.abandon()
    sent.put(None)  # gRPC ends the iterator once the stream is closed
    thread.join(5)
    assert not thread.is_alive()


def test_frames_after_the_first_go_to_the_reader_until_a_bad_one():
    sent: queue.SimpleQueue = queue.SimpleQueue()
    subscribe = pb.ReadRequest(subscribe=pb.Subscribe(topic="t", group="g", credit=1))
    sent.put(subscribe)
    inbound = Inbound(frames(sent), 300_000, "test-in")
    assert inbound.first(5) == subscribe
    reader, client = FakeReader(), Client("mailer", 1)
    inbound.serve(reader, client)  # type: ignore[arg-type]
    sent.put(pb.ReadRequest(credit=1))
    sent.put(nack(HOURS_10_MS))
    sent.put(pb.ReadRequest(credit=2))
    assert reader.disconnected.wait(5)
    assert [r.credit for r in reader.handled] == [1]
    assert client.outbox.get(timeout=5) is None  # the stream ends, with the problem as its status
    assert inbound.problem is not None and "retry_delay_ms" in inbound.problem


@pytest.fixture
def source() -> Source:
    platform = load_platform(ROOT / "platform.yaml")
    return Source(platform, "central", "notifications", "mailer", "127.0.0.1:1",
                  NodeMetrics().reader("notifications", "mailer"))


def test_a_reader_with_a_client_is_never_idle(source):
    client = Client("mailer", 1)
    source.connect(client)
    assert not source.retire_if_idle(1e12, 1.0)
    source.disconnect(client)
    source.disconnect(client)  # the stream's two ends both report it
    assert not source.retire_if_idle(0.0, 1.0)


def test_a_reader_idle_long_enough_retires_and_takes_no_client(source):
    client = Client("mailer", 1)
    source.connect(client)
    source.disconnect(client)
    now = time.monotonic()
    assert not source.retire_if_idle(now, 60.0)
    source.touch(now + 50)  # a Locate counts as use
    assert not source.retire_if_idle(now + 100, 60.0)
    assert source.retire_if_idle(now + 111, 60.0)
    assert source.stopping
    with pytest.raises(ReaderStopped):
        source.connect(Client("mailer", 1))
