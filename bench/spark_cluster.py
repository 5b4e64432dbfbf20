"""The pipelines on a Spark standalone cluster against ``local[2]``, on the same data in one run:

- ``lake``: one ``run_once`` (what ``conveyor lake run --once`` runs) over the same topic of
  ~1 KB JSON events into fresh tables, per master: the best of ``--rounds``, Spark's start excluded
  (bench.lake_ingest's measure, with the demo's de-duplication window unless ``--dedup``);
- ``realtime``: the real-time job's latency p50/p99 from event time to Redis write and its rate, per
  master, under the same live traffic at ``--rate`` events/s on a topic of its own
  (bench.realtime_views's measure: warm-up, then ``--duration`` s measured).

The cluster is conveyor.runtime.spark_standalone's master and one worker (the tests' cluster),
its worker offering ``--worker-cores`` (default 2, as many as ``local[2]`` has) and
``--worker-memory`` to one executor of Spark's default 1 GiB heap; the executor's Python is this
interpreter. Each job runs in a driver process of its own per master, client mode, as it would be
started by hand. The platform is the demo's central cluster (3 brokers, RF 3) and a Redis on their
own ports and folder; everything shares this machine, so the cluster's figures carry the cost of
its extra JVMs and of shipping tasks and code over loopback, not the gain of more hosts.

    python -m bench.spark_cluster [--events 200000] [--rounds 2] [--rate 20000] [--duration 60]
                                  [--warmup 30] [--base-port 30300]

Writes bench/results/spark_cluster.json.
"""

from __future__ import annotations

import multiprocessing
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from bench.common import arguments, host, provision, write_results
from bench.lake_ingest import lake_platform, lake_seconds, produce
from bench.realtime_views import measure_realtime, realtime_platform
from conveyor.config import Platform
from conveyor.config.resolved import resolved
from conveyor.pipeline.spark import spark_session
from conveyor.runtime.local import LocalPlatform
from conveyor.runtime.spark_standalone import StandaloneCluster, StandaloneSettings

ROOT = Path(__file__).resolve().parents[1]
#: The standalone master's port is base_port + this (and its UI, the worker, the worker's UI the next three).
SPARK_OFFSET = 470


@dataclass(frozen=True)
class ClusterBench:
    events: int = 200_000
    size: int = 1024
    rounds: int = 2
    dedup: str = "1h"
    rate: int = 20_000
    duration: float = 60
    warmup: float = 30
    #: Below Linux's ephemeral ports (32768 up), which any client's socket may hold.
    base_port: int = 30300
    worker_cores: int = 2
    worker_memory: str = "1g"


@dataclass(frozen=True)
class LakeFigure:
    master: str
    seconds: float
    events_per_second: int


def _call(conn: Any, function: Callable[..., Any], args: tuple[Any, ...]) -> None:
    conn.send(function(*args))


def _in_own_process(function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)`` in a new process: one Spark driver per process, and a fresh one per master."""
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    # Not a daemon: the real-time measure starts its traffic process from there.
    process = context.Process(target=_call, args=(send, function, args))
    process.start()
    send.close()
    try:
        result = receive.recv()
    except EOFError:
        result = None
    process.join()
    if process.exitcode != 0 or result is None:
        raise RuntimeError(f"{function.__name__} failed in its process (exit code {process.exitcode}); see above")
    return result


def _lake_seconds(platform: Platform, events: int, rounds: int) -> float:
    # Plain data back: run as ``python -m``, this module's classes would not unpickle in the parent.
    spark = spark_session(platform, "cluster-bench-lake")
    return min(lake_seconds(spark, platform, events) for _ in range(rounds))


def _lake(platform: Platform, events: int, rounds: int) -> LakeFigure:
    seconds = _in_own_process(_lake_seconds, platform, events, rounds)
    return LakeFigure(platform.pipeline.spark.master, round(seconds, 2), round(events / seconds))


def run(bench: ClusterBench) -> dict[str, Any]:
    demo_spark = yaml.safe_load((ROOT / "platform.yaml").read_text())["pipeline"]["spark"]
    with tempfile.TemporaryDirectory(prefix="conveyor-cluster-bench-") as tmp:
        folder = Path(tmp)
        cluster = StandaloneCluster(StandaloneSettings(folder / "spark", bench.base_port + SPARK_OFFSET,
                                                       cores=bench.worker_cores, memory=bench.worker_memory))
        masters = {
            "local": {**demo_spark, "master": "local[2]"},
            "standalone": {**demo_spark, "master": cluster.master, "driver_host": "127.0.0.1",
                           "driver_bind_address": "127.0.0.1", "executor_python": sys.executable},
        }
        lakes = {name: lake_platform(folder, bench.base_port, bench.dedup, spark) for name, spark in masters.items()}
        views = {name: realtime_platform(folder, bench.base_port, f"bench-rt-{name}", spark)
                 for name, spark in masters.items()}
        local = LocalPlatform(views["local"])  # central and Redis: every platform here names the same ones
        local.up()
        lakes = {name: resolved(platform) for name, platform in lakes.items()}
        views = {name: resolved(platform) for name, platform in views.items()}
        try:
            for platform in (*lakes.values(), *views.values()):
                provision(platform)
            produced_bytes = produce(lakes["local"], bench.events, bench.size)
            with cluster:
                lake = {name: _lake(platform, bench.events, bench.rounds) for name, platform in lakes.items()}
                realtime = {name: _in_own_process(measure_realtime, platform, bench.rate, bench.duration, bench.warmup)
                            for name, platform in views.items()}
        finally:
            local.down()
    return {
        "settings": asdict(bench),
        "host": host(),
        "event_bytes": round(produced_bytes / bench.events),
        "lake": {name: asdict(figure) for name, figure in lake.items()},
        "lake_standalone_to_local": round(lake["standalone"].events_per_second / lake["local"].events_per_second, 2),
        "realtime": {name: {"master": masters[name]["master"], **figures} for name, figures in realtime.items()},
    }


def _show(result: dict[str, Any]) -> None:
    settings = result["settings"]
    lake = Table(title=f"lake: {settings['events']:,} events of ~{result['event_bytes']} bytes, "
                       f"de-duplication window {settings['dedup']}, best of {settings['rounds']}")
    for column in ("master", "seconds", "events/s", "x local[2]"):
        lake.add_column(column)
    local_rate = result["lake"]["local"]["events_per_second"]
    for figure in result["lake"].values():
        lake.add_row(figure["master"], f"{figure['seconds']:.2f}", f"{figure['events_per_second']:,}",
                     f"{figure['events_per_second'] / local_rate:.2f}")
    Console().print(lake)
    realtime = Table(title=f"real-time views: {settings['rate']:,} events/s offered, {settings['duration']:g} s measured")
    for column in ("master", "events", "processed/s", "latency p50", "latency p99", "warm-up"):
        realtime.add_column(column)
    for r in result["realtime"].values():
        p50, p99 = (f"{r[k]:.2f}s" if r[k] is not None else "-" for k in ("latency_p50_seconds", "latency_p99_seconds"))
        realtime.add_row(r["master"], f"{r['events']:,}", f"{r['processed_per_second']:,}", p50, p99,
                         f"{r['warmup_seconds']:.0f}s")
    Console().print(realtime)


def main() -> None:
    defaults = ClusterBench()
    parser = arguments(__doc__, defaults.base_port)
    parser.add_argument("--events", type=int, default=defaults.events, help="events of the lake's topic")
    parser.add_argument("--size", type=int, default=defaults.size, help="bytes per lake event (JSON)")
    parser.add_argument("--rounds", type=int, default=defaults.rounds, help="lake runs per master; the best counts")
    parser.add_argument("--dedup", default=defaults.dedup, help="the lake's de-duplication window (0s: off)")
    parser.add_argument("--rate", type=int, default=defaults.rate, help="real-time events/s offered")
    parser.add_argument("--duration", type=float, default=defaults.duration, help="real-time seconds measured")
    parser.add_argument("--warmup", type=float, default=defaults.warmup, help="real-time seconds of warm-up")
    parser.add_argument("--worker-cores", type=int, default=defaults.worker_cores)
    parser.add_argument("--worker-memory", default=defaults.worker_memory)
    args = parser.parse_args()
    result = run(ClusterBench(args.events, args.size, args.rounds, args.dedup, args.rate, args.duration, args.warmup,
                              args.base_port, args.worker_cores, args.worker_memory))
    write_results("spark_cluster", result)
    _show(result)


if __name__ == "__main__":
    main()
