"""Events/s accepted by one gateway process, side by side with producing the same events directly
with confluent-kafka (the ceiling), plus request latency and resident memory.

- ceiling: the platform's own producer (acks=all, idempotence, lz4) from one Python process,
  pre-serialised events queued for as long as each gateway measurement lasts.
- gateway: one `conveyor gateway serve` process on dc1, loaded by wrk (C, so the load generator
  takes little of the two cores) with ~300-byte ad events in batches of 1, 100, 500 and 1,000.
- single events at a fixed 1,000 requests/s: an open-loop paced client; latency counts from each
  request's scheduled time, so a stall is not hidden (coordinated omission).

The platform's JVMs and the gateway compile for their first minute, so the bench first loads the
gateway for ``--warmup`` seconds (not counted), then measures ``--runs`` rounds of everything
(ceiling included) and reports each figure's median over the rounds, with every round kept.

    python -m bench.gateway_throughput [--seconds 15] [--runs 3] [--warmup 60] [--base-port 28092]
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
import yaml

from bench.common import arguments, demo_data, in_clear, provision, write_results
from conveyor import kafka
from conveyor.config import Platform, parse_platform
from conveyor.gateway.generate import AdTraffic
from conveyor.service import wait_healthy
from conveyor.runtime.local import LocalPlatform

ROOT = Path(__file__).resolve().parents[1]
TOPIC = "ad-events"
TOKEN = "demo-adserver-token"


def _platform(home: Path, base_port: int) -> tuple[Platform, Path]:
    data = in_clear(demo_data())
    data["runtime"]["home"] = str(home)
    data["runtime"]["base_port"] = base_port
    data["gateway"]["port"] = base_port + 500
    for topic in data["topics"].values():  # the file is written elsewhere: keep contracts findable
        if "contract" in topic:
            topic["contract"] = str(ROOT / topic["contract"])
    path = home.parent / "bench-platform.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return parse_platform(data, root=ROOT), path


def ceiling(platform: Platform, events: list[dict], seconds: float) -> dict:
    """The platform's producer queueing pre-serialised events as fast as it can for ``seconds``
    (cycling through ``events``), then waiting for every acknowledgement: a rate sustained as long
    as the gateway's are, where a burst of 300,000 events was over in under half a second."""
    producer = kafka.producer(platform, "dc1", "bench-direct",
                              {"queue.buffering.max.messages": 1_000_000, "batch.size": 1_000_000})
    records = [(e["user_id"].encode(), orjson.dumps(e)) for e in events]
    sent = 0
    started = time.perf_counter()
    deadline = started + seconds
    while time.perf_counter() < deadline:
        start = sent % len(records)
        for key, value in records[start:start + 10_000]:  # the clock is read every 10,000 events
            while True:
                try:
                    producer.produce(TOPIC, value, key)
                    break
                except BufferError:
                    producer.poll(0.01)
            producer.poll(0)
            sent += 1
    assert producer.flush(120) == 0
    elapsed = time.perf_counter() - started
    return {"events": sent, "seconds": round(elapsed, 2), "events_per_s": round(sent / elapsed)}


def require_wrk() -> None:
    """One line and a failing exit status when wrk, the load generator, is missing."""
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed: `apt-get install -y wrk` (Debian's package; `make bench` installs it)")


def _wrk(url: str, body: bytes, seconds: int, connections: int) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write('wrk.method = "POST"\n'
                     f'wrk.headers["Authorization"] = "Bearer {TOKEN}"\n'
                     'wrk.headers["Content-Type"] = "application/json"\n'
                     f"wrk.body = {json.dumps(body.decode())}\n")
    out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", script.name,
                          f"{url}/v1/topics/{TOPIC}/events"], capture_output=True, text=True, check=True).stdout
    Path(script.name).unlink()

    def latency_ms(label: str) -> float:
        value, unit = re.search(rf"^\s+{label}\s+([\d.]+)(us|ms|s)\s*$", out, re.M).groups()  # type: ignore[union-attr]
        return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]

    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"requests_per_s": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),  # type: ignore[union-attr]
            "p50_ms": latency_ms("50%"), "p99_ms": latency_ms("99%"),
            "non_2xx": int(non_2xx.group(1)) if non_2xx else 0}


async def _paced(port: int, body: bytes, rate: int, seconds: int, connections: int = 32) -> dict:
    """Open loop: request i is due at start + i/rate whatever happened before; its latency counts from
    then, so a stall shows in full. Plain keep-alive HTTP/1.1 on asyncio streams: an HTTP client
    library would cost more CPU per request than the gateway itself on this machine."""
    loop = asyncio.get_running_loop()
    request = (f"POST /v1/topics/{TOPIC}/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
               f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    due: asyncio.Queue[float] = asyncio.Queue()
    started = loop.time() + 0.5
    for i in range(rate * seconds):
        due.put_nowait(started + i / rate)
    latencies: list[float] = []
    failures = 0

    async def connection() -> None:
        nonlocal failures
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while not due.empty():
            scheduled = due.get_nowait()
            await asyncio.sleep(max(0.0, scheduled - loop.time()))
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = re.search(rb"(?i)content-length:\s*(\d+)", head)
            await reader.readexactly(int(length.group(1)) if length else 0)
            latencies.append(loop.time() - scheduled)
            failures += not head.startswith(b"HTTP/1.1 200")
        writer.close()

    await asyncio.gather(*(connection() for _ in range(connections)))
    latencies.sort()
    return {"rate": rate, "requests": len(latencies), "failures": failures,
            "p50_ms": round(latencies[len(latencies) // 2] * 1000, 2),
            "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 2),
            "max_ms": round(latencies[-1] * 1000, 2)}


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def _round(platform: Platform, url: str, port: int, events: list[dict], direct: list[dict], seconds: int) -> dict:
    measured: dict = {"direct_ceiling": ceiling(platform, direct, seconds), "gateway": {}}
    for batch in (1, 100, 500, 1000):
        body = orjson.dumps(events[:batch]) if batch > 1 else orjson.dumps(events[0])
        figures = _wrk(url, body, seconds, connections=16 if batch == 1 else 8)
        figures["events_per_s"] = round(figures["requests_per_s"] * batch)
        measured["gateway"][str(batch)] = figures
        print(f"batch {batch}: {figures}", flush=True)
    measured["single_events_paced"] = asyncio.run(_paced(port, orjson.dumps(events[0]), 1000, seconds))
    print(f"paced: {measured['single_events_paced']}", flush=True)
    return measured


def _median(rounds: list[dict]) -> dict:
    """Each figure's median over the rounds."""
    def med(get) -> float:
        return round(statistics.median(get(r) for r in rounds), 2)

    batches = rounds[0]["gateway"]
    return {
        "direct_ceiling": {"events_per_s": med(lambda r: r["direct_ceiling"]["events_per_s"])},
        "gateway": {b: {k: med(lambda r, b=b, k=k: r["gateway"][b][k]) for k in ("events_per_s", "p50_ms", "p99_ms")}
                    for b in batches},
        "single_events_paced": {k: med(lambda r, k=k: r["single_events_paced"][k]) for k in ("p50_ms", "p99_ms", "max_ms")},
    }


def run(seconds: int, base_port: int, runs: int = 3, warmup: int = 60) -> dict:
    traffic = AdTraffic(seed=3)
    events = [traffic.event() for _ in range(1000)]
    size = statistics.mean(len(orjson.dumps(e)) for e in events)
    result: dict = {"event_bytes_mean": round(size), "runs": runs, "warmup_seconds": warmup}
    with tempfile.TemporaryDirectory(prefix="conveyor-bench-gw-") as tmp:
        platform, platform_file = _platform(Path(tmp) / "home", base_port)
        local = LocalPlatform(platform)
        local.up()
        platform = local.clients
        gateway = None
        try:
            provision(platform)
            port = platform.gateway.port
            url = f"http://127.0.0.1:{port}"
            gateway = subprocess.Popen([sys.executable, "-m", "conveyor", "gateway", "serve", "--dc", "dc1",
                                        "--port", str(port), "--platform", str(platform_file)],
                                       stdout=subprocess.DEVNULL, stderr=open(Path(tmp) / "gateway.log", "wb"))
            if not wait_healthy(f"{url}/healthz", 60, alive=lambda: gateway.poll() is None):
                raise SystemExit("gateway did not start:\n" + (Path(tmp) / "gateway.log").read_text())
            if warmup:
                print(f"warming up for {warmup} s", flush=True)
                ceiling(platform, [traffic.event() for _ in range(100_000)], 5)
                _wrk(url, orjson.dumps(events[:500]), warmup, connections=8)
            rounds = []
            for number in range(runs):
                print(f"round {number + 1} of {runs}", flush=True)
                rounds.append(_round(platform, url, port, events, [traffic.event() for _ in range(100_000)], seconds))
            result["rounds"] = rounds
            result.update(_median(rounds))
            result["gateway_rss_mib"] = _rss_mib(gateway.pid)
        finally:
            if gateway is not None:
                gateway.terminate()
                gateway.wait(60)
            local.down()
    at500 = result["gateway"]["500"]["events_per_s"]
    result["batch500_share_of_ceiling"] = round(at500 / result["direct_ceiling"]["events_per_s"], 2)
    result["batch500_share_per_round"] = [round(r["gateway"]["500"]["events_per_s"] / r["direct_ceiling"]["events_per_s"], 2)
                                          for r in result["rounds"]]
    return result


def main() -> None:
    parser = arguments(__doc__, 28092)
    parser.add_argument("--seconds", type=int, default=15, help="duration of each measurement")
    parser.add_argument("--runs", type=int, default=3, help="measured rounds; figures are their medians")
    parser.add_argument("--warmup", type=int, default=60, help="seconds of load before the first round")
    args = parser.parse_args()
    require_wrk()
    result = run(args.seconds, args.base_port, args.runs, args.warmup)
    write_results("gateway_throughput", result, show=True)


if __name__ == "__main__":
    main()
