"""Benchmark: our balance plan against Kafka's own ``kafka-reassign-partitions --generate``, on the
same real cluster state, and producer p99 during a throttled and an unthrottled scale-out.

1. A local cluster of 5 brokers, one rack each (the size of the read cluster whose reads hit 2-3
   of its 5 brokers, docs/architecture.md, section 6), with a skewed assignment: replicas crowd
   brokers 1-3, every leader of the hottest topics on broker 1, one topic isolated on the brokers
   tagged ``money``. Traffic with heavy-tailed rates per topic and
   consumers on most topics runs throughout.
2. Both planners see that state: ours through ``live_cluster`` (metadata, and the loads the bench's
   own Prometheus holds of the brokers' exporters over the last ``--seconds``), Kafka's as
   ``ReassignPartitionsCommand --generate`` over the same topics and brokers, from the same jars.
   Both proposals are scored with the same load model: max over mean per broker of leaders,
   replicas, bytes in and bytes out (leaders after a preferred election), bytes moved, and
   replicas placed off an isolated topic's tagged brokers.
3. Scale-out: a 6th broker is started and ``add-broker``'s plan executed twice from the same
   state, throttled and unthrottled (moved back in between, unmeasured), while a probe producer
   (acks=all, fixed rate) records its latency: p50/p99 before and during each move.

    python -m bench.balance_vs_kafka [--base-port 13300] [--seconds 20] [--throttle 2097152] [--scale 1.0]
                                     [--batch-partitions 20]

Writes ``bench/results/balance_vs_kafka.json``.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

import yaml
from confluent_kafka.admin import NewTopic
from rich.console import Console
from rich.table import Table

from bench.common import host, write_results
from bench.balance_plan import load_table, peer_figures
from conveyor import kafka
from conveyor.config import Platform, parse_platform
from conveyor.ops.balance import plan
from conveyor.ops.balance.execution import Execution, new_execution
from conveyor.ops.balance.executor import Executor
from conveyor.ops.balance.live import LiveCluster, live_cluster
from conveyor.kafka_tools import KafkaTools
from conveyor.runtime.local import LocalPlatform
from tests.balancekit import preload, reassign_and_wait, wait_ports_free

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = "central"
RACKS = ["r1", "r2", "r3", "r4", "r5", "r6"]
#: topic -> (partitions, produce bytes/s, consumer groups, preloaded MB)
TOPICS = {f"t{i}": (10, rate, fanout, mb) for i, (rate, fanout, mb) in enumerate(
    [(400_000, 2, 60), (200_000, 1, 40), (120_000, 2, 30), (60_000, 1, 20), (30_000, 0, 10), (15_000, 1, 10),
     (8_000, 0, 5), (4_000, 1, 5), (2_000, 0, 2), (1_000, 0, 2)])}
ISOLATED = "payments"
PROMETHEUS_PORT = 640
#: Prometheus's scrape interval, which is also its scrape timeout: a broker's page with every
#: partition's figures took over a second to answer under the bench's traffic and moves.
SCRAPE_SECONDS = 5
TAGGED = [3, 4, 5]


def _platform(home: Path, base_port: int, brokers: int) -> Platform:
    data = {"version": 1, "name": "balance-bench",
            "runtime": {"home": str(home), "base_port": base_port, "broker_heap": "256m", "redis": {"enabled": False},
                        "prometheus": {"port": base_port + PROMETHEUS_PORT, "interval": f"{SCRAPE_SECONDS}s"}},
            "clusters": {CLUSTER: {"role": "read", "brokers": brokers, "racks": RACKS[:brokers],
                                   "tags": {"money": TAGGED}, "replication": {"factor": 3, "min_insync": 2}}},
            "topics": {ISOLATED: {"partitions": 9, "isolation": "money"}}}
    (home.parent / f"platform-{brokers}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return parse_platform(data, root=home.parent)


def _up(local: LocalPlatform) -> None:
    """Start what is not running, once its ports are free."""
    wait_ports_free([port for cluster in local.state().clusters for s in cluster.nodes if not s.running
                     for port in (s.node.client_port, s.node.controller_port, s.node.metrics_port)])
    local.up()


def _skewed(rng: random.Random, partitions: int, hot: bool) -> list[list[int]]:
    """Rack-distinct replica lists that favour brokers 1-3; a hot topic has every leader on 1."""
    weights = {1: 3.0, 2: 2.5, 3: 2.0, 4: 0.6, 5: 0.4}
    out = []
    for _ in range(partitions):
        while True:
            reps = rng.choices(list(weights), list(weights.values()), k=3)
            if len({RACKS[b - 1] for b in reps}) == 3:
                break
        if hot and 1 not in reps:
            reps[0] = 1
        if hot:
            reps.remove(1)
            reps.insert(0, 1)
        out.append(reps)
    return out


def _create(platform: Platform, rng: random.Random, scale: float) -> None:
    """The skewed topics, each preloaded with ``scale`` times its megabytes."""
    admin = kafka.admin(platform, CLUSTER)
    assignments = {name: _skewed(rng, p, hot=name in ("t0", "t1", "t2")) for name, (p, *_) in TOPICS.items()}
    assignments[ISOLATED] = [[3, 4, 5] for _ in range(9)]  # all led by broker 3
    topics = [NewTopic(name, num_partitions=len(a), replica_assignment=a) for name, a in assignments.items()]
    for future in admin.create_topics(topics).values():
        future.result()
    for name, mb in [*((name, mb) for name, (*_, mb) in TOPICS.items()), (ISOLATED, 5)]:
        preload(platform, CLUSTER, name, max(1, round(mb * 1000 * scale)), size=1000)  # 1 KB records


class Traffic:
    """Producers at ``scale`` times each topic's rate and consumer groups tailing them, in threads."""

    def __init__(self, platform: Platform, scale: float = 1.0) -> None:
        self.platform, self.stop, self.scale = platform, threading.Event(), scale
        self.threads = [threading.Thread(target=self._produce, daemon=True)]
        for name, (_, _, fanout, _) in TOPICS.items():
            self.threads += [threading.Thread(target=self._consume, args=(name, g), daemon=True) for g in range(fanout)]

    def _produce(self) -> None:
        producer = kafka.producer(self.platform, CLUSTER, "bench-traffic", {"compression.type": "none"})
        payload = os.urandom(1000)
        while not self.stop.is_set():
            started = time.monotonic()
            for name, (_, rate, _, _) in TOPICS.items():
                for _ in range(max(round(rate * self.scale) // 10_000, 1)):  # 1 KB messages, a tenth of a second's worth
                    try:
                        producer.produce(name, payload)
                    except BufferError:
                        producer.poll(0.01)
            producer.poll(0)
            time.sleep(max(0.0, 0.1 - (time.monotonic() - started)))
        producer.flush(30)

    def _consume(self, topic: str, group: int) -> None:
        consumer = kafka.consumer(self.platform, CLUSTER, f"bench-{topic}-{group}", f"bench-{topic}-{group}",
                                  {"auto.offset.reset": "latest"})
        consumer.subscribe([topic])
        while not self.stop.is_set():
            consumer.consume(500, 0.2)
        consumer.close()

    def __enter__(self) -> Traffic:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)


class Probe:
    """acks=all writes at a fixed rate; latency from produce() to the delivery report."""

    def __init__(self, platform: Platform, topic: str, rate: int = 200) -> None:
        self.platform, self.topic, self.rate = platform, topic, rate
        self.samples: list[tuple[float, float]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        producer = kafka.producer(self.platform, CLUSTER, "bench-probe", {"linger.ms": 0})
        while not self.stop.is_set():
            sent = time.monotonic()
            producer.produce(self.topic, b"p" * 200, on_delivery=lambda err, msg, t=sent: self.samples.append(
                (t, time.monotonic() - t)) if err is None else None)
            producer.poll(0)
            time.sleep(1 / self.rate)
        producer.flush(30)

    def window(self, start: float, end: float) -> dict:
        values = sorted(v for t, v in self.samples if start <= t < end)
        if not values:
            return {"count": 0}
        def at(q: float) -> float:
            return round(values[int(q * (len(values) - 1))] * 1000, 2)

        return {"count": len(values), "p50_ms": at(0.5), "p99_ms": at(0.99), "p999_ms": at(0.999),
                "max_ms": at(1.0)}


class _Quiet:
    def batch(self, *_: object) -> None: ...

    def moved(self, *_: object) -> None: ...

    def note(self, _: str) -> None: ...


def _measured(platform: Platform, topics: list[str], seconds: float, patience: float = 120.0) -> LiveCluster:
    """The cluster and its loads over the last ``seconds``, once Prometheus holds figures of every
    broker or ``patience`` s have passed: on a loaded machine a broker's large page can miss its
    scrape's timeout, and a plan that counts a broker idle would not score what the bench means to."""
    deadline = time.monotonic() + patience
    while (live := live_cluster(platform, CLUSTER, topics, window_seconds=seconds)).notes \
            and time.monotonic() < deadline:
        time.sleep(SCRAPE_SECONDS)
    return live


def compare(platform: Platform, console: Console, seconds: float) -> dict:
    topics = [*TOPICS, ISOLATED]
    time.sleep(seconds)  # Prometheus's window of the traffic
    live = _measured(platform, topics, seconds)
    started = time.process_time()
    ours = plan(live.model)
    ours_cpu = time.process_time() - started
    tools = KafkaTools(platform, CLUSTER)
    started = time.perf_counter()
    generated = tools.reassign_generate(topics, sorted(live.metadata.brokers))
    kafka_seconds = time.perf_counter() - started
    peer = peer_figures(live.model, [generated[(p.topic, p.partition)] for p in live.model.partitions])
    total = sum(p.size * len(p.replicas) for p in live.model.partitions)
    figures = {
        "partitions": len(live.model.partitions), "bytes_total": total, "notes": list(live.notes),
        "before": {k: round(v.max_over_mean, 3) for k, v in ours.stats_before.items()},
        "conveyor": {"after": {k: round(v.max_over_mean, 3) for k, v in ours.stats_after.items()},
                     "bytes_moved": ours.bytes_to_move, "isolation_breaches": 0, "plan_cpu_seconds": round(ours_cpu, 3),
                     "replica_moves": len(ours.moves), "elections": len(ours.elections)},
        "kafka_generate": {**peer, "generate_seconds": round(kafka_seconds, 2)},
    }
    table = load_table(f"same cluster state: {figures['partitions']} partitions on {len(live.model.brokers)} brokers, "
                       f"{total / 1e6:.0f} MB stored", figures["before"], figures["conveyor"]["after"], peer["after"])
    table.add_row("bytes moved", "", f"{ours.bytes_to_move / 1e6:.1f} MB", f"{peer['bytes_moved'] / 1e6:.1f} MB")
    table.add_row("isolation breaches", "", "0", str(peer["isolation_breaches"]))
    console.print(table)
    return figures


def _run(platform: Platform, execution: Execution) -> tuple[float, float]:
    """Apply ``execution``: (monotonic start, end)."""
    started = time.monotonic()
    Executor(platform, CLUSTER, state_file=platform.home / f"bench-{execution.created_at}.json",
             poll_seconds=0.5).run(execution, _Quiet())
    return started, time.monotonic()


def _planned(platform: Platform, name: str, throttle: int | None, batch_partitions: int) -> Execution:
    live = live_cluster(platform, CLUSTER, [*TOPICS, ISOLATED], window_seconds=3 * SCRAPE_SECONDS)
    return new_execution(CLUSTER, plan(live.model), live.assignment(), name, throttle, max_partitions=batch_partitions)


def scale_out(platform: Platform, grown: Platform, console: Console, throttle: int, baseline: float,
              batch_partitions: int) -> dict:
    """Balance first (unmeasured: a scale-out starts from an even cluster), add a 6th broker, plan
    once, and apply that plan twice from the same state, throttled then unthrottled (moved back in
    between, unmeasured), under the probe, after ``baseline`` seconds of it with nothing moving."""
    _run(platform, _planned(platform, "balance", None, batch_partitions))
    grown_local = LocalPlatform(grown)
    _up(grown_local)
    grown = grown_local.clients
    scale = _planned(grown, "throttled", throttle, batch_partitions)
    probe = Probe(platform, "t9")
    probe.thread.start()
    time.sleep(5)  # the probe's producer connects and gets its producer id first
    start = time.monotonic()
    time.sleep(baseline)
    runs = {"baseline": {**probe.window(start, time.monotonic()), "seconds": baseline}}
    for name, rate in (("throttled", throttle), ("unthrottled", None)):
        start, end = _run(grown, replace(scale, throttle=rate, created_at=name))
        runs[name] = {**probe.window(start, end), "seconds": round(end - start, 1), "throttle": rate,
                      "bytes_moved": scale.bytes_to_move, "batches": len(scale.batches)}
        console.print(f"{name}: {runs[name]}")
        if rate is not None:  # back to the same starting state for the unthrottled run, unmeasured
            reassign_and_wait(grown, CLUSTER, dict(scale.before))
    probe.stop.set()
    probe.thread.join(30)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.balance_vs_kafka", description=__doc__.split("\n")[0])
    parser.add_argument("--base-port", type=int, default=int(os.environ.get("CONVEYOR_BENCH_BASE_PORT", "13300")))
    parser.add_argument("--seconds", type=float, default=20.0,
                        help=f"traffic measuring window (at least {3 * SCRAPE_SECONDS} s: three scrapes), and the "
                             "producer latency's baseline before the moves")
    parser.add_argument("--throttle", type=int, default=2 * 2**20, help="bytes/s for the throttled move")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="share of each topic's preloaded data and of its traffic (the bytes the moves carry "
                             "shrink with it)")
    parser.add_argument("--batch-partitions", type=int, default=20,
                        help="partitions per batch of moves (each batch is two starts of Kafka's reassignment "
                             "tool: fewer, larger batches finish sooner and move more at once)")
    args = parser.parse_args()
    args.seconds = max(args.seconds, 3 * SCRAPE_SECONDS)
    if not 0 < args.scale <= 1:
        parser.error("--scale must be above 0 and at most 1")
    if args.batch_partitions < 1:
        parser.error("--batch-partitions must be at least 1")
    console = Console()
    with tempfile.TemporaryDirectory(prefix="conveyor-balance-bench-") as tmp:
        home = Path(tmp) / "home"
        platform, grown = _platform(home, args.base_port, 5), _platform(home, args.base_port, 6)
        local = LocalPlatform(platform)
        try:
            with console.status("starting 5 brokers"):
                _up(local)
            platform = local.clients
            with console.status("creating skewed topics and preloading data"):
                _create(platform, random.Random(5), args.scale)
            with Traffic(platform, args.scale):
                with console.status(f"measuring traffic for {args.seconds:g} s and planning"):
                    comparison = compare(platform, console, args.seconds)
                with console.status("scale-out: throttled and unthrottled moves onto a 6th broker"):
                    moves = scale_out(platform, grown, console, args.throttle, args.seconds, args.batch_partitions)
        finally:
            LocalPlatform(grown).down()
    table = Table(title="producer latency (acks=all) while add-broker moves replicas")
    for column in ("run", "seconds", "p50 ms", "p99 ms", "p99.9 ms", "max ms", "samples"):
        table.add_column(column, justify="right")
    for name, run in moves.items():
        table.add_row(name, str(run.get("seconds", "")), *(str(run.get(k)) for k in ("p50_ms", "p99_ms", "p999_ms",
                                                                                     "max_ms")), str(run["count"]))
    console.print(table)
    path = write_results("balance_vs_kafka", {"benchmark": "balance_vs_kafka", **host(), "comparison": comparison,
                                              "add_broker": moves})
    console.print(f"wrote {path}")


if __name__ == "__main__":
    main()
