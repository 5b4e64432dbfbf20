"""Round-robin within credit, ack confirmation after commits, ignored ids; access rules; discovery
from the group's membership; the client's frames; the generated protobuf code is current."""

from __future__ import annotations

import filecmp
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import MemberAssignment, MemberDescription

from conveyor.config import parse_platform
from conveyor.dispatch.access import Access
from conveyor_sdk.subscriber import Message, Outgoing
from conveyor.dispatch.discovery import ServingNode, serving_nodes
from conveyor.dispatch.errors import ForeignGroup, UnknownGroup, UnknownTopic
from conveyor.dispatch.fanout import NOT_OWNED, Client, Fanout
from conveyor.dispatch.metrics import NodeMetrics
from conveyor.dispatch.partition import Limits, PartitionQueue, Record
from conveyor_sdk.protos import dispatch_pb2 as pb
from conveyor.dispatch.reader import CLIENT_ID_PREFIX
from conveyor.auth import Forbidden, Unauthenticated

LIMITS = Limits(ack_deadline=10.0, max_attempts=3)


def fanout(per_partition: int = 10, batch: int = 500) -> tuple[Fanout, NodeMetrics]:
    metrics = NodeMetrics()
    f = Fanout(metrics.reader("t", "g"), batch=batch, max_credit=100)
    for p in range(3):
        q: PartitionQueue[Client] = PartitionQueue(None, LIMITS)
        for offset in range(per_partition):
            q.add(offset, Record(None, b"v", (("h", b"1"),), 0))
        f.assign(p, q)
    return f, metrics


def drain(client: Client) -> list[pb.ReadResponse]:
    frames = []
    while not client.outbox.empty():
        frames.append(client.outbox.get())
    return frames


def test_messages_spread_round_robin_and_never_beyond_credit() -> None:
    f, _ = fanout()
    clients = [Client("mailer", credit=4) for _ in range(5)]
    for client in clients:
        f.add_client(client)
    assert f.dispatch(0.0, 0.0) == 20
    got = [sum(len(frame.messages) for frame in drain(c)) for c in clients]
    assert got == [4] * 5 and all(c.credit == 0 for c in clients)
    f.give_credit(clients[0], 1000)
    assert clients[0].credit == 100, "credit is capped by max_credit"
    assert f.dispatch(0.0, 0.0) == 10


def test_frames_carry_the_message_and_respect_the_batch_size() -> None:
    f, _ = fanout(batch=7)
    client = Client("mailer", credit=30)
    f.add_client(client)
    f.dispatch(0.0, 0.0)
    frames = drain(client)
    assert [len(frame.messages) for frame in frames] == [7, 7, 7, 7, 2]
    message = frames[0].messages[0]
    assert not message.HasField("key") and message.value == b"v" and message.attempt == 1
    assert [(h.key, h.value) for h in message.headers] == [("h", b"1")]


def test_acks_are_confirmed_to_their_client_only_after_the_commit() -> None:
    f, metrics = fanout()
    a, b = Client("mailer", credit=3), Client("mailer", credit=3)
    f.add_client(a)
    f.add_client(b)
    f.dispatch(0.0, 0.0)
    sent = [m for frame in drain(a) for m in frame.messages]
    f.ack(a, pb.Ids(partitions=[m.partition for m in sent], offsets=[m.offset for m in sent]))
    assert a.outbox.empty(), "nothing is confirmed before a commit"
    points, snapshot = f.commit_points()
    f.commit_failed(snapshot)
    points, snapshot = f.commit_points()
    f.committed(points, snapshot)
    [confirmation] = drain(a)
    assert sorted(zip(confirmation.committed.partitions, confirmation.committed.offsets)) == \
        sorted((m.partition, m.offset) for m in sent)
    assert b.outbox.empty() or not any(frame.HasField("committed") for frame in drain(b))
    assert f.commit_points() == ([], {}), "nothing changed since"
    assert metrics.registry.get_sample_value("conveyor_dispatch_acked_total", {"topic": "t", "group": "g"}) == 3


def test_ids_of_partitions_not_served_here_are_ignored_and_counted() -> None:
    f, metrics = fanout()
    client = Client("mailer", credit=1)
    f.add_client(client)
    f.revoke(2)
    f.ack(client, pb.Ids(partitions=[2, 7], offsets=[0, 0]))
    f.nack(client, pb.Nack(ids=pb.Ids(partitions=[0], offsets=[5])), 0.0)
    sample = metrics.registry.get_sample_value
    assert sample("conveyor_dispatch_ignored_acks_total", {"topic": "t", "group": "g", "reason": NOT_OWNED}) == 2
    assert sample("conveyor_dispatch_ignored_acks_total",
                  {"topic": "t", "group": "g", "reason": "never delivered"}) == 1


def test_a_client_that_leaves_hands_its_messages_to_the_others() -> None:
    f, metrics = fanout(per_partition=1)
    a, b = Client("mailer", credit=3), Client("mailer", credit=0)
    f.add_client(a)
    f.add_client(b)
    f.dispatch(0.0, 0.0)
    f.remove_client(a, 1.0)
    f.give_credit(b, 3)
    assert f.dispatch(1.0, 0.0) == 3
    assert all(m.attempt == 2 for frame in drain(b) for m in frame.messages)
    assert metrics.registry.get_sample_value("conveyor_dispatch_redelivered_total", {"topic": "t", "group": "g"}) == 3


PLATFORM = parse_platform({
    "clusters": {"central": {"role": "read", "brokers": 1}},
    "topics": {"notifications": {"partitions": 3, "consumers": ["mailer", "pusher"]}},
    "services": {
        "mailer": {"token_sha256": "8a3b98ee6ca8a1e69252cf4b1d1fc0e6a7de891813d1c3b022cc2b7168adb6d5"},
        "pusher": {"token_sha256": "0" * 64},
        "notifier": {"token_sha256": "78f9993148b6ca52f1bdacced8c1478e67e5a6646cbb7df40771747f43e47964"},
    },
})
MAILER, NOTIFIER = "Bearer demo-mailer-token", "Bearer demo-notifier-token"


@pytest.mark.parametrize(("authorization", "topic", "group", "error"), [
    (None, "notifications", "mailer", Unauthenticated),
    ("Bearer nope", "notifications", "mailer", Unauthenticated),
    (MAILER, "orders", "mailer", UnknownTopic),
    (NOTIFIER, "notifications", "notifier", Forbidden),
    (MAILER, "notifications", "lake", UnknownGroup),
    (MAILER, "notifications", "mailer.", UnknownGroup),
    (MAILER, "notifications", "pusher", ForeignGroup),
    (MAILER, "notifications", "pusher.batch", ForeignGroup),
], ids=["no-token", "bad-token", "unknown-topic", "not-a-consumer", "unknown-group", "empty-suffix",
        "foreign-group", "foreign-named-group"])
def test_access_refusals(authorization: str | None, topic: str, group: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        Access(PLATFORM, "central").check(authorization, topic, group)


@pytest.mark.parametrize("group", ["mailer", "mailer.batch"])
def test_a_consumer_reads_as_its_own_groups(group: str) -> None:
    assert Access(PLATFORM, "central").check(MAILER, "notifications", group) == "mailer"


def test_discovery_reads_dispatcher_addresses_from_the_group_membership() -> None:
    def member(client_id: str, *partitions: tuple[str, int]) -> MemberDescription:
        assignment = MemberAssignment([TopicPartition(t, p) for t, p in partitions])
        return MemberDescription(f"m-{client_id}", client_id, "/127.0.0.1", assignment)

    members = [
        member(CLIENT_ID_PREFIX + "10.0.0.1:18090", ("notifications", 2), ("notifications", 0), ("other", 1)),
        member(CLIENT_ID_PREFIX + "10.0.0.2:18090", ("other", 0)),
        member("a-plain-consumer", ("notifications", 1)),
    ]
    assert serving_nodes(members, "notifications") == [ServingNode("10.0.0.1:18090", (0, 2))]


def test_the_client_coalesces_acks_and_nacks_into_one_frame_with_their_credit() -> None:
    out = Outgoing()
    assert not out
    for offset in range(3):
        out.ack(Message("t", 0, offset, None, b"", (), 0, 1))
    out.nack(Message("t", 1, 9, None, b"", (), 0, 1), 0.25)
    out.nack(Message("t", 2, 4, None, b"", (), 0, 1), 0.25)
    frame = out.take()
    assert frame.credit == 5 and list(frame.acks.offsets) == [0, 1, 2]
    [nack] = frame.nacks
    assert nack.retry_delay_ms == 250 and list(nack.ids.partitions) == [1, 2]
    assert not out and out.take().credit == 0


def test_the_generated_grpc_code_matches_the_proto(tmp_path: Path) -> None:
    from conveyor_sdk.protos import generate

    for path in generate.generate(tmp_path):
        committed = generate.HERE / path.name
        assert filecmp.cmp(path, committed, shallow=False), f"{path.name} is stale: run " \
            "python -m conveyor_sdk.protos.generate"


def test_records_go_out_in_frames_a_grpc_client_takes():
    from conveyor.dispatch.fanout import FRAME_BYTES, _by_size
    from conveyor.dispatch.partition import Handout, Record

    def handout(size: int) -> tuple[int, Handout]:
        return 0, Handout(offset=0, record=Record(b"k", b"v" * size, (("h", b"x"),), 0), attempt=1)

    big = [handout(997_000) for _ in range(7)]
    frames = _by_size(big)
    assert [len(f) for f in frames] == [3, 3, 1]
    assert all(sum(len(h.record.value) for _, h in f) <= FRAME_BYTES for f in frames)
    assert _by_size([handout(FRAME_BYTES * 2)]) == [[handout(FRAME_BYTES * 2)]]  # one record always goes
    assert [len(f) for f in _by_size([handout(10) for _ in range(500)])] == [500]
