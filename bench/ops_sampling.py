"""Benchmark: what one sampling round costs the brokers with 2,000 topics.

A one-broker cluster of its own gets 2,000 one-partition topics and 50 consumer groups that each
committed offsets on 40 of them (every topic is consumed). Per round we count the requests the
broker served, by type, from its own JMX exporter (``kafka_network_requestmetrics_requests_total``),
and time the round, for:

- ``ours``: :class:`conveyor.ops.sampler.OffsetSampler` (one Metadata, one ListGroups, one
  OffsetFetch per group, ListOffsets for every partition in one call for the end and one for the
  start offsets);
- ``peer``: the per-partition way many lag exporters start with: each group's
  ``Consumer.committed()`` and ``get_watermark_offsets()`` for each of its partitions.

Ours is measured first with 50 topics (one per group), then with all 2,000 on the same 50
groups: its request count depends on the groups, not on the topics or partitions.
Writes ``bench/results/ops_sampling.json``. Run: ``python -m bench.ops_sampling [--topics 2000]
[--base-port 21092]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx
from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.table import Table

from bench.common import host, write_results
from conveyor import kafka
from conveyor.config import Platform, parse_platform
from conveyor.ops.sampler import OffsetSampler
from conveyor.runtime.local import LocalPlatform

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = "bench"
GROUPS = 50
#: The broker's count of the requests it served (conveyor/runtime/jmx-exporter.yaml).
REQUESTS = "kafka_network_requestmetrics_requests_total"
COUNTED = ("Metadata", "ListGroups", "OffsetFetch", "ListOffsets", "FindCoordinator", "DescribeCluster")


def _platform(home: Path, base_port: int) -> Platform:
    data = {"name": "ops-bench", "runtime": {"home": str(home), "base_port": base_port, "redis": {"enabled": False}},
            "clusters": {CLUSTER: {"role": "writable", "brokers": 1}}}
    return parse_platform(data, root=home)


def _requests(metrics_url: str) -> Counter[str]:
    """Requests the broker served since it started, per request type (all versions)."""
    # The exporter walks every MBean of every topic: seconds alone, and past 10 s on a loaded machine
    # (seen with 60 topics in a suite). The scrape is outside the measured time.
    page = httpx.get(metrics_url, timeout=60).text
    served: Counter[str] = Counter()
    for sample in (s for f in text_string_to_metric_families(page) for s in f.samples):
        if sample.name == REQUESTS and "request" in sample.labels:
            served[sample.labels["request"]] += int(sample.value)
    return served


def _populate(platform: Platform, topics: list[str], console: Console) -> None:
    """Create ``topics`` with ten records each; group g commits offset 5 on every GROUPS-th of them."""
    admin = kafka.admin(platform, CLUSTER)
    with console.status(f"creating {len(topics):,} topics"):
        for start in range(0, len(topics), 200):
            futures = admin.create_topics([NewTopic(t, 1, 1) for t in topics[start:start + 200]])
            for future in futures.values():
                future.result()
    producer = kafka.producer(platform, CLUSTER, "ops-bench")
    for topic in topics:
        for _ in range(10):
            producer.produce(topic, b"x" * 100)
        producer.poll(0)
    producer.flush(120)
    for group, owned in _groups(topics).items():
        if not owned:  # fewer new topics than groups: these groups own none of them
            continue
        kafka.commit_as(platform, CLUSTER, group, [TopicPartition(t, 0, 5) for t in owned])


def _groups(topics: list[str]) -> dict[str, list[str]]:
    return {f"bench-group-{g:03d}": topics[g::GROUPS] for g in range(GROUPS)}


def _ours(platform: Platform, topics: set[str]) -> None:
    snapshot = OffsetSampler(platform, CLUSTER).sample(topics)
    assert len(snapshot.ends) >= len(topics), "every watched partition must get its end offset"


def _peer(platform: Platform, groups: dict[str, list[str]]) -> None:
    for group, owned in groups.items():
        consumer = kafka.consumer(platform, CLUSTER, group, "ops-bench-peer")
        partitions = [TopicPartition(t, 0) for t in owned]
        committed = consumer.committed(partitions, timeout=30)
        ends = [consumer.get_watermark_offsets(tp, timeout=30) for tp in partitions]
        assert len(committed) == len(ends) == len(owned)
        consumer.close()


def _measure(name: str, metrics_url: str, work: Callable[[], None]) -> dict:
    before = _requests(metrics_url)
    started = time.perf_counter()
    work()
    seconds = time.perf_counter() - started
    time.sleep(1)
    after = _requests(metrics_url)
    counts = {r: int(after[r] - before[r]) for r in COUNTED if after[r] - before[r] > 0}
    return {"method": name, "seconds": round(seconds, 3), "requests": counts, "total_requests": sum(counts.values())}


def run(topic_count: int, base_port: int, console: Console) -> dict:
    with tempfile.TemporaryDirectory(prefix="conveyor-ops-bench-") as tmp:
        platform = _platform(Path(tmp) / "home", base_port)
        local = LocalPlatform(platform)
        try:
            with console.status("starting a one-broker cluster"):
                local.up()
            platform = local.clients
            metrics_url = local.layouts[0].nodes[0].metrics_url
            topics = [f"bench-{i:05d}" for i in range(topic_count)]
            rows, created = [], 0
            for upto in (GROUPS, topic_count):  # first one topic per group, then all of them
                _populate(platform, topics[created:upto], console)
                created, watched = upto, topics[:upto]
                rows.append({"topics": upto, **_measure("ours", metrics_url, lambda: _ours(platform, set(watched)))})
            rows.append({"topics": topic_count,
                         **_measure("peer", metrics_url, lambda: _peer(platform, _groups(topics)))})
        finally:
            local.down()
    table = Table(title=f"one sampling round: {topic_count:,} topics, {GROUPS} groups, one broker")
    for column in ("method", "topics", "round", "requests served by the broker", "total"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["method"], f"{row['topics']:,}", f"{row['seconds']:.2f} s",
                      ", ".join(f"{k} {v:,}" for k, v in row["requests"].items()), f"{row['total_requests']:,}")
    console.print(table)
    return {"topics": topic_count, "partitions": topic_count, "groups": GROUPS, "rounds": rows}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ops_sampling", description=__doc__.split("\n")[0])
    parser.add_argument("--topics", type=int, default=2000, help=f"topics of the second round (more than {GROUPS})")
    parser.add_argument("--base-port", type=int, default=21092, help="for the one-broker cluster this run starts")
    args = parser.parse_args()
    if args.topics <= GROUPS:
        parser.error(f"--topics must be more than {GROUPS}: the first round watches one topic per group, "
                     "the second every topic")
    console = Console()
    result = run(args.topics, args.base_port, console)
    path = write_results("ops_sampling", {"benchmark": "ops_sampling", **host(), **result})
    console.print(f"wrote {path}")


if __name__ == "__main__":
    main()
