"""What a replicator worker's death costs the buckets it did not hold: two processes serve both
routes (dc1 and dc2 into central, `conveyor replicate worker` without --route), keyed records flow
at a fixed rate into each data centre, and one process is SIGKILLed. Each record's copy latency is
its arrival on central (a read_committed consumer) less its send time, split three ways:

- before the kill (every bucket at home; after a warm-up as long, in which the new topic is found,
  created on central and taken up by its buckets' copiers);
- after the kill, in buckets the surviving process held all along: the others' latency while a
  worker dies, which a stop-the-world rebalance would raise by the group's session timeout;
- after the kill, in the dead process's buckets: they wait for the session timeout (6 s) and the
  takeover, then catch up.

Each run kills the other process of the pair, on topics of its own; figures are medians over
``--runs`` (3), each run listed.

    python -m bench.replicate_failover [--rate 200] [--seconds 20] [--runs 3] [--base-port 14092]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaException, TopicPartition

from bench.common import arguments, host, routes_platform, write_results
from bench.replicate_vs_mm2 import _create
from conveyor import kafka
from conveyor.config import Platform
from conveyor.replicate import plan
from conveyor.runtime.local import LocalPlatform

DCS = ("dc1", "dc2")
PARTITIONS, BUCKETS = 12, 8
#: The shortest window that sees the dead worker's buckets copied again (session timeout and takeover).
MIN_WINDOW = 10
#: How long after the last window the records still on their way are waited for.
DRAIN_SECONDS = 120


def _platform(tmp: Path, base_port: int) -> tuple[Platform, Path]:
    return routes_platform(tmp, base_port, {f"fo-{dc}": {"source": dc, "destination": "central", "pattern": "fo-.*",
                                                         "buckets": BUCKETS, "requested": False} for dc in DCS})


def _worker(path: Path, name: str, log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "conveyor", "replicate", "worker", "--id", name,
                             "--platform", str(path)], stdout=open(log, "ab"), stderr=subprocess.STDOUT)


def _held(platform: Platform, worker: str) -> set[tuple[str, int]]:
    """(route, bucket) pairs ``worker`` holds now; asked again while a coordinator moves."""
    for _ in range(30):
        try:
            return _held_once(platform, worker)
        except KafkaException:
            time.sleep(1)
    return _held_once(platform, worker)


def _held_once(platform: Platform, worker: str) -> set[tuple[str, int]]:
    admin = kafka.admin(platform, "central")
    groups = [plan.group_id(f"fo-{dc}") for dc in DCS]
    held = set()
    for group, description in kafka.describe_groups(admin, groups).items():
        for member in description.members:
            if member.client_id.endswith(f"-{worker}"):
                route = group.removeprefix(plan.group_id(""))
                held |= {(route, tp.partition) for tp in member.assignment.topic_partitions}
    return held


def _settle(platform: Platform, timeout: float = 120.0) -> None:
    """Until both processes hold buckets of both routes and the assignment has not moved for 10 s:
    a process that just joined takes its buckets over (a transaction fenced and its offsets read),
    and a measurement then would time the join, not the death."""
    deadline, last, since = time.monotonic() + timeout, None, time.monotonic()
    while time.monotonic() < deadline:
        now = (frozenset(_held(platform, "w0")), frozenset(_held(platform, "w1")))
        if now != last:
            last, since = now, time.monotonic()
        elif all({r for r, _ in held} == {f"fo-{dc}" for dc in DCS} for held in now) \
                and time.monotonic() - since >= 10:
            return
        time.sleep(1)
    raise TimeoutError(f"the workers' buckets did not settle within {timeout:.0f} s: {last}")


def _produce(platform: Platform, dc: str, topic: str, rate: int, stop: threading.Event,
             delivered: list[int]) -> None:
    """Records at ``rate`` until ``stop``; each one its source acknowledged counts in ``delivered``."""
    producer = kafka.producer(platform, dc, f"bench-fo-{dc}")
    i, started = 0, time.time()

    def acked(err: object, _: object) -> None:
        if err is None:
            delivered.append(1)

    while not stop.is_set():
        producer.produce(topic, orjson.dumps({"sent": time.time(), "dc": dc}), f"k{i % 500}".encode(),
                         on_delivery=acked)
        producer.poll(0)
        i += 1
        time.sleep(max(0.0, started + i / rate - time.time()))
    producer.flush(30)


def _percentiles(values: list[float]) -> dict[str, float | int]:
    if not values:
        return {"records": 0}
    values = sorted(values)
    return {"records": len(values), "p50_ms": round(values[len(values) // 2] * 1000, 1),
            "p99_ms": round(values[int(len(values) * 0.99)] * 1000, 1), "max_ms": round(values[-1] * 1000, 1)}


def _arrive(consumer: Consumer, topic: str, arrivals: list[tuple[float, float, tuple[str, int]]]) -> None:
    """The records copied since the last call, as (sent, latency, (route, bucket)) in ``arrivals``."""
    for message in consumer.consume(1000, 0.2):
        if message.error() is None:
            value = orjson.loads(message.value())
            bucket = plan.bucket_of(topic, message.partition(), BUCKETS)  # same partition as the source's
            arrivals.append((value["sent"], time.time() - value["sent"], (f"fo-{value['dc']}", bucket)))


def one_run(platform: Platform, path: Path, tmp: Path, run: int, rate: int, seconds: int,
            procs: dict[str, subprocess.Popen]) -> dict[str, Any]:
    topic = f"fo-run{run}"
    for dc in DCS:
        _create(platform, dc, [topic], PARTITIONS)
    victim, survivor = ("w1", "w0") if run % 2 == 0 else ("w0", "w1")
    consumer = kafka.consumer(platform, "central", f"bench-fo-{run}", "bench-fo")
    deadline = time.monotonic() + 60
    while topic not in consumer.list_topics(timeout=10).topics:  # the routes made their copy
        assert time.monotonic() < deadline, f"{topic} was not created on central"
        time.sleep(0.5)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    stop = threading.Event()
    delivered: list[int] = []
    producers = [threading.Thread(target=_produce, args=(platform, dc, topic, rate, stop, delivered)) for dc in DCS]
    for thread in producers:
        thread.start()
    arrivals: list[tuple[float, float, tuple[str, int]]] = []  # (sent, latency, (route, bucket))
    killed_at = held = None
    started = time.time()
    while time.time() - started < 3 * seconds:  # a warm-up, a window before the kill, one after
        if killed_at is None and time.time() - started >= 2 * seconds:
            held = _held(platform, survivor)
            procs[victim].kill()
            procs[victim].wait()
            killed_at = time.time()
        _arrive(consumer, topic, arrivals)
    stop.set()
    for thread in producers:
        thread.join()
    # Every record sent is timed: the dead worker's buckets wait out its session and a takeover,
    # which on a loaded machine ends after the window, and their records come then.
    deadline = time.monotonic() + DRAIN_SECONDS
    while len(arrivals) < len(delivered) and time.monotonic() < deadline:
        _arrive(consumer, topic, arrivals)
    consumer.close()
    procs[victim] = _worker(path, victim, tmp / f"{victim}.log")  # back for the next run
    assert killed_at is not None and held is not None
    # The first third is the new topic's warm-up (found, its copy created, its partitions taken up).
    before = [lat for sent, lat, _ in arrivals if killed_at - seconds <= sent < killed_at]
    after_kept = [lat for sent, lat, where in arrivals if sent >= killed_at and where in held]
    after_moved = [lat for sent, lat, where in arrivals if sent >= killed_at and where not in held]
    return {"killed": victim, "sent": len(delivered), "copied": len(arrivals),
            "survivor_buckets": sorted(f"{r}/{b}" for r, b in held), "before_kill": _percentiles(before),
            "after_kill_survivor_buckets": _percentiles(after_kept),
            "after_kill_moved_buckets": _percentiles(after_moved)}


def run(rate: int, seconds: int, runs: int, base_port: int) -> dict[str, Any]:
    result: dict[str, Any] = {"rate_per_dc": rate, "seconds_per_window": seconds, "runs": []}
    with tempfile.TemporaryDirectory(prefix="conveyor-bench-fo-") as tmp_name:
        tmp = Path(tmp_name)
        platform, path = _platform(tmp, base_port)
        local = LocalPlatform(platform)
        local.up()
        platform = local.clients
        procs = {name: _worker(path, name, tmp / f"{name}.log") for name in ("w0", "w1")}
        try:
            for i in range(runs):
                _settle(platform)
                result["runs"].append(one_run(platform, path, tmp, i, rate, seconds, procs))
                print(f"run {i + 1}:", result["runs"][-1], flush=True)
        finally:
            for proc in procs.values():
                proc.terminate()
            for proc in procs.values():
                proc.wait(60)
            local.down()
    for part in ("before_kill", "after_kill_survivor_buckets", "after_kill_moved_buckets"):
        measured = [r[part]["p99_ms"] for r in result["runs"] if r[part]["records"]]
        result[f"median_{part}_p99_ms"] = statistics.median(measured) if measured else None
    result["host"] = host()
    return result


def main() -> None:
    parser = arguments(__doc__, 14092)
    parser.add_argument("--rate", type=int, default=200, help="records per second into each data centre")
    parser.add_argument("--seconds", type=int, default=20,
                        help="seconds of warm-up, then measured before the kill, then after it")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if args.seconds < MIN_WINDOW:
        parser.error(f"--seconds must be at least {MIN_WINDOW}: the dead worker's buckets wait out the group's "
                     "session timeout (6 s) before they are taken over, so a shorter window measures none of them")
    write_results("replicate_failover", run(args.rate, args.seconds, args.runs, args.base_port), show=True)


if __name__ == "__main__":
    main()
