"""The cost of TLS and authorization: the same platform plaintext and secured, side by side in one run.

Two pairs of one-broker clusters, one pair plaintext (`plain` writable, `plain-central` read), one
`security: sasl_ssl` (SCRAM-SHA-512 over TLS, Kafka's authorizer on, each part its own principal
and ACLs from `conveyor acl apply`), as the demo runs every cluster:

1. Gateway events/s: one `conveyor gateway serve` process per writable cluster, loaded in turn by
   wrk with batches of 500 ~300-byte ad events (after a warm-up of each), ``--runs`` rounds that
   alternate which goes first; the figures are medians with every round kept. The secured one
   also serves HTTPS with the local CA's certificate, as the demo's do (wrk over TLS, keep-alive).
2. Replicator records per CPU-second: N preloaded 1 KB records in 12 partitions copied by one
   exactly-once worker per route (`plain` -> `plain-central`, `secured` -> `secured-central`), CPU
   being the worker process's user + system time.

    python -m bench.security_cost [--seconds 10] [--runs 3] [--warmup 20] [--records 100000]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson
import yaml

from bench.common import arguments, demo_data, host, provision, write_results
from bench.gateway_throughput import _wrk, require_wrk
from bench.replicate_vs_mm2 import _copied_ours, _create, _preload, _start_ours, throughput
from conveyor.config import Platform, load_resolved_platform, parse_platform
from conveyor.gateway.generate import AdTraffic
from conveyor.runtime.local import LocalPlatform
from conveyor.service import wait_healthy
from conveyor.tls import trusted

ROOT = Path(__file__).resolve().parents[1]
#: (writable cluster, its route's read cluster) per security setting.
PAIRS = {"plaintext": ("plain", "plain-central"), "sasl_ssl": ("secured", "secured-central")}
BATCH = 500


def _platform(tmp: Path, base_port: int) -> tuple[Platform, dict[str, Path]]:
    """The platform, and per security setting the file its gateway serves with (its edge in clear,
    or on TLS)."""
    data = demo_data()
    data["runtime"] |= {"home": str(tmp / "home"), "base_port": base_port}
    data["clusters"] = {}
    for security, (writable, read) in PAIRS.items():
        data["clusters"][writable] = {"role": "writable", "brokers": 1, "security": security}
        data["clusters"][read] = {"role": "read", "brokers": 1, "security": security}
    data["topics"] = {name: {**spec, "contract": str(ROOT / spec["contract"])} if "contract" in spec else spec
                      for name, spec in data["topics"].items() if name == "ad-events"}
    data["routes"] = {writable: {"source": writable, "destination": read, "pattern": "rep-.*"}
                      for writable, read in PAIRS.values()}
    data["pipeline"] |= {"source": "plain-central", "realtime": {"views": {}}}
    data["dispatch"] |= {"cluster": "plain-central"}
    data["ops"].pop("components", None)
    files = {}
    for security, tls in (("plaintext", None), ("sasl_ssl", {})):
        data["gateway"] = {key: value for key, value in data["gateway"].items() if key != "tls"}
        if tls is not None:
            data["gateway"]["tls"] = tls
        files[security] = tmp / f"platform-{security}.yaml"
        files[security].write_text(yaml.safe_dump(data, sort_keys=False))
    return parse_platform(data, root=ROOT), files


def _gateway(platform_file: Path, cluster: str, url: str, log: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "conveyor", "gateway", "serve", "--dc", cluster, "--port",
                             url.rsplit(":", 1)[1], "--platform", str(platform_file)],
                            stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
    verify = trusted(load_resolved_platform(platform_file))
    if not wait_healthy(f"{url}/healthz", 60, alive=lambda: proc.poll() is None, verify=verify):
        raise SystemExit(f"gateway on {cluster} did not start:\n" + log.read_text())
    return proc


def gateways(files: dict[str, Path], tmp: Path, base_port: int, seconds: int, runs: int, warmup: int) -> dict:
    body = orjson.dumps([AdTraffic(seed=5).event() for _ in range(BATCH)])
    urls = {security: f"{'https' if security == 'sasl_ssl' else 'http'}://127.0.0.1:{base_port + 500 + i}"
            for i, security in enumerate(PAIRS)}
    procs = {s: _gateway(files[s], PAIRS[s][0], urls[s], tmp / f"gateway-{s}.log") for s in PAIRS}
    try:
        for security, url in urls.items():
            print(f"warming up the {security} gateway ({url}) for {warmup} s", flush=True)
            _wrk(url, body, warmup, connections=8)
        rounds: list[dict] = []
        for number in range(runs):
            order = list(PAIRS) if number % 2 == 0 else list(reversed(PAIRS))
            measured = {}
            for security in order:
                figures = _wrk(urls[security], body, seconds, connections=8)
                measured[security] = {"events_per_s": round(figures["requests_per_s"] * BATCH),
                                      "p99_ms": figures["p99_ms"], "non_2xx": figures["non_2xx"]}
            print(f"round {number + 1}: {measured}", flush=True)
            rounds.append(measured)
    finally:
        for proc in procs.values():
            proc.terminate()
            proc.wait(60)
    medians = {s: round(statistics.median(r[s]["events_per_s"] for r in rounds)) for s in PAIRS}
    return {"batch": BATCH, "seconds": seconds, "rounds": rounds, "events_per_s_median": medians,
            "secured_share": round(medians["sasl_ssl"] / medians["plaintext"], 2)}


def replicators(platform: Platform, files: dict[str, Path], tmp: Path, records: int) -> dict:
    result: dict = {"records": records}
    for security, (writable, _) in PAIRS.items():
        _create(platform, writable, ["rep-tput"], 12)
        _preload(platform, "rep-tput", records, writable)
    for security, (writable, _) in PAIRS.items():
        worker = _start_ours(files[security], tmp / f"replicator-{security}.log", route=writable)
        try:
            result[security] = throughput(f"replicator ({security})", worker,
                                          lambda route=writable: _copied_ours(platform, "rep-tput", 12, route), records)
        finally:
            worker.terminate()
            worker.wait(60)
        print(f"{security}: {result[security]}", flush=True)
    result["secured_share_per_cpu_s"] = round(result["sasl_ssl"]["records_per_cpu_s"]
                                              / result["plaintext"]["records_per_cpu_s"], 2)
    return result


def run(seconds: int, runs: int, warmup: int, records: int, base_port: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="conveyor-bench-sec-") as tmp_name:
        tmp = Path(tmp_name)
        platform, files = _platform(tmp, base_port)
        local = LocalPlatform(platform)
        local.up()
        platform = local.clients
        try:
            provision(platform)
            return {"host": host(), "gateway": gateways(files, tmp, base_port, seconds, runs, warmup),
                    "replicator": replicators(platform, files, tmp, records)}
        finally:
            local.down()


def main() -> None:
    parser = arguments(__doc__, 25092)
    parser.add_argument("--seconds", type=int, default=10, help="duration of each gateway measurement")
    parser.add_argument("--runs", type=int, default=3, help="gateway rounds; figures are their medians")
    parser.add_argument("--warmup", type=int, default=20, help="seconds of load on each gateway before the rounds")
    parser.add_argument("--records", type=int, default=100_000, help="records each replicator copies")
    args = parser.parse_args()
    require_wrk()
    write_results("security_cost", run(args.seconds, args.runs, args.warmup, args.records, args.base_port), show=True)


if __name__ == "__main__":
    main()
