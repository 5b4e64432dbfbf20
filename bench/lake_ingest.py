"""Lake ingestion rate for ~1 KB JSON events, side by side in one run on this machine:

- ``librdkafka``: the raw consume rate of one confluent-kafka consumer over the same partitions,
  the ceiling (no parsing, no writing);
- ``plain_sink``: Spark's plain Structured Streaming Kafka-to-Parquet file sink (trigger
  availableNow, its own checkpoint): raw Kafka columns to Parquet, no parsing, no contract; a
  ceiling for any Spark job;
- ``user_job``: the peer, the job a data engineer writes by hand: Structured Streaming from Kafka,
  ``from_json`` with the contract's columns, appended to an Iceberg table partitioned by event
  hour, trigger availableNow with its checkpoint (Spark's own exactly-once); no contract checks,
  no quarantine, no gaps, no de-duplication;
- ``user_job_merge``: the same job de-duplicating as a user would with Iceberg: ``foreachBatch``,
  ``dropDuplicates`` on event_id, then ``MERGE INTO`` the table on event_id within an hour either
  side of the event's time, ``WHEN NOT MATCHED THEN INSERT``; the route the lake's
  de-duplication did not take (docs/benchmarks.md, "Lake ingestion");
- ``iceberg_sink``: Apache Iceberg's own Kafka Connect sink (bench.iceberg_sink), exactly-once,
  into the same table as the user's job; the peer a data team deploys for Kafka to Iceberg;
- ``lake`` and ``lake_no_dedup``: ``conveyor lake run`` (one run of :func:`run_once`) on a
  topic only the bus writes, its records carrying the gateway's verdict (the bench writes them as a
  gateway does, with the contract header naming the registry's version): parsed in the JVM,
  quarantine, Iceberg commits carrying the offsets, with and without the event_id de-duplication
  window;
- ``lake_checked``: the lake with de-duplication as a topic with direct producers gets it, every
  record checked against the contract in a Python worker;
- ``lake_raw``: the lake with de-duplication, every row keeping its record's bytes
  (``pipeline.lake.keep_raw_value``); by default a row keeps them only for an event with fields
  outside the contract, and the bench's events have none (their size is in ``page_url``);
- ``lake_no_dedup_unchecked`` (with ``--stages``): the lake without de-duplication whose parser is
  Spark's ``from_json``, with no contract check: the bound for any check kept in the JVM.

Spark's start is excluded from every Spark figure (one session serves all), the Connect worker's
from the sink's; each figure is the median of ``--rounds`` runs over the whole topic (every run
listed beside it), into fresh output each time, the creation of the tables included (the user's
jobs create one, the lake three; the sink's table is created before its run). CPU seconds are the Spark JVM's with its Python
workers and the bench's own Python, or the Connect JVM's, over the run. The platform is the demo's
central cluster alone (3 brokers, RF 3) on its own ports and folder.

    python -m bench.lake_ingest [--events 200000[,1000000,...]] [--rounds 3] [--paths user_job,iceberg_sink,...]
                                [--base-port 31700] [--stages] [--jfr DIR]

With several sizes the topic grows to each in turn (to 1,000,000 events, then to 5,000,000...),
and every path reads all of it at each size.

Writes bench/results/lake_ingest.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
import uuid
from datetime import datetime, timezone
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING
from unittest import mock

import orjson
import pyarrow as pa
from confluent_kafka import TopicPartition
from rich.console import Console
from rich.table import Table

from bench.common import Round, cpu_since, demo_data, host, provision, tree_cpu, write_results
from bench.iceberg_sink import ConnectWorker
from bench.jfr_profile import spark_recording
from conveyor import kafka
from conveyor.bus.registry import Registry
from conveyor_sdk.contract import CONTRACT_HEADER
from conveyor.config import Platform, parse_platform
from conveyor.config.resolved import resolved
from conveyor.bus.registry import topic_versions
from conveyor.pipeline.fast_parse import NEEDS_CHECK
from conveyor.pipeline.guard import state_dir
from conveyor.pipeline.kafka_source import java_client_options, list_watermarks, read_range
from conveyor.pipeline.lake import parsed_range, range_records, run_once
from conveyor.pipeline.offsets import RangePlan, plan_ranges
from conveyor.pipeline.records import PASSED_THROUGH
from conveyor.pipeline.trust import Trust
from conveyor.pipeline.schema import OUTSIDE, REASON, Column, contract_columns, read_schema
from conveyor.pipeline.spark import spark_session
from conveyor.pipeline.tables import GAPS_TABLE, data_table, quarantine_table
from conveyor.runtime.local import LocalPlatform

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

ROOT = Path(__file__).resolve().parents[1]
TOPIC = "bench-events"
PARTITIONS = 6
#: Where each event's bytes go, up to its size: a contract field, so every path lands them.
URL = "https://example.com/ads/"


def lake_platform(folder: Path, base_port: int, dedup: str, spark: dict | None = None,
                  keep_raw_value: bool = False) -> Platform:
    """The bench's platform; ``spark``: pipeline.spark settings instead of the demo's;
    ``keep_raw_value``: every row keeps its record's bytes."""
    demo = demo_data()
    data = {
        "name": "lake-bench",
        "runtime": {**demo["runtime"], "home": str(folder / "home"), "base_port": base_port,
                    "redis": {"enabled": False}},
        "clusters": {"central": demo["clusters"]["central"]},
        "topics": {TOPIC: {"partitions": PARTITIONS, "contract": str(ROOT / "contracts" / "ad-events.schema.json")},
                   "_contracts": demo["topics"]["_contracts"]},
        "pipeline": {"source": "central", "spark": spark or demo["pipeline"]["spark"],
                     "catalog": {"warehouse": str(folder / "warehouse")},
                     "lake": {"topics": [TOPIC], "dedup_window": dedup,
                              "keep_raw_value": [TOPIC] if keep_raw_value else []}},
    }
    return parse_platform(data, root=folder)


def register(platform: Platform) -> bytes:
    """The contract as the registry's version of the bench's topic; the header a gateway writes with it."""
    registry = Registry(platform, "lake-bench")
    registry.start()
    try:
        version = registry.register(f"{TOPIC}-value", read_schema(platform, TOPIC), "lake-bench").version
    finally:
        registry.stop()
    return f"{version.id}:{version.version}".encode()


def produce(platform: Platform, events: int, size: int, first: int = 0, header: bytes | None = None) -> int:
    """``events`` more events of about ``size`` bytes, numbered from ``first``, with ``header`` as
    their contract header (as a gateway writes them); the bytes sent."""
    headers = [(CONTRACT_HEADER, header)] if header is not None else None
    producer = kafka.producer(platform, "central", "lake-bench", {"linger.ms": 50, "batch.size": 1_000_000})
    now = datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
    total = 0
    for i in range(first, first + events):
        event = {"event_id": str(uuid.uuid4()), "event_time": now, "type": "impression", "site_id": f"site-{i % 50}",
                 "user_id": f"user-{i % 5000}", "price_micros": i, "page_url": URL}
        # Every field in the contract: every path lands the same columns, the lake no raw value.
        event["page_url"] = URL + "x" * max(0, size - len(orjson.dumps(event)))
        value = orjson.dumps(event)
        total += len(value)
        while True:
            try:
                producer.produce(TOPIC, value, key=event["user_id"].encode(), headers=headers)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(120) == 0
    return total


def _librdkafka(platform: Platform, events: int) -> float:
    consumer = kafka.consumer(platform, "central", f"bench-{uuid.uuid4().hex[:6]}", "lake-bench",
                              {"fetch.max.bytes": 50 * 2**20, "max.partition.fetch.bytes": 10 * 2**20})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    seen = 0
    started = time.monotonic()
    while seen < events:
        for message in consumer.consume(10_000, 1.0):
            if message.error() is None:
                seen += 1
    seconds = time.monotonic() - started
    consumer.close()
    return seconds


def _plain_sink(spark, platform: Platform, folder: Path) -> float:
    out = folder / f"plain-{uuid.uuid4().hex[:6]}"
    stream = (spark.readStream.format("kafka").options(**java_client_options(platform, "central"))
              .option("subscribe", TOPIC).option("startingOffsets", "earliest").load())
    started = time.monotonic()
    query = (stream.writeStream.format("parquet").option("path", str(out / "data"))
             .option("checkpointLocation", str(out / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination()
    seconds = time.monotonic() - started
    shutil.rmtree(out)
    return seconds


def _contract_table(spark, platform: Platform, table: str) -> None:
    """``table`` created afresh with the contract's columns, partitioned by event hour."""
    columns = contract_columns(TOPIC, read_schema(platform, TOPIC))
    spark.sql(f"CREATE TABLE {table} ({', '.join(c.ddl for c in columns)}) USING iceberg "
              "PARTITIONED BY (hours(event_time))")


def _drop(spark, table: str) -> None:
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.bench")
    spark.sql(f"DROP TABLE IF EXISTS {table} PURGE")


def _user_job(spark, platform: Platform, folder: Path, events: int, merge: bool = False) -> float:
    from pyspark.sql.functions import col, from_json

    columns = contract_columns(TOPIC, read_schema(platform, TOPIC))
    table = "lake.bench.user_job_merge" if merge else "lake.bench.user_job"
    _drop(spark, table)
    # Timed from the table's creation, as the lake's runs are from creating theirs.
    started = time.monotonic()
    _contract_table(spark, platform, table)
    out = folder / f"user-{uuid.uuid4().hex[:6]}"
    stream = (spark.readStream.format("kafka").options(**java_client_options(platform, "central"))
              .option("subscribe", TOPIC).option("startingOffsets", "earliest").load())
    parsed = stream.select(from_json(col("value").cast("string"), ", ".join(c.ddl for c in columns)).alias("e"))

    def merge_batch(frame, _batch_id: int) -> None:  # noqa: ANN001 (a PySpark DataFrame)
        view = f"incoming_{uuid.uuid4().hex[:6]}"
        frame.dropDuplicates(["event_id"]).createOrReplaceTempView(view)
        frame.sparkSession.sql(
            f"MERGE INTO {table} t USING {view} s ON t.event_id = s.event_id "
            "AND t.event_time BETWEEN s.event_time - INTERVAL 1 HOUR AND s.event_time + INTERVAL 1 HOUR "
            "WHEN NOT MATCHED THEN INSERT *")

    writer = parsed.select("e.*").writeStream.option("checkpointLocation", str(out / "checkpoint"))
    writer = writer.trigger(availableNow=True)
    query = (writer.foreachBatch(merge_batch).start() if merge
             else writer.format("iceberg").outputMode("append").toTable(table))
    query.awaitTermination()
    seconds = time.monotonic() - started
    landed = spark.table(table).count()
    assert landed == events, f"the user's job landed {landed} of {events}"
    shutil.rmtree(out)
    return seconds


def _iceberg_sink(spark, platform: Platform, worker: ConnectWorker, events: int) -> Round:
    """One run of Iceberg's sink into a fresh table, read back after."""
    from pyspark.sql.functions import count, countDistinct, lit

    table = "lake.bench.iceberg_sink"
    _drop(spark, table)
    _contract_table(spark, platform, table)
    run = worker.run(TOPIC, table.removeprefix("lake."), events)
    spark.sql(f"REFRESH TABLE {table}")
    rows, landed = spark.table(table).agg(count(lit(1)), countDistinct("event_id")).first()
    assert (rows, landed) == (events, events), f"Iceberg's sink landed {rows} rows, {landed} events, of {events}"
    return run


def lake_seconds(spark, platform: Platform, events: int, steps: dict[str, float] | None = None) -> float:
    """One lake run into fresh tables; ``steps`` receives the seconds each step of the run took."""
    for table in (data_table(TOPIC), quarantine_table(TOPIC), GAPS_TABLE):
        spark.sql(f"DROP TABLE IF EXISTS {table} PURGE")
    shutil.rmtree(state_dir(platform), ignore_errors=True)
    marks = [(time.monotonic(), "")]
    summary = run_once(spark, platform, step=lambda _topic, what: marks.append((time.monotonic(), what)))
    marks.append((time.monotonic(), ""))
    if steps is not None:
        steps.update({what: later - at for (at, what), (later, _) in zip(marks[1:], marks[2:], strict=False)})
    (run,) = summary.topics
    # Trusted, the gateway's verdicts stand and nothing is checked again; else everything is.
    assert run.landed == events and run.checked == (0 if run.trust.trusted else events), run
    return summary.seconds


def _checked_lake_seconds(spark, platform: Platform, events: int) -> float:
    """:func:`lake_seconds` as a topic with direct producers gets it: every record checked."""
    untrusted = Trust(TOPIC, False, "the bench's full check")
    with mock.patch("conveyor.pipeline.lake.live_trust", lambda *_: untrusted):
        return lake_seconds(spark, platform, events)


def _values_to_python(values: pa.Array) -> pa.Array:
    """The lake's way to Python (the values, in Arrow batches) with nothing to do there."""
    return pa.nulls(len(values), pa.int64())


def _from_json_range(spark, platform: Platform, plan: RangePlan, columns: tuple[Column, ...],
                     schema_text: str, *_versions_and_trust: object) -> DataFrame:
    """The lake's parsed range with Spark's ``from_json`` in place of its parser: the user's parse,
    no contract check, every record good. A lake run over it bounds what any contract check kept
    inside the JVM could reach: such a check can only add to this."""
    from pyspark.sql.functions import col, from_json, lit

    records = range_records(spark, platform, plan)
    parsed = from_json(col("raw_value").cast("string"), ", ".join(c.ddl for c in columns))
    return records.select(*PASSED_THROUGH, lit(None).cast("string").alias(REASON), parsed.alias("parsed")).select(
        *PASSED_THROUGH, REASON, "parsed.*", lit(False).alias(OUTSIDE), lit(False).alias(NEEDS_CHECK))


def _stages(spark, platform: Platform, rounds: int) -> dict[str, float]:
    """Where the lake's time goes: Spark's Kafka read of the whole topic alone, with the values
    sent to Python and nothing done there, and with the lake's parser (each into a noop sink)."""
    from pyspark.sql.functions import arrow_udf

    _, marks = list_watermarks(platform, TOPIC)
    plan = plan_ranges(TOPIC, {"bench": None}, marks)
    schema = read_schema(platform, TOPIC)
    versions = tuple((v.version, v.id, v.schema) for v in topic_versions(platform, TOPIC))
    raw = read_range(spark, platform, plan)
    frames = {
        "kafka_read": raw,
        "kafka_read_values_to_python": raw.select("*", arrow_udf(_values_to_python, "bigint")("value")),
        "kafka_read_parse": parsed_range(spark, platform, plan, contract_columns(TOPIC, schema),
                                         json.dumps(schema, sort_keys=True)),
        "kafka_read_parse_verdict_kept": parsed_range(spark, platform, plan, contract_columns(TOPIC, schema),
                                                      json.dumps(schema, sort_keys=True), versions, True),
    }
    seconds = {}
    for name, frame in frames.items():
        runs = []
        for _ in range(rounds):
            started = time.monotonic()
            frame.write.format("noop").mode("overwrite").save()
            runs.append(time.monotonic() - started)
        seconds[name] = statistics.median(runs)
    return seconds


def _timed_in_spark(spark, measure: Callable[[], float]) -> Round:
    """``measure``, a Spark path that answers its seconds, with the CPU seconds of the Spark JVM
    with its Python workers, and of this process, over it."""
    jvm = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    before, own = tree_cpu(jvm), os.times()
    seconds = measure()
    after = os.times()
    return Round(seconds, cpu_since(before, jvm) + after.user + after.system - own.user - own.system)


#: Wide enough for the tables when the output is a file.
CONSOLE = Console(width=150)
LAKE_PATHS = ("lake", "lake_no_dedup", "lake_checked", "lake_raw")
PATHS = ("plain_sink", "user_job", "user_job_merge", "iceberg_sink", *LAKE_PATHS)


def size_result(events: int, event_bytes: int, rounds: dict[str, list[Round]], librdkafka: float,
                breakdown: dict[str, float]) -> dict:
    """One size's figures: each path's median seconds and CPU seconds over its rounds (taken
    separately), every round beside them, and the rates and ratios of the medians."""
    seconds = {"librdkafka": librdkafka, **{k: statistics.median([r.seconds for r in v]) for k, v in rounds.items()}}
    cpu = {k: statistics.median([r.cpu_seconds for r in v]) for k, v in rounds.items()}
    return {
        **({"stages": {k: round(v, 2) for k, v in breakdown.items()}} if breakdown else {}),
        "events": events,
        "event_bytes": event_bytes,
        "rounds": {k: [r.figures() for r in v] for k, v in rounds.items()},
        "seconds": {k: round(v, 2) for k, v in seconds.items()},
        "events_per_second": {k: round(events / v) for k, v in seconds.items()},
        "cpu_seconds": {k: round(v, 2) for k, v in cpu.items()},
        "events_per_cpu_second": {k: round(events / v) for k, v in cpu.items() if v > 0},
        "ratio_to_user_job": ({k: round(seconds["user_job"] / v, 2) for k, v in seconds.items()}
                              if "user_job" in seconds else {}),
        "lake_per_cpu_second_to_sink": ({k: round(cpu["iceberg_sink"] / cpu[k], 2) for k in LAKE_PATHS if k in cpu}
                                        if "iceberg_sink" in cpu else {}),
    }


def run(sizes: list[int], size: int, rounds: int, base_port: int, paths: tuple[str, ...] = PATHS,
        stages: bool = False, progress: Callable[[str], None] = print,
        measured_size: Callable[[list[dict]], None] = lambda _: None, jfr: Path | None = None) -> list[dict]:
    """Every path at each of ``sizes`` (ascending): the topic grows to each size in turn and each
    path reads all of it, ``rounds`` times; one result per size, each also handed to
    ``measured_size`` with those before it as soon as it is measured. ``jfr``: a folder for a JFR
    recording of the Spark JVM over each round of a Spark path (bench.jfr_profile)."""
    results = []
    with tempfile.TemporaryDirectory(prefix="conveyor-lake-bench-") as tmp, ExitStack() as stack:
        folder = Path(tmp)
        platform = lake_platform(folder, base_port, "1h")
        no_dedup = lake_platform(folder, base_port, "0s")  # the same platform, de-duplication off
        raw = lake_platform(folder, base_port, "1h", keep_raw_value=True)
        local = LocalPlatform(platform)
        local.up()
        stack.callback(local.down)
        platform, no_dedup, raw = local.clients, resolved(no_dedup), resolved(raw)
        provision(platform)
        header = register(platform)
        spark = spark_session(platform, "lake-bench")
        # Up for the whole bench, warm after its first round as the Spark session is.
        worker = (stack.enter_context(ConnectWorker(platform, folder, folder / "warehouse", base_port + 90))
                  if "iceberg_sink" in paths else None)
        measures: dict[str, Callable[[int], Round]] = {
            "plain_sink": lambda _: _timed_in_spark(spark, lambda: _plain_sink(spark, platform, folder)),
            "user_job": lambda n: _timed_in_spark(spark, lambda: _user_job(spark, platform, folder, n)),
            "user_job_merge": lambda n: _timed_in_spark(
                spark, lambda: _user_job(spark, platform, folder, n, True)),
            # Measured in its own JVM.
            "iceberg_sink": lambda n: _iceberg_sink(spark, platform, worker, n),
            "lake": lambda n: _timed_in_spark(spark, lambda: lake_seconds(spark, platform, n)),
            "lake_no_dedup": lambda n: _timed_in_spark(spark, lambda: lake_seconds(spark, no_dedup, n)),
            "lake_checked": lambda n: _timed_in_spark(spark, lambda: _checked_lake_seconds(spark, platform, n)),
            "lake_raw": lambda n: _timed_in_spark(spark, lambda: lake_seconds(spark, raw, n)),
        }
        produced, produced_bytes = 0, 0
        for events in sizes:
            progress(f"producing up to {events:,} events")
            produced_bytes += produce(platform, events - produced, size, first=produced, header=header)
            produced = events
            librdkafka = _librdkafka(platform, events)
            measured: dict[str, list[Round]] = {}
            for name in paths:
                for i in range(rounds):
                    # The sink runs in a JVM of its own.
                    with spark_recording(spark, jfr if name != "iceberg_sink" else None,
                                         f"{name}-{events}-round{i + 1}.jfr"):
                        measured.setdefault(name, []).append(measures[name](events))
                    progress(f"{events:,} events, {name} round {i + 1}: {measured[name][-1]}")
            breakdown = _breakdown(spark, platform, no_dedup, events, rounds) if stages else {}
            results.append(size_result(events, round(produced_bytes / events), measured, librdkafka, breakdown))
            measured_size(results)
    return results


def _breakdown(spark, platform: Platform, no_dedup: Platform, events: int, rounds: int) -> dict[str, float]:
    """--stages: the lake without its check, the read's pieces, and each step of a lake run."""
    with mock.patch("conveyor.pipeline.lake.parsed_range", _from_json_range):
        breakdown = {"lake_no_dedup_unchecked": statistics.median([lake_seconds(spark, no_dedup, events)
                                                         for _ in range(rounds)])}
    breakdown.update(_stages(spark, platform, rounds))
    for label, variant in (("de-dup on", platform), ("de-dup off", no_dedup)):
        steps: dict[str, float] = {}
        lake_seconds(spark, variant, events, steps)
        breakdown.update({f"lake step ({label}): {k}": v for k, v in steps.items()})
    return breakdown


def _sizes(text: str) -> list[int]:
    try:
        sizes = sorted({int(part.replace("_", "")) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"--events takes counts separated by commas, not {text!r}") from None
    if not sizes or sizes[0] <= 0:
        raise argparse.ArgumentTypeError("--events takes positive counts")
    return sizes


def _paths(text: str) -> tuple[str, ...]:
    paths = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [p for p in paths if p not in PATHS]
    if unknown or not paths:
        raise argparse.ArgumentTypeError(f"unknown path {unknown or text!r}: choose from {', '.join(PATHS)}")
    return tuple(p for p in PATHS if p in paths)


def _show(result: dict) -> None:
    table = Table(title=f"lake ingestion: {result['events']:,} events of ~{result['event_bytes']} bytes "
                        "(medians of the rounds)")
    for column in ("path", "seconds", "rounds (s)", "events/s", "x user's job", "CPU s", "rounds (CPU s)",
                   "events/CPU-s"):
        table.add_column(column)
    for name, seconds in result["seconds"].items():
        rounds = result["rounds"].get(name, [])
        per_cpu = result["events_per_cpu_second"].get(name)
        table.add_row(name, f"{seconds:.2f}", ", ".join(f"{r['seconds']:.2f}" for r in rounds),
                      f"{result['events_per_second'][name]:,}",
                      f"{result['ratio_to_user_job'][name]:.2f}" if result["ratio_to_user_job"] else "",
                      f"{result['cpu_seconds'][name]:.1f}" if name in result["cpu_seconds"] else "",
                      ", ".join(f"{r['cpu_seconds']:.1f}" for r in rounds), f"{per_cpu:,}" if per_cpu else "")
    CONSOLE.print(table)
    sink = result["rounds"].get("iceberg_sink", [])
    if sink:
        CONSOLE.print("iceberg_sink: first commit after " + ", ".join(f"{r['first_commit_seconds']:.1f}" for r in sink)
                        + " s; commits " + ", ".join(str(r["commits"]) for r in sink))
    for name, ratio in result["lake_per_cpu_second_to_sink"].items():
        CONSOLE.print(f"{name}: {ratio:.2f}x Iceberg's sink's events per CPU-second")
    if "stages" in result:
        stages = Table(title="where the lake's time goes (seconds)")
        stages.add_column("stage")
        stages.add_column("seconds")
        for name, seconds in result["stages"].items():
            stages.add_row(name, f"{seconds:.2f}")
        CONSOLE.print(stages)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=_sizes, default=[200_000],
                        help="events in the topic, or several sizes separated by commas (1000000,5000000): the "
                             "topic grows to each in turn and every path reads all of it (default 200000)")
    parser.add_argument("--size", type=int, default=1024, help="bytes per event (JSON)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each path at each size; the median is shown")
    parser.add_argument("--paths", type=_paths, default=PATHS,
                        help=f"the paths to run, separated by commas (default all: {','.join(PATHS)})")
    parser.add_argument("--base-port", type=int, default=31700)
    parser.add_argument("--stages", action="store_true",
                        help="also time Spark's read alone, with the values sent to Python, with the parser, and each "
                             "step of one more lake run with de-duplication and one without; and the lake without "
                             "de-duplication with from_json in place of its parser and check (lake_no_dedup_unchecked)")
    parser.add_argument("--jfr", type=Path, metavar="DIR",
                        help="record each round of a Spark path with Java Flight Recorder into DIR; "
                             "`python -m bench.jfr_profile DIR/*.jfr` shows where their samples go")
    args = parser.parse_args()

    def written(sizes: list[dict]) -> None:  # each size as soon as it is measured: a long run keeps what it did
        write_results("lake_ingest", {"sizes": sizes, "rounds": args.rounds, "partitions": PARTITIONS,
                                      "host": host()})
        _show(sizes[-1])

    run(args.events, args.size, args.rounds, args.base_port, args.paths, args.stages, measured_size=written,
        jfr=args.jfr)


if __name__ == "__main__":
    main()
