"""The consumer dispatcher against a plain consumer group and Kafka share groups, in one run.

- slow handler (20 ms a message) on a 3-partition topic: a plain consumer group (3 consumers, the
  most that get a partition), the dispatcher with 30 clients (one `conveyor dispatch serve`
  process, 30 `Subscriber`s of concurrency 1), and a share group (KIP-932) of 30 share consumers.
  Goal: the dispatcher at least 8x the plain group.
- instant handler: messages/s through one dispatcher node over a backlog, read by (a) the
  `Subscriber` (threads, one message per handler call) and (b) a frame client that acks each
  batch frame whole: the node's own capacity without the Python client's per-message work.
- delivery latency: produce at a fixed rate; a `Subscriber` with an instant handler records the
  time from each message's Kafka timestamp (producer create time) to the handler: p50 and p99;
  a plain consumer reads a stream paced the same way, as the peer.
- the three dispatcher scenarios run twice, against a node of each backend (`dispatch.backend`
  classic, then share: the node reads through a KIP-932 share group); the share backend's
  figures are under ``share_backend`` in the JSON.

Writes bench/results/dispatch_throughput.json. Run ``python -m bench.dispatch_throughput``
(``--platform FILE`` to use clusters already up; otherwise the demo platform is started on
``--base-port``; ``--quick`` for smaller runs).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import grpc
import httpx
import yaml
from confluent_kafka import ShareConsumer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from bench.common import in_clear, without_monitoring, write_results
from conveyor import kafka
from conveyor.config import Platform, load_platform, load_resolved_platform
from conveyor_sdk.subscriber import Message, Subscriber
from conveyor_sdk.protos import dispatch_pb2 as pb
from conveyor_sdk.protos import dispatch_pb2_grpc as pb_grpc
from conveyor.runtime.local import LocalPlatform

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "demo-mailer-token"
SLOW = 0.020
#: Messages read before the latency is measured.
_WARM_UP = 200


def _with_topics(source: Path, folder: Path, base_port: int | None, topics: list[str],
                 backend: str = "classic") -> Path:
    data = in_clear(yaml.safe_load(source.read_text()))
    data["dispatch"] = {**(data.get("dispatch") or {}), "backend": backend}
    if base_port is not None:  # a platform of its own
        data["runtime"].update(home=str(folder / "home"), base_port=base_port)
        without_monitoring(data)
    for topic in data["topics"].values():  # the file is written elsewhere: keep contracts findable
        if "contract" in topic:
            topic["contract"] = str(source.parent / topic["contract"])
    for name in topics:
        data["topics"][name] = {"partitions": 3, "consumers": ["mailer"], "clusters": ["central"]}
    path = folder / f"bench-dispatch-{backend}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _produce(platform: Platform, topic: str, count: int, size: int = 100, rate: float | None = None) -> None:
    producer = kafka.producer(platform, "central", "bench-dispatch", {"queue.buffering.max.messages": 1_000_000})
    payload = b"x" * size
    started = time.perf_counter()
    for i in range(count):
        producer.produce(topic, payload, key=str(i).encode())
        producer.poll(0)
        if rate is not None:
            wait = started + i / rate - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
    assert producer.flush(120) == 0


@contextmanager
def _node(path: Path, port: int, metrics_port: int) -> Iterator[str]:
    process = subprocess.Popen([sys.executable, "-m", "conveyor", "dispatch", "serve", "-p", str(path),
                                "--port", str(port), "--metrics-port", str(metrics_port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{metrics_port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and process.poll() is None, "dispatcher did not start"
            time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(60)


class Meter:
    """Counts handled messages; the rate runs from the first to the last one."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.count = 0
        self.first = self.last = 0.0
        self.latencies: list[float] = []
        self.done = threading.Event()
        self._lock = threading.Lock()

    def tick(self, n: int = 1, timestamp_ms: int | None = None) -> None:
        now = time.time()
        with self._lock:
            if not self.count:
                self.first = now
            self.count += n
            self.last = now
            if timestamp_ms is not None:
                self.latencies.append(now - timestamp_ms / 1000)
            if self.count >= self.expected:
                self.done.set()

    def rate(self) -> float:
        return self.count / max(self.last - self.first, 1e-9)

    def wait(self, timeout: float) -> None:
        if not self.done.wait(timeout):
            raise TimeoutError(f"handled {self.count} of {self.expected} in {timeout} s")


def plain_group(platform: Platform, topic: str, meter: Meter, consumers: int = 3) -> None:
    """The peer: each consumer handles its partitions one message at a time and commits."""
    stop = threading.Event()

    def run(i: int) -> None:
        consumer = kafka.consumer(platform, "central", f"bench-plain-{topic}", f"plain-{i}")
        consumer.subscribe([topic])
        while not stop.is_set():
            message = consumer.poll(0.2)
            if message is None or message.error():
                continue
            time.sleep(SLOW)
            consumer.store_offsets(message)
            meter.tick()
        consumer.commit(asynchronous=False)
        consumer.close()

    _threads(run, consumers, meter, stop)


def _threads(run: Callable[[int], None], count: int, meter: Meter, stop: threading.Event) -> None:
    """``run(i)`` on ``count`` threads until the meter has seen every message."""
    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    try:
        meter.wait(600)
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)


def share_group(platform: Platform, topic: str, meter: Meter, consumers: int = 30) -> None:
    """KIP-932: every share consumer acknowledges each record it handled, explicitly."""
    group = f"bench-share-{topic}"
    admin = kafka.admin(platform, "central")
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    stop = threading.Event()
    seen: set[tuple[int, int]] = set()
    lock = threading.Lock()

    def run(_: int) -> None:
        # Small polls, so that 30 consumers share the records instead of a few holding big batches.
        config = kafka.client_config(platform, "central", {"group.id": group, "max.poll.records": 10,
                                                           "share.acknowledgement.mode": "explicit"})
        consumer = ShareConsumer(config)
        consumer.subscribe([topic])
        while not stop.is_set():
            messages = consumer.poll(0.2)
            for message in messages:
                if message.error() is None:
                    time.sleep(SLOW)
                    consumer.acknowledge(message)
                    with lock:
                        fresh = (message.partition(), message.offset()) not in seen
                        seen.add((message.partition(), message.offset()))
                    if fresh:  # a redelivery after a lock timeout is not progress
                        meter.tick()
            if messages:
                consumer.commit_async()
        consumer.close()

    _threads(run, consumers, meter, stop)


def subscribers(node: str, topic: str, meter: Meter, clients: int, concurrency: int, credit: int | None,
                handler_delay: float, latency: bool = False, group: str = "mailer") -> None:
    def handle(message: Message) -> None:
        if handler_delay:
            time.sleep(handler_delay)
        meter.tick(timestamp_ms=message.timestamp_ms if latency else None)

    subs = [Subscriber(topic, group, handle, concurrency, nodes=[node], token=TOKEN, credit=credit)
            for _ in range(clients)]
    for sub in subs:
        sub.start()
    try:
        meter.wait(600)
    finally:
        for sub in subs:
            sub.stop()


def frame_client(node: str, topic: str, meter: Meter, credit: int, group: str = "mailer") -> None:
    """Acks every frame whole as it arrives: what the node alone can push."""
    import queue

    requests: queue.SimpleQueue[pb.ReadRequest | None] = queue.SimpleQueue()
    requests.put(pb.ReadRequest(subscribe=pb.Subscribe(topic=topic, group=group, credit=credit)))
    with grpc.insecure_channel(node) as channel:
        stream = pb_grpc.ReaderStub(channel).Read(iter(requests.get, None),
                                                  metadata=(("authorization", f"Bearer {TOKEN}"),))
        for frame in stream:
            if not frame.messages:
                continue
            ids = pb.Ids(partitions=[m.partition for m in frame.messages],
                         offsets=[m.offset for m in frame.messages])
            requests.put(pb.ReadRequest(acks=ids, credit=len(frame.messages)))
            meter.tick(len(frame.messages))
            if meter.done.is_set():
                break
        requests.put(None)


def plain_reader(platform: Platform, topic: str, meter: Meter) -> None:
    """The latency peer: a plain consumer of its own group reading the same paced stream."""
    consumer = kafka.consumer(platform, "central", f"bench-plain-latency-{topic}", "plain-latency")
    consumer.subscribe([topic])
    while not meter.done.is_set():
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            meter.tick(timestamp_ms=message.timestamp()[1])
    consumer.close()


def _measure(label: str, expected: int, run: Callable[[Meter], None]) -> dict[str, Any]:
    meter = Meter(expected)
    run(meter)
    return _summary(label, meter)


def _summary(label: str, meter: Meter) -> dict[str, Any]:
    result: dict[str, Any] = {"messages": meter.count, "messages_per_s": round(meter.rate(), 1)}
    if meter.latencies:
        ordered = sorted(meter.latencies)
        result["latency_p50_ms"] = round(1000 * statistics.median(ordered), 1)
        result["latency_p99_ms"] = round(1000 * ordered[int(0.99 * (len(ordered) - 1))], 1)
    print(f"{label:<48} {result}", flush=True)
    return result


def backend_scenarios(platform: Platform, node: str, topics: dict[str, str], label: str, counts: tuple[int, int],
                      paced: tuple[int, int], group: str) -> dict[str, Any]:
    """The dispatcher scenarios against one node of one backend (classic or share); a group id
    is a consumer group or a share group, never both, so each backend reads as its own group, and
    each scenario as its own group: one group over several topics would rebalance the scenarios
    before it whenever a later one joins."""
    slow_count, fast_count = counts
    results: dict[str, Any] = {}
    results["dispatcher_30_clients"] = _measure(
        f"20 ms handler, {label}, 30 clients", slow_count,
        lambda m: subscribers(node, topics["slow"], m, 30, 1, None, SLOW, group=f"{group}-slow"))
    results["instant_subscriber"] = _measure(
        f"instant handler, {label}, Subscriber", fast_count,
        lambda m: subscribers(node, topics["fast-sub"], m, 2, 8, 2_000, 0.0, group=f"{group}-sub"))
    results["instant_frames"] = _measure(
        f"instant handler, {label}, frame client", fast_count,
        lambda m: frame_client(node, topics["fast-frame"], m, 5_000, f"{group}-frames"))
    # Warm up: the group joined and its assignment settled (a share group's first assignment
    # takes a heartbeat interval, 5 s at the least), so the latency is the steady state's.
    _produce(platform, topics["latency"], _WARM_UP)
    subscribers(node, topics["latency"], Meter(_WARM_UP), 1, 8, 64, 0.0, group=f"{group}-latency")
    rate, seconds = paced
    producer = threading.Thread(target=_produce, args=(platform, topics["latency"], rate * seconds),
                                kwargs={"rate": rate})
    producer.start()
    results["latency_at_fixed_rate"] = {"rate_per_s": rate, **_measure(
        f"latency at {rate}/s, {label}, Subscriber", rate * seconds,
        lambda m: subscribers(node, topics["latency"], m, 1, 8, 64, 0.0, latency=True, group=f"{group}-latency"))}
    producer.join()
    return results


def run(platform_path: Path, quick: bool, node_port: int) -> dict[str, Any]:
    counts = (600, 10_000) if quick else (4_500, 200_000)
    paced = (500, 4) if quick else (2_000, 20)  # messages/s, seconds
    scenario_topics = ("slow", "fast-sub", "fast-frame", "latency")
    names = {k: f"bench-dispatch-{k}-{uuid.uuid4().hex[:6]}" for k in ("plain", "share", "plain-latency")}
    backends = {backend: {k: f"bench-dispatch-{backend}-{k}-{uuid.uuid4().hex[:6]}" for k in scenario_topics}
                for backend in ("classic", "share")}
    every = [*names.values(), *(t for topics in backends.values() for t in topics.values())]
    with tempfile.TemporaryDirectory() as tmp:
        path = _with_topics(platform_path, Path(tmp), None, every)
        share_path = _with_topics(platform_path, Path(tmp), None, every, backend="share")
        platform = load_resolved_platform(path)
        admin = kafka.admin(platform, "central")
        cluster = platform.cluster("central")
        for future in admin.create_topics([NewTopic(t, 3, cluster.default_replication_factor)
                                           for t in every]).values():
            future.result(60)
        try:
            for topic in (names["plain"], names["share"], *(b["slow"] for b in backends.values())):
                _produce(platform, topic, counts[0])
            for topic in (b[k] for b in backends.values() for k in ("fast-sub", "fast-frame")):
                _produce(platform, topic, counts[1])
            results: dict[str, Any] = {"slow_handler_ms": SLOW * 1000}
            results["plain_group_3_consumers"] = _measure(
                "20 ms handler, plain group, 3 consumers", counts[0],
                lambda m: plain_group(platform, names["plain"], m))
            results["share_group_30_consumers"] = _measure(
                "20 ms handler, share group, 30 consumers", counts[0],
                lambda m: share_group(platform, names["share"], m))
            with _node(path, node_port, node_port + 1) as node:
                results.update(backend_scenarios(platform, node, backends["classic"], "classic dispatcher",
                                                 counts, paced, f"mailer.classic-{uuid.uuid4().hex[:6]}"))
            with _node(share_path, node_port + 2, node_port + 3) as node:
                results["share_backend"] = backend_scenarios(platform, node, backends["share"],
                                                             "share-backed dispatcher", counts, paced,
                                                             f"mailer.share-{uuid.uuid4().hex[:6]}")
            rate, seconds = paced
            producer = threading.Thread(target=_produce, args=(platform, names["plain-latency"], rate * seconds),
                                        kwargs={"rate": rate})
            plain = Meter(rate * seconds)
            producer.start()
            plain_reader(platform, names["plain-latency"], plain)
            producer.join()
            results["latency_plain_consumer"] = _summary(f"latency at {rate}/s, plain consumer", plain)
        finally:
            for future in admin.delete_topics(every).values():
                future.result(60)
    plain_rate = results["plain_group_3_consumers"]["messages_per_s"]
    results["dispatcher_vs_plain"] = round(results["dispatcher_30_clients"]["messages_per_s"] / plain_rate, 1)
    results["share_vs_plain"] = round(results["share_group_30_consumers"]["messages_per_s"] / plain_rate, 1)
    results["share_backend_vs_plain"] = round(
        results["share_backend"]["dispatcher_30_clients"]["messages_per_s"] / plain_rate, 1)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platform", type=Path, help="a platform file whose clusters are up")
    parser.add_argument("--base-port", type=int, default=20092, help="for the demo platform this run starts")
    parser.add_argument("--node-port", type=int, default=20700, help="the dispatcher's gRPC port; metrics on +1")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.platform is not None:
        result = run(args.platform, args.quick, args.node_port)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            path = _with_topics(ROOT / "platform.yaml", Path(tmp), args.base_port, [])
            local = LocalPlatform(load_platform(path))
            local.up()
            try:
                result = run(path, args.quick, args.node_port)
            finally:
                local.down()
    result["host"] = {"cpus": os.cpu_count()}
    write_results("dispatch_throughput", result, show=True)


if __name__ == "__main__":
    main()
