"""What one client may hold of a real dispatcher node: streams that never subscribe give their slot
back, a nack cannot hold a message for hours, a group nobody reads loses its reader (Kafka
consumer, threads) until a client comes back and resumes from the commit, and the readers one
service (and all of them) may start on a node are capped."""

from __future__ import annotations

import queue
import threading
import time
import uuid
from typing import Any

import grpc
import pytest

from conveyor import kafka
from conveyor.config import Platform
from conveyor.dispatch import server
from conveyor_sdk.subscriber import Message, Subscriber
from conveyor_sdk.protos import dispatch_pb2 as pb
from conveyor_sdk.protos import dispatch_pb2_grpc as pb_grpc
from conveyor.dispatch.server import DispatchNode
from tests.conftest import eventually
from tests.dispatchkit import (
    MAILER_TOKEN,
    NOTIFIER_TOKEN,
    Ledger,
    nodes,  # noqa: F401 (a fixture)
    setup,  # noqa: F401 (a fixture)
    produce,
    start_node,
)

pytestmark = pytest.mark.integration



class Stream:
    """A Read stream whose frames the test sends by hand (none at all, for an idle one); ``status``
    is how it ended, once it has."""

    def __init__(self, channel: grpc.Channel, token: str | None, first: pb.ReadRequest | None = None,
                 timeout: float | None = None) -> None:
        self._frames: queue.SimpleQueue[pb.ReadRequest | None] = queue.SimpleQueue()
        if first is not None:
            self._frames.put(first)
        metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self.call = pb_grpc.ReaderStub(channel).Read(iter(self._frames.get, None), metadata=metadata,
                                                     timeout=timeout)
        self.messages: queue.SimpleQueue[pb.Message] = queue.SimpleQueue()
        self.status: grpc.StatusCode | None = None
        self.details = ""
        self.ended = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def send(self, **fields: Any) -> None:
        self._frames.put(pb.ReadRequest(**fields))

    def take(self, count: int, timeout: float = 30) -> list[pb.Message]:
        return [self.messages.get(timeout=timeout) for _ in range(count)]

    def close(self) -> None:
        self._frames.put(None)
        self.call.cancel()

    def _read(self) -> None:
        try:
            for frame in self.call:
                for message in frame.messages:
                    self.messages.put(message)
            self.status = grpc.StatusCode.OK
        except grpc.RpcError as exc:
            self.status, self.details = exc.code(), exc.details() or ""
        finally:
            self.ended.set()


def subscribe(topic: str, group: str, credit: int) -> pb.ReadRequest:
    return pb.ReadRequest(subscribe=pb.Subscribe(topic=topic, group=group, credit=credit))


def sample(node: DispatchNode, name: str, **labels: str) -> float:
    return node.metrics.registry.get_sample_value(name, labels) or 0.0


def test_streams_that_never_subscribe_do_not_keep_a_real_client_out(setup, nodes, monkeypatch) -> None:
    slots = 8
    monkeypatch.setattr(server, "MAX_STREAMS", slots)  # the node's limit, small enough to fill
    platform, topic = setup()
    node = start_node(platform)
    nodes.append(node)
    sent = set(produce(platform, topic, 100))
    channel = grpc.insecure_channel(node.advertise)
    try:
        # A valid token but never a first frame, on every slot the node has.
        idle = [Stream(channel, MAILER_TOKEN) for _ in range(slots)]
        time.sleep(0.5)
        eventually(lambda: probe(channel) is grpc.StatusCode.RESOURCE_EXHAUSTED, 4,
                   "the idle streams to take every slot")
        ledger = Ledger()
        with Subscriber(topic, "mailer", lambda m: ledger.delivered(0, m.partition, m.offset, m.value),
                        nodes=[node.advertise], token=MAILER_TOKEN, on_committed=ledger.committed,
                        relocate_every=1.0):
            eventually(lambda: ledger.confirmed_values() >= sent, 90, "the real client to read everything")
        for stream in idle:
            assert stream.ended.wait(30), "the idle stream was never closed"
            assert stream.status is grpc.StatusCode.DEADLINE_EXCEEDED, (stream.status, stream.details)
            assert "no Subscribe within 5 s" in stream.details and "dispatch.subscribe_timeout" in stream.details
        assert sample(node, "conveyor_dispatch_subscribe_timeouts_total") == slots
        # Without a token a stream is refused before the node waits for its first frame.
        anonymous = Stream(channel, token=None, timeout=20)
        assert anonymous.ended.wait(25)
        assert anonymous.status is grpc.StatusCode.UNAUTHENTICATED, (anonymous.status, anonymous.details)
    finally:
        channel.close()


def probe(channel: grpc.Channel) -> grpc.StatusCode:
    """A call that takes a slot only for a moment: UNAUTHENTICATED, or RESOURCE_EXHAUSTED if none is free."""
    try:
        pb_grpc.DiscoveryStub(channel).Locate(pb.LocateRequest(topic="probe", group="probe"),
                                             metadata=(("authorization", "Bearer no-such-token"),), timeout=10)
    except grpc.RpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def test_a_nack_asking_for_hours_is_refused_naming_the_field_and_the_limit(setup, nodes) -> None:
    platform, topic = setup()
    node = start_node(platform)
    nodes.append(node)
    produce(platform, topic, 20)
    group = f"mailer.{uuid.uuid4().hex[:6]}"
    channel = grpc.insecure_channel(node.advertise)
    try:
        greedy = Stream(channel, MAILER_TOKEN, subscribe(topic, group, credit=1), timeout=30)
        held = greedy.take(1)[0]
        ten_hours_ms = 10 * 3600 * 1000
        greedy.send(nacks=[pb.Nack(ids=pb.Ids(partitions=[held.partition], offsets=[held.offset]),
                                   retry_delay_ms=ten_hours_ms)])
        assert greedy.ended.wait(30)
        assert greedy.status is grpc.StatusCode.INVALID_ARGUMENT, (greedy.status, greedy.details)
        assert greedy.details == (f"nacks[0].retry_delay_ms is {ten_hours_ms} ms, above the node's limit of "
                                  "300000 ms (dispatch.max_retry_delay)")
        # The message was not held: the refused stream's messages go to the next client at once.
        patient = Stream(channel, MAILER_TOKEN, subscribe(topic, group, credit=20), timeout=60)
        again = patient.take(20)
        assert (held.partition, held.offset) in {(m.partition, m.offset) for m in again}
        patient.close()
    finally:
        channel.close()


def members(platform: Platform, group: str) -> int:
    """The group's members; asked again while its coordinator moves (NOT_COORDINATOR)."""
    admin = kafka.admin(platform, "central")
    return len(kafka.describe_groups(admin, [group])[group].members)


def test_a_group_without_clients_loses_its_reader_and_a_returning_client_resumes_from_the_commit(
        setup, nodes) -> None:
    platform, topic = setup(reader_idle_timeout="2s")
    node = start_node(platform)
    nodes.append(node)
    group = f"mailer.{uuid.uuid4().hex[:6]}"
    first_half = set(produce(platform, topic, 200))

    def reaped() -> float:
        return sample(node, "conveyor_dispatch_readers_reaped_total", topic=topic, group=group)

    def read(ledger: Ledger, expected: set[bytes]) -> None:
        def handle(message: Message) -> None:
            ledger.delivered(0, message.partition, message.offset, message.value)
        with Subscriber(topic, group, handle, 4, nodes=[node.advertise], token=MAILER_TOKEN,
                        on_committed=ledger.committed, relocate_every=1.0):
            eventually(lambda: ledger.confirmed_values() >= expected, 90, "every message acked and confirmed")
            before = reaped()
            time.sleep(3)  # longer than the idle time: a reader with a client is never reaped
            assert reaped() == before
            assert sample(node, "conveyor_dispatch_readers") == 1

    before = Ledger()
    read(before, first_half)
    assert members(platform, group) == 1
    eventually(lambda: reaped() == 1, 30, "the idle reader to be reaped")
    assert sample(node, "conveyor_dispatch_readers") == 0
    assert f"{topic}/{group}" not in node.health()[1]["readers"]
    # Counted when its slot is freed; its consumer closes and its thread ends just after.
    eventually(lambda: not [t for t in threading.enumerate() if t.name == f"reader-{topic}-{group}"], 30,
               "the reader thread to end")
    eventually(lambda: members(platform, group) == 0, 30, "the reader's consumer to leave the group")
    stale = node.metrics.registry.get_sample_value("conveyor_dispatch_backlog", {"topic": topic, "group": group})
    assert stale is None, "the reaped reader's gauges are gone, not frozen at their last values"

    second_half = set(produce(platform, topic, 200, start=200))
    after = Ledger()
    read(after, second_half)
    assert set(after.values.values()) == second_half, "resumed from the commit: nothing lost, nothing acked again"
    assert sum(after.deliveries.values()) == len(second_half)
    assert set(before.values.values()) == first_half
    eventually(lambda: reaped() == 2, 30, "the second reader to be reaped too")


def locate(channel: grpc.Channel, token: str, topic: str, group: str) -> tuple[grpc.StatusCode, str]:
    try:
        pb_grpc.DiscoveryStub(channel).Locate(pb.LocateRequest(topic=topic, group=group),
                                             metadata=(("authorization", f"Bearer {token}"),), timeout=20)
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


def admitted(channel: grpc.Channel, token: str, topic: str, group: str) -> bool:
    """Whether the node serves the pair; under load its Locate may still time out reading the
    group's membership (UNAVAILABLE) after the reader started."""
    return locate(channel, token, topic, group)[0] is not grpc.StatusCode.RESOURCE_EXHAUSTED


def test_new_groups_past_the_reader_caps_are_refused_until_an_idle_reader_stops(setup, nodes) -> None:
    platform, topic = setup(consumers=("mailer", "notifier"), max_readers=3, max_readers_per_service=2,
                            reader_idle_timeout="3s")
    node = start_node(platform)
    nodes.append(node)
    tag = uuid.uuid4().hex[:6]
    channel = grpc.insecure_channel(node.advertise)
    try:
        # Two groups of mailer held by open streams: they keep their readers however long this takes.
        held = {g: Stream(channel, MAILER_TOKEN, subscribe(topic, f"mailer.{g}{tag}", credit=1)) for g in "ab"}
        eventually(lambda: sample(node, "conveyor_dispatch_readers") == 2, 30, "two readers")
        code, details = locate(channel, MAILER_TOKEN, topic, f"mailer.c{tag}")
        assert code is grpc.StatusCode.RESOURCE_EXHAUSTED, (code, details)
        assert details == ("service mailer already has 2 readers on this node, its limit "
                           "(dispatch.max_readers_per_service); a group without a client (no stream, no Locate) "
                           "loses its reader after dispatch.reader_idle_timeout (3 s): close the streams of "
                           "groups no longer read, use fewer group names, or raise the limit")
        refused = Stream(channel, MAILER_TOKEN, subscribe(topic, f"mailer.c{tag}", credit=1), timeout=20)
        assert refused.ended.wait(25)
        assert refused.status is grpc.StatusCode.RESOURCE_EXHAUSTED, (refused.status, refused.details)
        assert admitted(channel, MAILER_TOKEN, topic, f"mailer.a{tag}"), "a served group is no new reader"
        # Another service's first group fits the node's cap of 3; its second does not.
        assert admitted(channel, NOTIFIER_TOKEN, topic, "notifier")
        code, details = locate(channel, NOTIFIER_TOKEN, topic, f"notifier.{tag}")
        assert code is grpc.StatusCode.RESOURCE_EXHAUSTED, (code, details)
        assert details.startswith("this node already runs 3 readers, its limit (dispatch.max_readers); "), details
        assert sample(node, "conveyor_dispatch_readers_refused_total", service="mailer",
                      limit="dispatch.max_readers_per_service") == 2
        assert sample(node, "conveyor_dispatch_readers_refused_total", service="notifier",
                      limit="dispatch.max_readers") == 1
        assert sample(node, "conveyor_dispatch_readers") == 3
        # A group whose stream closed frees its slot once its reader has been idle long enough.
        held["b"].close()
        eventually(lambda: admitted(channel, MAILER_TOKEN, topic, f"mailer.c{tag}"), 30,
                   "mailer's third group admitted once its idle reader stopped")
        assert sample(node, "conveyor_dispatch_readers_reaped_total", topic=topic, group=f"mailer.b{tag}") == 1
        assert held["a"].status is None, "the group with a client keeps its reader"
        held["a"].close()
    finally:
        channel.close()


def test_one_service_past_its_streams_is_refused_while_another_still_reads(setup, nodes) -> None:
    """mailer holds its two streams (dispatch.max_streams_per_service), even idle ones that never
    subscribed: its third is refused, notifier's first is served."""
    platform, topic = setup(consumers=("mailer", "notifier"), max_streams_per_service=2)
    node = start_node(platform)
    nodes.append(node)
    produce(platform, topic, 10)
    channel = grpc.insecure_channel(node.advertise)
    try:
        held = [Stream(channel, MAILER_TOKEN, subscribe(topic, "mailer", credit=1)), Stream(channel, MAILER_TOKEN)]
        held[0].take(1)
        third = Stream(channel, MAILER_TOKEN, subscribe(topic, "mailer", credit=1), timeout=20)
        assert third.ended.wait(25)
        assert third.status is grpc.StatusCode.RESOURCE_EXHAUSTED, (third.status, third.details)
        assert third.details.startswith("service mailer already has 2 Read streams open on this node, its limit "
                                        "(dispatch.max_streams_per_service)"), third.details
        other = Stream(channel, NOTIFIER_TOKEN, subscribe(topic, "notifier", credit=1))
        assert len(other.take(1)) == 1
        assert sample(node, "conveyor_dispatch_streams_refused_total", service="mailer") == 1
        held[1].close()  # a slot given back is a slot to take again
        eventually(lambda: held[1].ended.is_set(), 30, "the closed stream to end")
        again = Stream(channel, MAILER_TOKEN, subscribe(topic, "mailer.again", credit=1))
        assert len(again.take(1)) == 1
        for stream in (held[0], other, again):
            stream.close()
    finally:
        channel.close()
