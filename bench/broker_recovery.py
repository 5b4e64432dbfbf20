"""Failure detection and recovery of a central broker, measured against the goal of writes
resuming within about 6 s (the field's figure went from 91 s to about 6 s). Under steady acks=all
produce load, a broker that leads partitions is SIGKILLed; then:

- ``alarm``: until the ops watcher's round reports the broker down: Prometheus, scraping every node
  each second, finds its page gone (``up`` 0, which the KafkaBrokerDown rule reads), and the watcher
  reads that in its next round, as often as ``ops.interval`` allows (1 s here);
- ``leaders_moved``: until every partition it led has another leader in the cluster's metadata;
- ``writes_resumed``: until, on every partition it led, a record sent after the kill is acknowledged
  by all in-sync replicas (what a producer feels);
- ``isr_full``: after it is started again, until every partition has all its replicas in sync.

The platform is the demo's central cluster alone (3 brokers, RF 3, min ISR 2) and a Prometheus on
its own ports and folder, with the broker settings `conveyor up` writes
(conveyor/runtime/properties.py).

    python -m bench.broker_recovery [--runs 3] [--rate 2000] [--base-port 31800]

Writes bench/results/broker_recovery.json.
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from confluent_kafka.admin import NewTopic
from rich.console import Console
from rich.table import Table

from bench.common import arguments, demo_data, write_results
from conveyor import kafka
from conveyor.config import Platform, parse_platform
from conveyor.ops.prometheus import connect
from conveyor.ops.watch import ClusterWatch
from conveyor.runtime.local import LocalPlatform

TOPIC = "recovery-bench"
PARTITIONS = 6
TIMEOUT = 120.0
#: The Prometheus's port, from the bench's base port.
PROMETHEUS_PORT = 640


@dataclass
class Recovery:
    victim: int
    partitions_led: list[int]
    alarm: float | None = None
    leaders_moved: float | None = None
    writes_resumed: float | None = None
    isr_full: float | None = None


def _platform(folder: Path, base_port: int) -> Platform:
    demo = demo_data()
    data = {
        "name": "recovery-bench",
        "runtime": {**demo["runtime"], "home": str(folder), "base_port": base_port, "redis": {"enabled": False},
                    "prometheus": {"port": base_port + PROMETHEUS_PORT, "interval": "1s"}},
        "clusters": {"central": demo["clusters"]["central"]},
        "topics": {TOPIC: {"partitions": PARTITIONS, "replication_factor": 3, "min_insync_replicas": 2}},
        "ops": {"interval": "1s"},
    }
    return parse_platform(data, root=folder)


class Load:
    """Records to every partition in turn at ``rate`` per second, acks=all; for each partition the
    first acknowledgement of a record sent at or after ``since`` (monotonic)."""

    def __init__(self, platform: Platform, rate: int) -> None:
        self._producer = kafka.producer(platform, "central", "recovery-bench", {"linger.ms": 5})
        self._rate = rate
        self._stop = threading.Event()
        self.since = float("inf")
        self.first_ack: dict[int, float] = {}
        self.failed = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def mark(self, since: float) -> None:
        self.first_ack, self.since = {}, since

    def _delivered(self, sent: float, err, message) -> None:
        if err is not None:
            self.failed += 1
        elif sent >= self.since:
            self.first_ack.setdefault(message.partition(), time.monotonic())

    def _run(self) -> None:
        n = 0
        started = time.monotonic()
        while not self._stop.is_set():
            sent = time.monotonic()
            self._producer.produce(TOPIC, b"x" * 200, partition=n % PARTITIONS,
                                   on_delivery=lambda err, msg, sent=sent: self._delivered(sent, err, msg))
            self._producer.poll(0)
            n += 1
            ahead = started + n / self._rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._producer.flush(30)


def _leaders(admin, topic: str) -> dict[int, tuple[int, int]]:
    """partition -> (leader, in-sync replicas)."""
    meta = admin.list_topics(topic, timeout=5).topics[topic]
    return {p: (m.leader, len(m.isrs)) for p, m in meta.partitions.items()}


def _until(check, start: float) -> float | None:
    deadline = start + TIMEOUT
    while time.monotonic() < deadline:
        try:
            if check():
                return time.monotonic() - start
        except Exception:  # noqa: BLE001 (metadata from a cluster that is failing over: ask again)
            pass
        time.sleep(0.05)
    return None


def _one_run(local: LocalPlatform, platform: Platform, load: Load, watch: ClusterWatch, run: int) -> Recovery:
    admin = kafka.admin(platform, "central")
    victim = _leaders(admin, TOPIC)[run % PARTITIONS][0]
    led = sorted(p for p, (leader, _) in _leaders(admin, TOPIC).items() if leader == victim)
    result = Recovery(victim, led)
    alarm_seen = threading.Event()

    def watch_rounds(start: float) -> None:
        while not alarm_seen.is_set() and time.monotonic() - start < TIMEOUT:
            report = watch.cycle()
            if any(not b.reading.up and b.node.endswith(f"-{victim}") for b in report.health.brokers):
                result.alarm = time.monotonic() - start
                alarm_seen.set()
            else:
                time.sleep(max(0.0, 1.0 - report.seconds))

    start = time.monotonic()
    load.mark(start)
    local.kill_broker("central", victim)
    watcher = threading.Thread(target=watch_rounds, args=(start,), daemon=True)
    watcher.start()
    result.leaders_moved = _until(lambda: all(_leaders(admin, TOPIC)[p][0] not in (victim, -1) for p in led), start)
    result.writes_resumed = _until(lambda: set(led) <= set(load.first_ack), start)
    if result.writes_resumed is not None:
        result.writes_resumed = max(load.first_ack[p] for p in led) - start
    watcher.join(TIMEOUT)
    alarm_seen.set()
    restarted = time.monotonic()
    local.start_brokers("central", victim)
    result.isr_full = _until(lambda: all(isr == 3 for _, isr in _leaders(admin, TOPIC).values()), restarted)
    return result


def run(runs: int, rate: int, base_port: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="conveyor-recovery-") as tmp:
        platform = _platform(Path(tmp), base_port)
        local = LocalPlatform(platform)
        local.up()
        platform = local.clients
        try:
            admin = kafka.admin(platform, "central")
            for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})]
                                              ).values():
                future.result()
            load = Load(platform, rate)
            prometheus = connect(platform)
            assert prometheus is not None, "the bench's platform names its Prometheus"
            watch = ClusterWatch(platform, "central", prometheus)
            time.sleep(10)  # load flowing and the watcher's first rounds (rates need two samples)
            for _ in range(3):
                watch.cycle()
            results = []
            for i in range(runs):
                results.append(_one_run(local, platform, load, watch, i))
                time.sleep(5)
            load.close()
            watch.close()
            prometheus.close()
        finally:
            local.down()
    measured = [asdict(r) for r in results]
    medians = {key: statistics.median(r[key] for r in measured if r[key] is not None)
               for key in ("alarm", "leaders_moved", "writes_resumed", "isr_full")
               if any(r[key] is not None for r in measured)}
    return {"runs": measured, "median": medians, "rate": rate, "failed_deliveries": load.failed}


def main() -> None:
    parser = arguments(__doc__, 31800)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", type=int, default=2000, help="records per second, acks=all")
    args = parser.parse_args()
    result = run(args.runs, args.rate, args.base_port)
    write_results("broker_recovery", result)
    table = Table(title=f"broker recovery under {args.rate:,} records/s acks=all (seconds after the SIGKILL)")
    for column in ("run", "broker", "led", "alarm", "leaders moved", "writes resumed", "ISR full after restart"):
        table.add_column(column, justify="right")

    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    for i, r in enumerate(result["runs"], 1):
        table.add_row(str(i), str(r["victim"]), ",".join(map(str, r["partitions_led"])), cell(r["alarm"]),
                      cell(r["leaders_moved"]), cell(r["writes_resumed"]), cell(r["isr_full"]))
    m = result["median"]
    table.add_row("median", "", "", *(cell(m.get(k)) for k in ("alarm", "leaders_moved", "writes_resumed", "isr_full")))
    Console().print(table)


if __name__ == "__main__":
    main()
