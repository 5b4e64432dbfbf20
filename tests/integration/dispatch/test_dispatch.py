"""The dispatcher against real brokers: 30 clients on 3 partitions, statuses, redelivery, dead
letters, takeover from the commit metadata, back-pressure, discovery, metrics."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

import grpc
import httpx
import pytest

from conveyor import kafka
from conveyor.config import Platform
from conveyor.dispatch.ackcodec import decode
from conveyor_sdk.contract import ContractVersion
from conveyor_sdk.subscriber import Message, Retry, Subscriber, SubscriberError, locate
from conveyor_sdk.protos import dispatch_pb2 as pb
from conveyor_sdk.protos import dispatch_pb2_grpc as pb_grpc
from conveyor.dispatch.server import DispatchNode
from tests.conftest import eventually, read_topic
from tests.dispatchkit import (
    MAILER_TOKEN,
    NOTIFIER_TOKEN,
    Ledger,
    committed_offsets,
    end_offsets,
    nodes,  # noqa: F401 (a fixture)
    setup,  # noqa: F401 (a fixture)
    produce,
    start_node,
    thirty_clients_read_everything,
)

pytestmark = pytest.mark.integration



def subscriber(node: DispatchNode, topic: str, group: str, ledger: Ledger, client: int,
               handler: Callable[[Message], object] | None = None, **options: Any) -> Subscriber:
    def handle(message: Message) -> object:
        ledger.delivered(client, message.partition, message.offset, message.value)
        return handler(message) if handler else None
    return Subscriber(topic, group, handle, nodes=[node.advertise], token=MAILER_TOKEN,
                      on_committed=ledger.committed, relocate_every=1.0, **options)


def test_thirty_clients_get_every_message_and_every_ack_is_committed(setup, nodes) -> None:
    platform, topic = setup()
    node = start_node(platform)
    nodes.append(node)
    sent = set(produce(platform, topic, 3000))
    group = f"mailer.{uuid.uuid4().hex[:6]}"
    thirty_clients_read_everything(sent, lambda i, ledger: subscriber(node, topic, group, ledger, i), 120)
    commits = committed_offsets(platform, topic, group)
    assert {p: c[0] for p, c in commits.items()} == end_offsets(platform, topic)
    assert all(decode(metadata).acked == () for _, metadata in commits.values())


class RawStream:
    """A Read stream driven by hand: what a misbehaving or slow client does."""

    def __init__(self, node: DispatchNode, topic: str, group: str, credit: int, token: str = MAILER_TOKEN) -> None:
        import queue

        self._requests: queue.SimpleQueue[pb.ReadRequest | None] = queue.SimpleQueue()
        self._requests.put(pb.ReadRequest(subscribe=pb.Subscribe(topic=topic, group=group, credit=credit)))
        self._channel = grpc.insecure_channel(node.advertise)
        self.responses = pb_grpc.ReaderStub(self._channel).Read(iter(self._requests.get, None),
                                                                  metadata=(("authorization", f"Bearer {token}"),))

    def send(self, **fields: Any) -> None:
        self._requests.put(pb.ReadRequest(**fields))

    def collect(self, into: list[pb.Message]) -> None:
        """Append every message received to ``into``, in a thread of its own, until closed."""
        def run() -> None:
            try:
                for frame in self.responses:
                    into.extend(frame.messages)
            except grpc.RpcError:
                pass  # closed by the test
        threading.Thread(target=run, daemon=True).start()

    def messages(self, count: int) -> list[pb.Message]:
        got: list[pb.Message] = []
        while len(got) < count:
            got.extend(next(self.responses).messages)
        return got

    def close(self) -> None:
        self._requests.put(None)
        self._channel.close()


def ids(messages: list[pb.Message]) -> pb.Ids:
    return pb.Ids(partitions=[m.partition for m in messages], offsets=[m.offset for m in messages])


def status_of(call: Callable[[], object]) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as raised:
        call()
    return raised.value.code()


def test_bad_input_gets_a_status_that_says_what_is_wrong(setup, nodes) -> None:
    platform, topic = setup()
    node = start_node(platform)
    nodes.append(node)
    channel = grpc.insecure_channel(node.advertise)
    discovery = pb_grpc.DiscoveryStub(channel)

    def located(topic: str, group: str, token: str) -> Callable[[], object]:
        request = pb.LocateRequest(topic=topic, group=group)
        return lambda: discovery.Locate(request, metadata=(("authorization", f"Bearer {token}"),), timeout=30)

    def read(frames: list[pb.ReadRequest], token: str = MAILER_TOKEN) -> Callable[[], object]:
        reader = pb_grpc.ReaderStub(channel)
        return lambda: list(reader.Read(iter(frames), metadata=(("authorization", f"Bearer {token}"),), timeout=30))

    subscribe = pb.ReadRequest(subscribe=pb.Subscribe(topic=topic, group="mailer", credit=1))
    assert status_of(located(topic, "mailer", "wrong-token")) is grpc.StatusCode.UNAUTHENTICATED
    assert status_of(located("no-such-topic", "mailer", MAILER_TOKEN)) is grpc.StatusCode.NOT_FOUND
    assert status_of(located(topic, "mailer", NOTIFIER_TOKEN)) is grpc.StatusCode.PERMISSION_DENIED
    assert status_of(located(topic, "lake", MAILER_TOKEN)) is grpc.StatusCode.NOT_FOUND
    assert status_of(read([subscribe], "wrong-token")) is grpc.StatusCode.UNAUTHENTICATED
    assert status_of(read([pb.ReadRequest(credit=5)])) is grpc.StatusCode.INVALID_ARGUMENT
    assert status_of(read([subscribe, pb.ReadRequest(acks=pb.Ids(partitions=[0], offsets=[]))])) \
        is grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(SubscriberError) as refused:
        locate([node.advertise], topic, "mailer", NOTIFIER_TOKEN)
    assert refused.value.code is grpc.StatusCode.PERMISSION_DENIED
    assert "not among the consumers" in str(refused.value)
    channel.close()


def test_a_client_that_stops_reading_holds_only_its_credit_and_the_deadline_frees_it(setup, nodes) -> None:
    platform, topic = setup(ack_deadline="2s")
    node = start_node(platform)
    nodes.append(node)
    produce(platform, topic, 300)
    group = f"mailer.{uuid.uuid4().hex[:6]}"
    stuck = RawStream(node, topic, group, credit=7)
    held = stuck.messages(7)
    reader = node.reader(topic, group)
    eventually(lambda: len(reader.partitions()) == 3, 60, "the partitions assigned")
    assert len(held) == 7 and all(m.attempt == 1 for m in held)
    ledger = Ledger()
    sub = subscriber(node, topic, group, ledger, 1)
    with sub:
        eventually(lambda: len(ledger.confirmed) == 300, 90, "the other client to get everything")
    held_ids = {(m.partition, m.offset) for m in held}
    assert held_ids <= set(ledger.deliveries), "the stuck client's messages went to the other one"
    stuck.send(acks=ids(held))  # late acks of messages acked since: ignored and counted
    eventually(lambda: (node.metrics.registry.get_sample_value(
        "conveyor_dispatch_ignored_acks_total", {"topic": topic, "group": group, "reason": "already acked"}) or 0)
        + (node.metrics.registry.get_sample_value(
            "conveyor_dispatch_ignored_acks_total", {"topic": topic, "group": group, "reason": "below committed"}) or 0)
        == 7, 30, "the late acks counted as ignored")
    assert node.metrics.registry.get_sample_value(
        "conveyor_dispatch_ack_deadline_passed_total", {"topic": topic, "group": group}) == 7
    stuck.close()


def test_nacks_redeliver_and_poison_messages_go_to_the_dead_letter_topic(setup, nodes) -> None:
    platform, topic = setup(max_attempts=3)
    node = start_node(platform)
    nodes.append(node)
    sent = set(produce(platform, topic, 100))
    poison = {b"13", b"42"}
    attempts: dict[bytes, list[int]] = {}

    def handler(message: Message) -> None:
        attempts.setdefault(message.value, []).append(message.attempt)
        if message.value in poison:
            raise RuntimeError("cannot handle this one")
        if message.value == b"7" and message.attempt == 1:
            raise Retry(0.5)

    ledger = Ledger()
    group = f"mailer.{uuid.uuid4().hex[:6]}"
    dead_topic = f"{topic}.{group}.dead"
    with subscriber(node, topic, group, ledger, 1, handler, concurrency=4):
        eventually(lambda: committed_offsets(platform, topic, group).get(0, (-1,))[0] >= 0
                   and {p: c[0] for p, c in committed_offsets(platform, topic, group).items()}
                   == end_offsets(platform, topic), 90, "everything acked or dead-lettered")
    assert attempts[b"7"] == [1, 2]
    assert all(attempts[v] == [1, 2, 3] for v in poison)
    assert ledger.confirmed_values() == sent - poison
    dead = read_topic(platform, "central", dead_topic)
    assert sorted(m.value() for m in dead) == sorted(poison)
    headers = dict(dead[0].headers())
    assert headers["conveyor-dead-letter-reason"] == b"nacked"
    assert headers["conveyor-dead-letter-attempts"] == b"3"
    assert headers["conveyor-dead-letter-topic"] == topic.encode()
    assert headers["conveyor-dead-letter-group"] == group.encode()
    assert node.metrics.registry.get_sample_value(
        "conveyor_dispatch_dead_lettered_total", {"topic": topic, "group": group}) == 2
    admin = kafka.admin(platform, "central")
    admin.delete_topics([dead_topic])[dead_topic].result()


def test_a_node_taking_over_never_redelivers_what_was_acked(setup, nodes) -> None:
    platform, topic = setup()
    first = start_node(platform)
    sent = set(produce(platform, topic, 600))
    group = f"mailer.{uuid.uuid4().hex[:6]}"
    stream = RawStream(first, topic, group, credit=200)
    got = stream.messages(200)
    odd = [m for m in got if m.offset % 2]
    stream.send(acks=ids(odd), credit=len(odd))
    confirmed: set[tuple[int, int]] = set()
    while len(confirmed) < len(odd):
        frame = next(stream.responses)
        confirmed.update(zip(frame.committed.partitions, frame.committed.offsets))
    assert confirmed == {(m.partition, m.offset) for m in odd}
    stream.close()
    first.close(grace=1)
    commits = committed_offsets(platform, topic, group)
    for partition, (offset, metadata) in commits.items():
        recorded = decode(metadata)
        expected = {m.offset for m in odd if m.partition == partition and m.offset > offset}
        assert set(recorded.acked) == expected, f"partition {partition}: acks above {offset} in the metadata"

    second = start_node(platform)
    nodes.append(second)
    ledger = Ledger()
    with subscriber(second, topic, group, ledger, 1, concurrency=8):
        eventually(lambda: ledger.confirmed_values() | {m.value for m in odd} >= sent, 90, "the rest acked")
    again = confirmed & set(ledger.deliveries)
    assert not again, f"acked and committed before the takeover, delivered again: {sorted(again)[:10]}"


def test_two_nodes_share_the_partitions_and_discovery_names_both(setup, nodes) -> None:
    platform, topic = setup()
    a, b = start_node(platform), start_node(platform)
    nodes.extend([a, b])
    group = f"mailer.{uuid.uuid4().hex[:6]}"
    ledger = Ledger()
    subs = [subscriber(a, topic, group, ledger, i) for i in range(3)]
    for sub in subs:
        sub._nodes = [a.advertise, b.advertise]  # both seeds, as a deployment lists them
        sub.start()
    try:
        def split() -> bool:
            held = [set(a.reader(topic, group).partitions()), set(b.reader(topic, group).partitions())]
            return all(held) and held[0] | held[1] == {0, 1, 2} and not held[0] & held[1]
        eventually(split, 60, "the partitions split between the two nodes")
        sent = set(produce(platform, topic, 900))  # now both nodes serve some of them
        eventually(lambda: set(locate([a.advertise], topic, group, MAILER_TOKEN)) == {a.advertise, b.advertise},
                   30, "discovery to name both nodes")
        eventually(lambda: ledger.confirmed_values() >= sent, 90, "every message acked")
    finally:
        for sub in subs:
            sub.stop()
    served = {node.advertise: node.metrics.registry.get_sample_value(
        "conveyor_dispatch_delivered_total", {"topic": topic, "group": group}) or 0 for node in (a, b)}
    assert all(served.values()), f"both nodes delivered: {served}"


def test_acks_never_outgrow_the_metadata_limit_the_fetch_waits_instead(setup, nodes) -> None:
    from conveyor.dispatch.ackcodec import max_length

    limit = 64
    platform, topic = setup(metadata_max_bytes=limit, prefetch=100_000)
    node = start_node(platform)
    nodes.append(node)
    sent = set(produce(platform, topic, 3000))
    group = f"mailer.{uuid.uuid4().hex[:6]}"
    stream = RawStream(node, topic, group, credit=5000)
    received: list[pb.Message] = []
    stream.collect(received)
    # The widest span of offsets whose acks fit the limit in any mix: the node stays within it.
    span = max(s for s in range(1, 2000) if max_length(10_000, s, s) <= limit)
    eventually(lambda: node.metrics.registry.get_sample_value(
        "conveyor_dispatch_paused_partitions", {"topic": topic, "group": group}) == 3
        and {m.partition for m in received} == {0, 1, 2}, 60, "every partition paused")
    # Offset 0 of each partition (a fresh topic) stays unacked: nothing can be committed past it.
    assert all(m.offset <= span for m in received), "delivered further ahead than the metadata can record"
    assert len(received) < len(sent)
    held = [m for m in list(received) if m.offset != 0]
    stream.send(acks=ids(held), credit=len(held))
    eventually(lambda: all(decode(md).acked for _, md in committed_offsets(platform, topic, group).values()),
               30, "the acks above offset 0 committed in the metadata")
    assert all(len(md) <= limit for _, md in committed_offsets(platform, topic, group).values())
    acked = {(m.partition, m.offset) for m in held}
    while len(acked) < len(sent):
        fresh = [m for m in list(received) if (m.partition, m.offset) not in acked]
        stream.send(acks=ids(fresh), credit=len(fresh))
        acked.update((m.partition, m.offset) for m in fresh)
        eventually(lambda: len(received) > len(acked) or len(acked) == len(sent), 60, "more deliveries")
    assert {p: c[0] for p, c in _settled(platform, topic, group).items()} == end_offsets(platform, topic)
    stream.close()


def _settled(platform: Platform, topic: str, group: str) -> dict[int, tuple[int, str]]:
    ends = end_offsets(platform, topic)
    eventually(lambda: {p: c[0] for p, c in committed_offsets(platform, topic, group).items()} == ends, 30,
               "the commit to reach the end of every partition")
    return committed_offsets(platform, topic, group)


def test_metrics_and_health_over_http(setup, nodes) -> None:
    platform, topic = setup()
    node = start_node(platform)
    nodes.append(node)
    produce(platform, topic, 50)
    ledger = Ledger()
    with subscriber(node, topic, "mailer", ledger, 1):
        eventually(lambda: len(ledger.confirmed) == 50, 60, "50 acks committed")
        base = f"http://{node.host}:{node.metrics_port}"
        health = httpx.get(f"{base}/healthz").json()
        assert health["status"] == "ok" and health["readers"][f"{topic}/mailer"]["partitions"] == [0, 1, 2]
        text = httpx.get(f"{base}/metrics").text
    for name in ("conveyor_dispatch_backlog", "conveyor_dispatch_in_flight", "conveyor_dispatch_clients_connected",
                 "conveyor_dispatch_redelivered_total", "conveyor_dispatch_dead_lettered_total",
                 "conveyor_dispatch_delivery_latency_seconds_bucket", "conveyor_dispatch_acked_total"):
        assert f'{name}{{group="mailer",' in text or f"{name}{{" in text, name
    assert f'conveyor_dispatch_acked_total{{group="mailer",topic="{topic}"}} 50.0' in text


def test_the_standard_grpc_health_and_reflection_services_answer(setup, nodes) -> None:
    """What Kubernetes' gRPC probe and grpcurl ask: Health/Check, and the service list by reflection."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    platform, _ = setup()
    node = start_node(platform)
    nodes.append(node)
    with grpc.insecure_channel(node.advertise) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "conveyor.dispatch.v1.Reader"):
            answer = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING, service
        listing = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10)
        names = {s.name for s in next(listing).list_services_response.service}
    assert {"conveyor.dispatch.v1.Discovery", "conveyor.dispatch.v1.Reader", "grpc.health.v1.Health"} <= names
    node.close(grace=1)
    nodes.remove(node)
    with grpc.insecure_channel(node.advertise) as channel, pytest.raises(grpc.RpcError):
        health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=3)


def test_the_asyncio_subscriber_acks_on_return_and_nacks_on_raise(setup, nodes) -> None:
    import asyncio

    from conveyor_sdk.subscriber_aio import AsyncSubscriber

    platform, topic = setup()
    node = start_node(platform)
    nodes.append(node)
    sent = set(produce(platform, topic, 300))
    ledger = Ledger()

    async def handler(message: Message) -> None:
        ledger.delivered(0, message.partition, message.offset, message.value)
        await asyncio.sleep(0.001)
        if message.value == b"5" and message.attempt == 1:
            raise RuntimeError("first try fails")

    async def run() -> None:
        async with AsyncSubscriber(topic, "mailer", handler, 10, nodes=[node.advertise], token=MAILER_TOKEN,
                                   on_committed=ledger.committed):
            while ledger.confirmed_values() < sent:
                await asyncio.sleep(0.1)

    asyncio.run(asyncio.wait_for(run(), 90))
    five = next(i for i, v in ledger.values.items() if v == b"5")
    assert ledger.deliveries[five] == 2
    assert sum(ledger.deliveries.values()) == len(sent) + 1


def test_each_message_names_the_contract_version_it_was_checked_against(setup, nodes) -> None:
    """The gateway's contract header travels with the record (the replicator copies it) and reaches
    the reader, who parses each value by that version; a record written around the gateway has none."""
    platform, topic = setup()
    node = start_node(platform)
    nodes.append(node)
    producer = kafka.producer(platform, "central", "dispatch-test")
    versions = {b"old": ContractVersion(11, 1), b"new": ContractVersion(12, 2), b"direct": None}
    for value, version in versions.items():
        producer.produce(topic, value, key=value, headers=[version.header()] if version else None)
    assert producer.flush(30) == 0
    seen: dict[bytes, ContractVersion | None] = {}
    sub = Subscriber(topic, "mailer", lambda m: seen.__setitem__(m.value, m.contract), nodes=[node.advertise],
                     token=MAILER_TOKEN)
    sub.start()
    try:
        eventually(lambda: len(seen) == len(versions), 60, "every message delivered")
    finally:
        sub.stop()
    assert seen == versions
