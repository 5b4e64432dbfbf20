"""The replicator against MirrorMaker 2 (official connect-mirror jars), same machine, same clusters.

1. Throughput per CPU-second: N preloaded 1 KB records in 12 partitions at dc1, copied to central
   by one replicator worker (exactly-once) and by MM2 (dedicated mode, identity topic names), each
   on its own copy of the data. CPU is the copier process's user+system time.
2. Latency at a fixed rate: both copy a live topic at `rate` records/s; a consumer on central times
   each record from its send time. Halfway, 10 new topics appear at the source for each tool; the
   worst latency of the existing topic after that moment shows any pause.

    python -m bench.replicate_vs_mm2 [--records 100000] [--rate 1000] [--seconds 30]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import orjson
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic

from bench.common import arguments, routes_platform, write_results
from conveyor import kafka
from conveyor.config import Platform
from conveyor.replicate.bookkeeping import read_bucket
from conveyor.replicate import plan
from conveyor.replicate.plan import SourcePartition
from conveyor.jars import java_binary
from conveyor.runtime.local import LOG4J_CONFIG, LocalPlatform

ROUTE = "dc1-central"
PAYLOAD = b"x" * 1000


def _platform(tmp: Path, base_port: int) -> tuple[Platform, Path]:
    # MirrorMaker 2 is given no credentials: the clusters run in clear.
    return routes_platform(tmp, base_port, {ROUTE: {"source": "dc1", "destination": "central", "pattern": "ours-.*"}})


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _create(platform: Platform, cluster: str, topics: list[str], partitions: int) -> None:
    admin = kafka.admin(platform, cluster)
    factor = platform.cluster(cluster).default_replication_factor
    for future in admin.create_topics([NewTopic(t, partitions, factor) for t in topics]).values():
        future.result()


def _preload(platform: Platform, topic: str, records: int, cluster: str = "dc1") -> None:
    producer = kafka.producer(platform, cluster, "bench-preload", {"queue.buffering.max.messages": 1_000_000})
    for i in range(records):
        while True:
            try:
                producer.produce(topic, PAYLOAD, str(i % 1000).encode())
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(300) == 0


def _start_ours(platform_file: Path, log: Path, route: str = ROUTE) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "conveyor", "replicate", "worker", "--route", route,
                             "--platform", str(platform_file)], stdout=open(log, "wb"), stderr=subprocess.STDOUT)


def _start_mm2(platform: Platform, local: LocalPlatform, tmp: Path) -> subprocess.Popen:
    props = tmp / "mm2.properties"
    props.write_text("\n".join([
        "clusters = dc1, central",
        f"dc1.bootstrap.servers = {platform.bootstrap('dc1')}",
        f"central.bootstrap.servers = {platform.bootstrap('central')}",
        "dc1->central.enabled = true", "central->dc1.enabled = false",
        "dc1->central.topics = mm2-.*",
        "replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
        # Find new topics every 5 s (the default is 10 minutes) so both tools face the same test.
        "refresh.topics.interval.seconds = 5",
        "emit.checkpoints.enabled = false", "sync.group.offsets.enabled = false", "sync.topic.acls.enabled = false",
        "tasks.max = 4",
        # dc1 has one broker: keep MM2's offset syncs on central, whose RF 3 the settings below assume.
        "offset-syncs.topic.location = target",
        *[f"{k}.replication.factor = 3" for k in ("replication", "offset-syncs.topic", "heartbeats.topic",
                                                   "checkpoints.topic", "config.storage", "offset.storage",
                                                   "status.storage")],
        "dc1.config.storage.replication.factor = 1", "dc1.offset.storage.replication.factor = 1",
        "dc1.status.storage.replication.factor = 1",
        "dc1.heartbeats.topic.replication.factor = 1",
    ]) + "\n")
    return subprocess.Popen([java_binary(), "-Xmx512m", f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
                             f"-Dkafka.logs.dir={tmp / 'mm2-logs'}", "-cp", local.jars().classpath,
                             "org.apache.kafka.connect.mirror.MirrorMaker", str(props), "--clusters", "central"],
                            stdout=open(tmp / "mm2.log", "wb"), stderr=subprocess.STDOUT)


def _copied_ours(platform: Platform, topic: str, partitions: int, route: str = ROUTE) -> int:
    """The next offsets the replicator committed for ``topic`` (0 until the worker made its route topic)."""
    spec = platform.routes[route]
    if plan.route_topic(route) not in kafka.admin(platform, spec.destination).list_topics(timeout=10).topics:
        return 0
    stored: dict[SourcePartition, int] = {}
    try:
        for bucket in range(spec.buckets):
            stored.update(read_bucket(platform, route, spec.destination, "bench", bucket).offsets)
    except KafkaException:  # the route topic is new and its leaders not elected yet: ask again
        return 0
    return sum(stored.get(SourcePartition(topic, p), 0) for p in range(partitions))


def _copied_mm2(platform: Platform, topic: str, partitions: int) -> int:
    consumer = kafka.consumer(platform, "central", "bench-count", "bench-count")
    try:
        if topic not in consumer.list_topics(timeout=10).topics:
            return 0
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions))
    except KafkaException:  # MM2 just created the topic and its leaders are not elected yet: ask again
        return 0
    finally:
        consumer.close()


def throughput(name: str, proc: subprocess.Popen, copied, records: int) -> dict:
    started, first = time.monotonic(), None
    while (done := copied()) < records:
        if proc.poll() is not None:
            raise SystemExit(f"{name} exited with {proc.returncode}")
        if first is None and done > 0:
            first = (time.monotonic(), done)
        time.sleep(0.5)
    end, cpu = time.monotonic(), _cpu_seconds(proc.pid)
    first_at, first_done = first or (started, 0)
    steady = (records - first_done) / max(end - first_at, 1e-9)
    return {"records": records, "seconds_total": round(end - started, 1), "records_per_s_steady": round(steady),
            "cpu_seconds": round(cpu, 1), "records_per_cpu_s": round(records / cpu),
            "mb_per_cpu_s": round(records * len(PAYLOAD) / 1e6 / cpu, 2)}


def latency(platform: Platform, rate: int, seconds: int) -> dict:
    topics = {"ours": "ours-live", "mm2": "mm2-live"}
    consumer = kafka.consumer(platform, "central", "bench-latency", "bench-latency")
    assignment = []
    for topic in topics.values():
        for p in range(6):
            high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            assignment.append(TopicPartition(topic, p, high))
    consumer.assign(assignment)
    samples: dict[str, list[tuple[float, float]]] = {"ours": [], "mm2": []}
    stop = threading.Event()
    added_at: list[float] = []
    sent_total: list[int] = []

    def produce() -> None:
        producer = kafka.producer(platform, "dc1", "bench-rate", {"linger.ms": 1})
        started = time.monotonic()
        sent = 0
        while (elapsed := time.monotonic() - started) < seconds:
            if not added_at and elapsed > seconds / 2:
                _create(platform, "dc1", [f"{tool}-new-{i}" for tool in topics for i in range(10)], 3)
                added_at.append(time.time())
            while sent < rate * elapsed:
                stamp = orjson.dumps({"sent": time.time()}) + PAYLOAD[:970]
                for topic in topics.values():
                    producer.produce(topic, stamp, str(sent % 100).encode())
                sent += 1
            producer.poll(0)
            time.sleep(0.002)
        producer.flush(30)
        sent_total.append(sent)
        time.sleep(10)
        stop.set()

    thread = threading.Thread(target=produce)
    thread.start()
    tool_of = {topic: tool for tool, topic in topics.items()}
    while not stop.is_set():
        for message in consumer.consume(1000, 0.2):
            if message.error() is None:
                sent = orjson.loads(message.value()[: message.value().index(b"}") + 1])["sent"]
                samples[tool_of[message.topic()]].append((sent, time.time() - sent))
    thread.join()
    consumer.close()
    result = {}
    for tool, values in samples.items():
        delays = sorted(d for _, d in values)
        after = [d for s, d in values if added_at and s >= added_at[0]]
        result[tool] = {"sent": sent_total[0], "records": len(delays),
                        "p50_ms": round(delays[len(delays) // 2] * 1000, 1),
                        "p99_ms": round(delays[int(len(delays) * 0.99)] * 1000, 1),
                        "max_ms_after_topics_added": round(max(after) * 1000, 1) if after else None}
    return result


def run(records: int, rate: int, seconds: int, base_port: int) -> dict:
    result: dict = {"record_bytes": len(PAYLOAD), "rate": rate}
    with tempfile.TemporaryDirectory(prefix="conveyor-bench-rep-") as tmp_name:
        tmp = Path(tmp_name)
        platform, platform_file = _platform(tmp, base_port)
        local = LocalPlatform(platform)
        local.up()
        platform = local.clients
        procs: list[subprocess.Popen] = []
        try:
            _create(platform, "dc1", ["ours-tput", "mm2-tput"], 12)
            _create(platform, "dc1", ["ours-live", "mm2-live"], 6)
            for topic in ("ours-tput", "mm2-tput"):
                _preload(platform, topic, records)
            ours = _start_ours(platform_file, tmp / "ours.log")
            procs.append(ours)
            result["throughput_ours"] = throughput("replicator", ours, lambda: _copied_ours(platform, "ours-tput", 12),
                                                   records)
            print("ours:", result["throughput_ours"], flush=True)
            mm2 = _start_mm2(platform, local, tmp)
            procs.append(mm2)
            result["throughput_mm2"] = throughput("MirrorMaker 2", mm2, lambda: _copied_mm2(platform, "mm2-tput", 12),
                                                  records)
            print("mm2:", result["throughput_mm2"], flush=True)
            time.sleep(10)  # both have found the live topics
            result["latency"] = latency(platform, rate, seconds)
            print("latency:", result["latency"], flush=True)
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(60)
            local.down()
    return result


def main() -> None:
    parser = arguments(__doc__, 30092)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=int, default=30)
    args = parser.parse_args()
    result = run(args.records, args.rate, args.seconds, args.base_port)
    write_results("replicate_vs_mm2", result, show=True)


if __name__ == "__main__":
    main()
