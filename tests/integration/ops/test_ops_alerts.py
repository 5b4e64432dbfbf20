"""Every alert about consumer groups, the offset manager and the brokers, through the one path
alerts take: a real Prometheus scrapes the brokers' JMX exporters and the watch service (`conveyor
ops watch`), which judges the real cluster's consumer groups and exports what it found; Prometheus
evaluates `conveyor ops rules` over both, and a real Alertmanager holds the alert and routes it to
ops.notify_url. Each condition is made on the cluster as it happens in the field:

- a consumer that falls behind (WARN) and one that stops committing while records arrive (STOP);
- offsets reset backwards (`kafka-consumer-groups --reset-offsets`): a rewind on one partition, a
  reset to the log start on the other, and no second alert for the group's REWIND status;
- a committed offset retention deleted past, then reset to the end (records skipped), and one
  beyond the log's end;
- a group's offsets deleted by `kafka-consumer-groups --delete-offsets` while it keeps others:
  the offset fetch answers none (the offset manager lost them), and no second alert for its ERR;
- a compacted topic whose cleaner is held back, filled with dirty records, then let go;
- a central broker that hangs (SIGSTOP: alive, its connections open, answering nothing, as in a
  long GC pause or a stuck disk), then answers again (SIGCONT): KafkaBrokerDown once it has held
  (ops.broker_down_hold), posted to ops.notify_url and silenced by `conveyor ops silence` (and no
  other alert with it), KafkaLeaderChanges for the leaders that moved away, and
  KafkaUnderReplicatedPartitions pending (it holds 5 minutes); answering, the broker rejoins every
  ISR and its alert resolves. (The controller takes a fenced broker out of the ISRs itself, so the
  leaders' ISR shrink count does not move.) A hang rather than a kill: a restarted broker
  recovers its logs first, which on a loaded machine took minutes the alerts do not need.

The rules themselves are tested on series in tests/unit/ops/test_watcher_rules.py; here each one
that reaches Alertmanager proves the series the rules read are there, under the names they read:
the watcher's, and the exporters' as Prometheus labels them. The hung-broker test also reads the
brokers' figures as the watcher does, from Prometheus's latest samples.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

from conveyor import kafka
from conveyor.config import Platform
from conveyor.kafka_tools import KafkaTools
from conveyor.ops.alertmanager import AlertmanagerClient, ManagedAlert
from conveyor.ops.prometheus import PrometheusClient
from conveyor.ops.watch import ClusterReport, ClusterWatch
from conveyor.runtime import processes
from conveyor.runtime.local import LocalPlatform
from tests.conftest import eventually
from tests.opskit import PROMETHEUS, WebhookReceiver, monitored
from tests.systemkit import conveyor

pytestmark = pytest.mark.integration
CONSUMER_GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"


class Stack:
    def __init__(self, path: Path, platform: Platform, alertmanager: AlertmanagerClient, prometheus: str,
                 hook: WebhookReceiver) -> None:
        self.path, self.platform, self.alertmanager = path, platform, alertmanager
        self.prometheus, self.hook = prometheus, hook

    def active(self, name: str, state: str = "active", **labels: str) -> ManagedAlert | None:
        """The alert ``name`` with these labels in Alertmanager, when it is in ``state``."""
        return next((a for a in self.alertmanager.alerts() if a.name == name and a.state == state
                     and all(a.labels.get(k) == v for k, v in labels.items())), None)

    def await_alert(self, name: str, timeout: float = 60, during: Callable[[], None] = lambda: None,
                    **labels: str) -> ManagedAlert:
        """The alert once Alertmanager holds it; ``during`` runs between looks (traffic, commits)."""
        def look() -> ManagedAlert | None:
            during()
            return self.active(name, **labels)
        return eventually(look, timeout, f"{name} {labels} in Alertmanager", interval=0.5)

    def prometheus_alerts(self, **labels: str) -> set[str]:
        """The alerts Prometheus has pending or firing with these labels."""
        found = httpx.get(f"{self.prometheus}/api/v1/alerts", timeout=10).json()["data"]["alerts"]
        return {a["labels"]["alertname"] for a in found if all(a["labels"].get(k) == v for k, v in labels.items())}

    def await_watched(self, group: str, topic: str, partitions: int) -> None:
        """Until Prometheus holds the watcher's status of every partition of ``topic`` for ``group``:
        a move made after that is one the watcher saw the group before."""
        query = f'conveyor_ops_partition_status{{group="{group}",topic="{topic}"}}'

        eventually(lambda: len(self.query(query)) == partitions, 60, f"the watcher's status of {group} on {topic} in Prometheus", interval=0.5)

    def query(self, expr: str) -> list[tuple[dict[str, str], str]]:
        """Prometheus's answer to ``expr`` now: each series' labels and value."""
        answer = httpx.get(f"{self.prometheus}/api/v1/query", params={"query": expr}, timeout=10).json()
        return [(r["metric"], r["value"][1]) for r in answer["data"]["result"]]

    def notified(self, name: str, **labels: str) -> bool:
        return any(a["labels"]["alertname"] == name and all(a["labels"].get(k) == v for k, v in labels.items())
                   for body in self.hook.bodies for a in body["alerts"])


@pytest.fixture(scope="module")
def stack(platform_data: dict[str, Any], platform_file: Path, local_platform,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Windows of 3 one-second rounds, a dirty ratio above 90 % held 3 s is a stalled compaction,
    and KafkaBrokerDown pages after 5 s of silence (the platform's default: a minute)."""
    hook = WebhookReceiver()
    try:
        with monitored(platform_data, platform_file, tmp_path_factory.mktemp("alerts"), notify_url=hook.url,
                       window=3, offsets_dirty_warn=90, offsets_dirty_hold="3s", broker_down_hold="5s") as (path, variant):
            client = AlertmanagerClient(variant.ops.alertmanager_url)
            try:
                prometheus = f"http://127.0.0.1:{platform_data['runtime']['base_port'] + PROMETHEUS}"
                yield Stack(path, variant, client, prometheus, hook)
            finally:
                client.close()
    finally:
        hook.close()


def fresh_group(kind: str) -> str:
    return f"alerts-{kind}-{uuid.uuid4().hex[:6]}"


def produce(producer: Producer, topic: str, count: int, partitions: int = 1) -> None:
    for i in range(count):
        producer.produce(topic, value=b"x" * 100, partition=i % partitions)
    assert producer.flush(30) == 0


def commit(platform: Platform, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit as the group's consumer would (a consumer that is no member commits as the group)."""
    kafka.commit_as(platform, "central", group, [TopicPartition(t, p, o) for (t, p), o in offsets.items()])


def test_a_falling_behind_and_a_stopped_consumer_reach_alertmanager(stack: Stack, topic_factory) -> None:
    platform = stack.platform
    slow_topic, stopped_topic = topic_factory("central", partitions=1), topic_factory("central", partitions=1)
    slow, stopped = fresh_group("slow"), fresh_group("stopped")
    producer = kafka.producer(platform, "central", "ops-test")
    produce(producer, slow_topic, 30)
    produce(producer, stopped_topic, 30)
    commit(platform, stopped, {(stopped_topic, 0): 10})
    position = 10

    def traffic() -> None:
        # Three records written for each one the slow group gets through; the stopped one commits no more.
        nonlocal position
        produce(producer, slow_topic, 30)
        produce(producer, stopped_topic, 10)
        position += 10
        commit(platform, slow, {(slow_topic, 0): position})

    lagging = stack.await_alert("ConsumerGroupLagging", 90, traffic, group=slow, cluster="central")
    assert "falls behind" in lagging.summary
    stop = stack.await_alert("ConsumerGroupStopped", 90, traffic, group=stopped, cluster="central")
    assert stop.severity == "critical" and "the group's members" in stop.look_at
    # Alertmanager's route ends at ops.notify_url.
    eventually(lambda: stack.notified("ConsumerGroupStopped", group=stopped), 30, "the stop posted to notify_url",
               interval=0.5)


def test_offsets_moved_back_skipped_or_outside_the_log_reach_alertmanager(stack: Stack, topic_factory) -> None:
    platform = stack.platform
    admin = kafka.admin(platform, "central")
    producer = kafka.producer(platform, "central", "ops-test")
    topic = topic_factory("central", partitions=2)
    produce(producer, topic, 200, partitions=2)  # 100 records per partition
    rewound = fresh_group("rewound")
    for offset in (50, 80):
        commit(platform, rewound, {(topic, 0): offset, (topic, 1): offset})
        time.sleep(1.5)  # a round of the watcher sees each
    stack.await_watched(rewound, topic, 2)
    # What `kafka-consumer-groups --reset-offsets` does: partition 0 back to 20, partition 1 to the start.
    reset = [ConsumerGroupTopicPartitions(rewound, [TopicPartition(topic, 0, 20), TopicPartition(topic, 1, 0)])]
    admin.alter_consumer_group_offsets(reset)[rewound].result()

    # Retention deletes past the skipper's position; it resets to the end, as a consumer with
    # auto.offset.reset=latest does on its next fetch, skipping everything between.
    skipping_topic = topic_factory("central", partitions=1)
    produce(producer, skipping_topic, 3000)
    skipper, beyond = fresh_group("skipper"), fresh_group("beyond")
    commit(platform, skipper, {(skipping_topic, 0): 10})
    commit(platform, beyond, {(skipping_topic, 0): 5000})  # the log ends at 3,000
    (deleted,) = admin.delete_records([TopicPartition(skipping_topic, 0, 100)]).values()  # retention, on purpose
    deleted.result()
    # Once a round of the watcher saw the skipper behind the log start, it jumps to the end.
    stack.await_alert("ConsumerBehindLogStart", 60, group=skipper, cluster="central")
    commit(platform, skipper, {(skipping_topic, 0): 3000})

    moved = stack.await_alert("ConsumerOffsetsRewound", 60, group=rewound, cluster="central")
    assert moved.severity == "warning" and moved.labels["kind"] == "rewind"
    stack.await_alert("ConsumerOffsetsResetEarliest", 30, group=rewound)
    skipped = stack.await_alert("ConsumerOffsetsResetLatest", 60, group=skipper)
    assert skipped.severity == "critical" and "skipped" in skipped.summary
    outside = stack.await_alert("ConsumerGroupError", 60, group=beyond)
    assert "outside the log" in outside.summary
    # The moves' alerts say what happened; the group's REWIND status raises nothing more.
    assert "ConsumerGroupRewound" not in stack.prometheus_alerts(group=rewound)


def test_offsets_the_offset_manager_lost_reach_alertmanager(stack: Stack, topic_factory) -> None:
    platform = stack.platform
    producer = kafka.producer(platform, "central", "ops-test")
    kept, lost = topic_factory("central", partitions=1), topic_factory("central", partitions=2)
    produce(producer, kept, 50)
    produce(producer, lost, 100, partitions=2)
    group = fresh_group("forgotten")
    for offset in (10, 20):
        commit(platform, group, {(kept, 0): offset, (lost, 0): offset, (lost, 1): offset})
        time.sleep(1.5)
    stack.await_watched(group, lost, 2)
    # The group stays listed through its offsets on `kept`; those on `lost` are gone.
    KafkaTools(platform, "central").run(CONSUMER_GROUPS, ["--delete-offsets", "--group", group, "--topic", lost])
    found = stack.await_alert("ConsumerGroupOffsetsLost", 60, group=group, cluster="central")
    assert found.severity == "critical" and "2 partition(s)" in found.summary
    # Its partitions are ERR for this reason: no second alert for the status.
    assert "ConsumerGroupError" not in stack.prometheus_alerts(group=group)


def test_held_back_compaction_raises_the_stall_alert_and_letting_it_go_clears_it(stack: Stack, topic_factory) -> None:
    """min.cleanable.dirty.ratio 1.0: the cleaner never takes the topic, as a stopped cleaner leaves
    __consumer_offsets; its dirty ratio drives the brokers' max-dirty-percent up."""
    platform = stack.platform
    assert not stack.prometheus_alerts(alertname="OffsetsCompactionStalled"), "stalled before the test"
    topic = topic_factory("central", partitions=1, config={
        "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "1.0", "min.compaction.lag.ms": "0",
        "segment.ms": "100"})
    producer = kafka.producer(platform, "central", "ops-test")
    for _ in range(8):  # each batch in a segment of its own: every closed segment is dirty
        for key in range(20):
            producer.produce(topic, key=f"k{key}".encode(), value=b"v" * 2000)
        assert producer.flush(30) == 0
        time.sleep(0.2)
    # The cleaner re-reads its gauges every log.cleaner.backoff.ms (15 s).
    try:
        stalled = stack.await_alert("OffsetsCompactionStalled", 180, cluster="central")
    except AssertionError as timed_out:
        raise AssertionError(f"{timed_out}; the dirty ratios Prometheus holds: "
                             f"{stack.query('kafka_log_logcleanermanager_max_dirty_percent')}") from None
    assert "__consumer_offsets" in stalled.summary

    admin = kafka.admin(platform, "central")
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("min.cleanable.dirty.ratio", "0.5", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result()
    producer.produce(topic, key=b"roll", value=b"v")  # rolls the segment so the config is read on it
    assert producer.flush(30) == 0
    eventually(lambda: "OffsetsCompactionStalled" not in stack.prometheus_alerts(), 120,
               "the stall alert to clear after compaction", interval=1.0)


def rounds_until(watch: ClusterWatch, done, timeout: float) -> tuple[ClusterReport, float]:
    """Watcher rounds, about a second apart, until ``done(report)``; the report and seconds taken."""
    started = time.monotonic()
    while True:
        report = watch.cycle()
        elapsed = time.monotonic() - started
        if done(report) or elapsed > timeout:
            return report, elapsed
        time.sleep(1.0)


@pytest.mark.chaos
def test_a_hung_central_broker_pages_through_alertmanager_and_clears_when_it_answers_again(
        stack: Stack, local: LocalPlatform, topic_factory) -> None:
    hung = 2
    node = f"central-broker-{hung}"
    topic_factory("central", partitions=6)  # RF 3 on 3 brokers: every partition has a replica on each
    prometheus = PrometheusClient(stack.prometheus)
    watch = ClusterWatch(stack.platform, "central", prometheus)
    try:
        before, _ = rounds_until(watch, lambda r: r.health.under_replicated == 0, 60)
        assert before.health.under_replicated == 0, "central was not healthy before the hang"
        pid = processes.running_pid(local.node_daemon(local.layout("central").broker(hung)))
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            # Two sources: the ISRs from the brokers that still answer, and the hung one's page
            # timing out in Prometheus's next scrape.
            def seen_down(r: ClusterReport) -> bool:
                return r.health.under_replicated > 0 and any(b.node == node and not b.reading.up
                                                             for b in r.health.brokers)
            report, elapsed = rounds_until(watch, seen_down, 30)
            seen = [(b.node, b.reading.up, b.reading.error, b.reading.under_replicated) for b in report.health.brokers]
            assert seen_down(report), f"not seen down with under-replicated partitions {elapsed:.0f} s after the " \
                                      f"hang: {seen}, round {report.seconds:.1f} s"
            assert report.health.status == "CRITICAL"

            stack.await_alert("KafkaBrokerDown", 150, node=node)
            stack.await_alert("KafkaLeaderChanges", 150, cluster="central")
            try:
                eventually(lambda: "KafkaUnderReplicatedPartitions" in stack.prometheus_alerts(cluster="central"),
                           150, "KafkaUnderReplicatedPartitions pending in Prometheus", interval=1)
            except AssertionError as timed_out:
                raise AssertionError(f"{timed_out}; the watcher's figures Prometheus holds: " + ", ".join(
                    f"{expr} = {stack.query(expr)}" for expr in (
                        'conveyor_ops_cluster_under_replicated_partitions{cluster="central"}',
                        'conveyor_ops_round_seconds{cluster="central"}'))) from None
            eventually(lambda: stack.notified("KafkaBrokerDown", node=node), 30,
                       "KafkaBrokerDown at the notify_url receiver", interval=0.5)
            silenced = subprocess.run(conveyor("ops", "silence", "KafkaBrokerDown", "-m", f"node={node}",
                                               "--hours", "1", "--platform", str(stack.path)),
                                      capture_output=True, text=True, timeout=60)
            assert silenced.returncode == 0, silenced.stdout + silenced.stderr
            muted = eventually(lambda: stack.active("KafkaBrokerDown", "suppressed", node=node), 30,
                               "KafkaBrokerDown suppressed by the silence")
            assert muted.silenced_by and muted.silenced_by[0] in silenced.stdout
            assert stack.active("KafkaLeaderChanges", cluster="central"), "the silence reached past its matchers"
        finally:
            os.kill(pid, signal.SIGCONT)
        healed, _ = rounds_until(watch, lambda r: r.health.under_replicated == 0 and r.health.status == "OK", 120)
        assert healed.health.under_replicated == 0, "the broker answering again did not rejoin every ISR"
        eventually(lambda: not any(stack.active("KafkaBrokerDown", state, node=node)
                                   for state in ("active", "suppressed")), 60, "KafkaBrokerDown to resolve", interval=1)
    finally:
        watch.close()
        prometheus.close()
