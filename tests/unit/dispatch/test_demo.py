"""``conveyor dispatch demo`` ends with its group mailer at the end of the topic, as the watcher
sees it: it reads on while the mailer makes progress, and fails rather than leave records past the
group's commit, which the watcher would judge STOP (Burrow's rules). Without Kafka: the node, the
subscriber and Kafka's answer about the commits are stand-ins."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from typer.testing import CliRunner

import conveyor.dispatch.demo as demo
import conveyor.dispatch.server as server
import conveyor.tls as tls
import conveyor_sdk.subscriber as subscriber
from conveyor import kafka
from conveyor.cli import dispatch_cmd
from conveyor.cli.common import platform_from
from conveyor.dispatch.demo import unread
from conveyor.dispatch.errors import DispatchError

PLATFORM = Path(__file__).resolve().parents[3] / "platform.yaml"


def test_unread_counts_what_each_partition_holds_past_the_commit() -> None:
    watermarks = {0: (0, 100), 1: (0, 50), 2: (40, 70), 3: (0, 0)}
    assert unread(watermarks, {0: 100, 1: 45, 2: -1}) == {1: 5, 2: 30}
    assert unread(watermarks, {0: 100, 1: 50, 2: 70}) == {}


class Reader:
    """A consumer handle of the group as Kafka answers it: ``commits`` and (start, end) per partition."""

    def __init__(self, commits: dict[int, int], watermarks: dict[int, tuple[int, int]],
                 fails: bool = False) -> None:
        self.commits, self.watermarks, self.fails, self.closed = commits, watermarks, fails, False

    def list_topics(self, topic: str, timeout: float) -> Any:
        if self.fails:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        return SimpleNamespace(topics={topic: SimpleNamespace(partitions=dict.fromkeys(self.watermarks))})

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.commits.get(tp.partition, -1001)) for tp in partitions]

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        return self.watermarks[tp.partition]

    def close(self) -> None:
        self.closed = True


def test_unread_records_asks_kafka_for_the_commits_and_ends_and_says_when_it_cannot(
        monkeypatch: pytest.MonkeyPatch) -> None:
    platform = platform_from(PLATFORM)
    reader = Reader({0: 10, 1: 7}, {0: (0, 10), 1: (0, 9), 2: (0, 4)})
    monkeypatch.setattr(kafka, "consumer", lambda *_: reader)
    assert demo.unread_records(platform, "central", "notifications", "mailer") == {1: 2, 2: 4} and reader.closed
    reader = Reader({}, {0: (0, 1)}, fails=True)
    with pytest.raises(DispatchError, match="cannot read the commits of mailer on notifications"):
        demo.unread_records(platform, "central", "notifications", "mailer")
    assert reader.closed


class Mailbox:
    """The topic as the stand-ins share it: how many notifications wait, and how many the
    subscriber hands to the mailer, one every ``every`` seconds until ``stall_after``."""

    def __init__(self, waiting: int, every: float, stall_after: int | None = None) -> None:
        self.waiting = waiting
        self.every = every
        self.stall_after = waiting if stall_after is None else stall_after
        self.delivered = 0


@pytest.fixture
def run_demo(monkeypatch: pytest.MonkeyPatch):
    """Run the command over a Mailbox; Kafka answers ``left`` for the commits after the node closed."""

    def invoke(box: Mailbox, left: dict[int, int], *args: str) -> Any:
        class Node:
            cluster, advertise = "central", "127.0.0.1:0"

            def __init__(self, *_: Any, **__: Any) -> None:
                self.metrics = SimpleNamespace(registry=SimpleNamespace(
                    get_sample_value=lambda *_: box.waiting - box.delivered))

            def start(self) -> None:
                pass

            def close(self, grace: float) -> None:
                pass

        class Subscriber:
            def __init__(self, topic: str, group: str, handler: Any, *_: Any, **__: Any) -> None:
                self.handler, self.error = handler, None
                self.stopping = threading.Event()
                self.thread = threading.Thread(target=self._deliver)

            def _deliver(self) -> None:
                while box.delivered < box.stall_after and not self.stopping.wait(box.every):
                    self.handler(None)
                    box.delivered += 1

            def __enter__(self) -> Subscriber:
                self.thread.start()
                return self

            def __exit__(self, *_: object) -> None:
                self.stopping.set()
                self.thread.join()

        monkeypatch.setattr(server, "DispatchNode", Node)
        monkeypatch.setattr(subscriber, "Subscriber", Subscriber)
        monkeypatch.setattr(demo, "produce_notifications", lambda *_: None)
        monkeypatch.setattr(demo, "unread_records", lambda *_: left, raising=False)
        monkeypatch.setattr(tls, "trusted_pem", lambda *_: b"")
        monkeypatch.setattr(grpc, "ssl_channel_credentials", lambda *_: None)
        return CliRunner().invoke(dispatch_cmd.app, ["demo", "--platform", str(PLATFORM), "--messages",
                                                     str(box.waiting), "--handle-ms", "0", *args])
    return invoke


def test_a_mailer_slower_than_the_patience_still_reads_to_the_end(run_demo) -> None:
    started = time.monotonic()
    result = run_demo(Mailbox(8, every=0.4), {}, "--seconds", "2.5")
    assert result.exit_code == 0, result.output
    assert "mailer handled 8 notifications" in result.output and time.monotonic() - started > 2.5
    assert "mailer committed every partition of notifications to its end (lag 0)" in result.output


def test_a_mailer_that_stops_with_notifications_unread_fails_the_demo(run_demo) -> None:
    result = run_demo(Mailbox(5, every=0.05, stall_after=2), {0: 2, 2: 1}, "--seconds", "1")
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, DispatchError)
    assert "mailer stopped with 3 notification(s) past its commit (partition 0: 2, partition 2: 1)" in str(
        result.exception)
    assert "STOP" in str(result.exception)
