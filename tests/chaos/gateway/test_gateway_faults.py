"""The gateway when brokers fail: failover between data centres loses no accepted event, and a
topic stuck on a frozen broker never holds up another topic."""

from __future__ import annotations

import copy
import os
import signal
import statistics

import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import orjson
import pytest
from confluent_kafka.admin import NewTopic

from conveyor import kafka
from conveyor.config import Platform, parse_platform
from conveyor.config.resolved import resolved
from conveyor.runtime import processes
from conveyor.runtime.local import LocalPlatform
from tests.conftest import demo_event, eventually, platform_variant, read_topic

pytestmark = pytest.mark.chaos
ADSERVER = {"Authorization": "Bearer demo-adserver-token", "Content-Type": "application/json"}


def _post(client: httpx.Client, url: str, topic: str, events) -> httpx.Response:
    return client.post(f"{url}/v1/topics/{topic}/events", content=orjson.dumps(events), headers=ADSERVER)


def _wait_health(client: httpx.Client, url: str, writing_to: str, timeout: float) -> None:
    eventually(lambda: client.get(f"{url}/healthz").json()["writing_to"] == writing_to, timeout,
               f"the gateway to write to {writing_to}", interval=0.5)


# 20 events: answered per event, each with its own delivery callback; 150 (above summary_above):
# answered per partition, produced in one batch call whose failed records are found by their bytes.
@pytest.mark.parametrize("size", [20, 150])
def test_failover_to_dc2_and_back_loses_no_accepted_event(provisioned: Platform, local: LocalPlatform,
                                                          platform_data, platform_file: Path, serve_gateway,
                                                          size: int):
    data = copy.deepcopy(platform_data)
    data["gateway"] = {**data.get("gateway", {}), "failover_after": "3s"}
    platform = resolved(parse_platform(data, root=platform_file.parent))
    url = serve_gateway(platform, "dc1")
    accepted: list[str] = []
    clusters_used = set()
    with httpx.Client(timeout=60) as client:
        def send(rounds: int) -> None:
            for _ in range(rounds):
                batch = [demo_event(user_id=f"user-{i}") for i in range(size)]
                answer = _post(client, url, "ad-events", batch)
                assert answer.status_code == 200, answer.text
                accepted.extend(e["event_id"] for e in batch)
                answered = answer.json()
                assert answered["accepted"] == size
                placed = answered.get("events") or answered["partitions"]
                clusters_used.update(e["cluster"] for e in placed)
                assert sum(p.get("count", 1) for p in placed) == size

        send(10)
        local.kill_broker("dc1", 1)  # dc1's only broker: the whole data centre's cluster is gone
        send(10)
        assert client.get(f"{url}/healthz").json()["failed_over"] is True
        assert 'conveyor_gateway_failovers_total{from_cluster="dc1",to_cluster="dc2"} 1.0' in \
            client.get(f"{url}/metrics").text
        local.start_brokers("dc1", 1)
        _wait_health(client, url, "dc1", 60)
        send(10)
    assert clusters_used == {"dc1", "dc2"}

    landed = {orjson.loads(m.value())["event_id"]
              for cluster in ("dc1", "dc2") for m in read_topic(platform, cluster, "ad-events")}
    lost = [e for e in accepted if e not in landed]
    assert not lost, f"{len(lost)} of {len(accepted)} accepted events are on neither dc1 nor dc2"


def test_healthz_and_readyz_answer_503_while_no_cluster_of_the_gateway_answers(provisioned: Platform,
                                                                                 local: LocalPlatform, serve_gateway):
    url = serve_gateway(provisioned, "dc1")  # dc1's cluster, then dc2's

    def answer(path: str) -> tuple[int, dict]:
        got = httpx.get(f"{url}{path}", timeout=30)
        return got.status_code, got.json()

    status, body = answer("/healthz")
    assert status == 200 and body["status"] == "ok" and body["writable"] == "dc1", body
    assert answer("/readyz")[0] == 200
    for cluster in ("dc1", "dc2"):
        assert local.kill_broker(cluster, 1) is not None, f"{cluster}'s broker was not running"
    try:
        status, body = eventually(lambda: (got := answer("/healthz"))[0] == 503 and got, 30,
                                  "/healthz to say 503 with both clusters down")
        assert body["status"] == "unwritable" and body["writable"] is None, body
        status, body = answer("/readyz")
        assert status == 503 and body["ready"] is False, body
    finally:
        for cluster in ("dc1", "dc2"):
            local.start_brokers(cluster, 1)
    eventually(lambda: answer("/healthz")[0] == 200 and answer("/readyz")[0] == 200, 60,
               "/healthz and /readyz to say 200 with the clusters back")


#: Requests timed on the fast topic before and during the freeze.
SAMPLES = 300


def _lane(topic: str, lanes: int) -> int:
    return zlib.crc32(topic.encode()) % lanes


def test_a_topic_stuck_on_a_frozen_broker_does_not_slow_another(provisioned: Platform, local: LocalPlatform,
                                                               platform_data, platform_file: Path, serve_gateway):
    # central (three brokers) acts as the writable cluster here, so one broker can be frozen
    # while another keeps serving: the slow topic lives on broker 3 only, the fast one on 1 and 2.
    lanes = 16
    slow = "slow-topic"
    fast = next(f"fast-topic-{i}" for i in range(100) if _lane(f"fast-topic-{i}", lanes) != _lane(slow, lanes))
    data = copy.deepcopy(platform_data)
    data["clusters"]["central"]["role"] = "writable"
    data["gateway"] = {**data.get("gateway", {}), "lanes": lanes, "workers_per_lane": 2, "queue_per_lane": 6}
    for name in (slow, fast):
        data["topics"][name] = {"partitions": 2, "contract": "contracts/ad-events.schema.json",
                                "producers": ["adserver"], "clusters": ["central"],
                                "replication_factor": 1 if name == slow else 2, "min_insync_replicas": 1}
    # Central turned writable: the gateway's principal is granted its topics there (a secured central).
    platform = platform_variant(data, platform_file.parent / "gateway-faults.yaml")
    admin = kafka.admin(platform, "central")
    futures = admin.create_topics([
        NewTopic(slow, num_partitions=2, replica_assignment=[[3], [3]], config={"min.insync.replicas": "1"}),
        NewTopic(fast, num_partitions=2, replica_assignment=[[1, 2], [2, 1]], config={"min.insync.replicas": "1"}),
    ])
    for future in futures.values():
        future.result()
    url = serve_gateway(platform, "central")
    broker3 = local.node_daemon(local.layout("central").broker(3))

    def latencies(client: httpx.Client, count: int) -> list[float]:
        times = []
        for _ in range(count):
            started = time.perf_counter()
            assert _post(client, url, fast, demo_event()).status_code == 200
            times.append(time.perf_counter() - started)
        return times

    overloaded: list[httpx.Response] = []
    slow_answers: list[httpx.Response] = []
    with httpx.Client(timeout=120) as client:
        # Enough requests that the 99th percentile is not simply the slowest one.
        before = latencies(client, SAMPLES)
        pid = processes.running_pid(broker3)
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            with ThreadPoolExecutor(max_workers=12) as pool:
                def stuck_request() -> None:
                    with httpx.Client(timeout=120) as own:
                        answer = _post(own, url, slow, demo_event())
                        (slow_answers if answer.status_code == 200 else overloaded).append(answer)

                pending = [pool.submit(stuck_request) for _ in range(12)]
                time.sleep(2)  # the slow topic's lane is now full of requests waiting on broker 3
                during = latencies(client, SAMPLES)
                still_waiting = sum(1 for f in pending if not f.done())
                os.kill(pid, signal.SIGCONT)
                for future in pending:
                    future.result()
        finally:
            os.kill(pid, signal.SIGCONT)
    # 2 writing + 6 queued fit the lane; the other 4 were refused at once with Retry-After.
    assert len(overloaded) == 4 and all(a.status_code == 503 and a.headers["Retry-After"] for a in overloaded)
    assert all(a.json()["error"] == "overloaded" for a in overloaded)
    assert still_waiting == 8, "the slow topic's requests should have been waiting on the frozen broker"
    p99_before = statistics.quantiles(before, n=100)[98]
    p99_during = statistics.quantiles(during, n=100)[98]
    print(f"fast topic p99: {p99_before * 1000:.1f} ms before, {p99_during * 1000:.1f} ms with {slow} stuck; "
          f"slowest during: {[round(t, 3) for t in sorted(during)[-5:]]}, median {statistics.median(during):.3f}")
    # Not a benchmark: the point is the fast topic is never queued behind the stuck one, whose
    # requests waited for seconds; its p99 stays far below that.
    assert p99_during < 1.0
    assert len(slow_answers) == 8
    _wait_registered(local, "central", 3)


def _wait_registered(local: LocalPlatform, cluster: str, broker_id: int) -> None:
    admin = kafka.admin(local.clients, cluster)
    eventually(lambda: broker_id in {n.id for n in admin.describe_cluster(request_timeout=10).result().nodes}, 60,
               f"broker {broker_id} to be registered on {cluster}", interval=0.5)

