"""``conveyor lake run``: land topics of the central cluster in Iceberg, exactly once.

A run, per topic: read the positions committed with the tables' data, list the partitions' offsets
now, record any gap retention left, read the range between with Spark's Kafka connector, parse and
check every record against the contract (on a topic only the bus writes, parse it in the JVM with
the gateway's verdict kept), then commit the quarantine's rows and the topic's rows,
each commit carrying the run's end offsets. Killed anywhere, a run leaves either a commit or nothing
visible; the next run starts from what was committed and deletes the files the dead one left (once
older than ``lake.orphan_age``). Runs may overlap, on one host or many: each commit lands only on
the table state its run read (conveyor.pipeline.guard), and a run that loses one starts that topic
again from the new positions.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, astuple, dataclass
from datetime import datetime, timedelta, timezone
from functools import partial, reduce
from typing import TYPE_CHECKING, Any

from conveyor.config import Part, Platform
from conveyor.pipeline import guard
from conveyor.pipeline.dedup import dedup_window, drop_copies
from conveyor.pipeline.errors import LakeConflictError, spark_failures
from conveyor.pipeline.fast_parse import (FAST, NEEDS_CHECK, jvm_blocker, needs_check, parsed_struct,
                                          placed, placed_column, placed_name)
from conveyor.bus.registry import topic_versions
from conveyor.pipeline.kafka_source import CONTRACT_HEADER_SQL, EXTRA_FIELDS_SQL, list_watermarks, read_range
from conveyor.pipeline.lake_positions import publish_position
from conveyor.pipeline.offsets import Gap, PartitionRange, Positions, RangePlan, plan_ranges
from conveyor.pipeline.records import PASSED_THROUGH, VersionText, values_parser
from conveyor.pipeline.schema import (COORDINATES, LANDED_AT, OUTSIDE, REASON, Column, contract_columns, quote, read_schema,
                                      versions_columns)
from conveyor.pipeline.catalog import require_catalog
from conveyor.pipeline.trust import Trust, as_read, live_trust
from conveyor.pipeline.tables import (
    GAPS_TABLE,
    append,
    commit_properties,
    current_commit,
    data_table,
    ensure_tables,
    lake_topics,
    quarantine_table,
    record_gaps,
)

if TYPE_CHECKING:
    from pyspark.sql import Column as SparkColumn
    from pyspark.sql import DataFrame, SparkSession

#: The column of a record's contract header, beside the passed-through ones.
CONTRACT_HEADER_COLUMN = "contract_header"
#: The gateway's mark of fields outside the contract version (kafka_source.EXTRA_FIELDS_SQL).
EXTRA_FIELDS_COLUMN = "extra_fields"

#: The step a run reports as it starts reading the range and writing its rows (a run with no
#: terminal logs each step: where it is in a run can be read from its log).
WRITING_ROWS = "reading, parsing and committing rows"

#: The step of a run that found columns in a contract version the table does not have yet.
ADDING_COLUMNS = "adding the columns of new contract versions"

#: Called with (topic, what the run is doing now) for progress display.
StepCallback = Callable[[str, str], None]


@dataclass(frozen=True)
class LandingCounts:
    """What one topic's landing read and committed."""

    records_read: int = 0
    bytes_read: int = 0
    landed: int = 0
    quarantined: int = 0
    duplicates_dropped: int = 0
    #: Records checked against their contract here (the rest kept the gateway's verdict).
    checked: int = 0


@dataclass(frozen=True)
class TopicRun:
    topic: str
    ranges: tuple[PartitionRange, ...]
    gaps: tuple[Gap, ...]
    #: Kafka records read (a redo after a kill re-reads what one table already had).
    records_read: int
    bytes_read: int
    landed: int
    quarantined: int
    duplicates_dropped: int
    #: Records checked against their contract here; the rest kept the gateway's verdict.
    checked: int
    #: Whether only the bus writes the topic, and so its records' verdicts stand.
    trust: Trust
    #: Files of a killed run deleted before this one started.
    orphans_deleted: int
    committed: bool
    seconds: float
    #: When the run listed the partitions' ends: everything appended before is landed.
    listed_at: datetime

    @property
    def lost(self) -> int:
        return sum(g.count for g in self.gaps)


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    started_at: datetime
    topics: tuple[TopicRun, ...]
    seconds: float

    @property
    def lost(self) -> int:
        return sum(t.lost for t in self.topics)

    @property
    def records_read(self) -> int:
        return sum(t.records_read for t in self.topics)

    @property
    def bytes_read(self) -> int:
        return sum(t.bytes_read for t in self.topics)

    @property
    def rate(self) -> float:
        """Records read per second over the whole run, Spark's start excluded."""
        return self.records_read / self.seconds if self.seconds > 0 else 0.0


def _at_or_above(floors: Positions) -> SparkColumn:
    from pyspark.sql.functions import col

    conditions = [(col("kafka_partition") == p) & (col("kafka_offset") >= o) for p, o in floors.items()]
    return reduce(lambda a, b: a | b, conditions)


def range_records(spark: SparkSession, platform: Platform, plan: RangePlan) -> DataFrame:
    """The range's Kafka columns that land as they are, under the lake's names."""
    from pyspark.sql.functions import col

    return read_range(spark, platform, plan).select(
        *[col(kafka_name).alias(name) for name, kafka_name in PASSED_THROUGH.items()]
    )


def parsed_range(
    spark: SparkSession, platform: Platform, plan: RangePlan, columns: tuple[Column, ...], schema_text: str,
    versions: tuple[VersionText, ...] = (), jvm_only: bool = False,
) -> DataFrame:
    """The range's records with their coordinates, the parser's verdict and the contract's columns
    (:func:`parse_records`)."""
    from pyspark.sql.functions import col, expr

    records = read_range(spark, platform, plan, headers=True).select(
        *[col(kafka_name).alias(name) for name, kafka_name in PASSED_THROUGH.items()],
        expr(CONTRACT_HEADER_SQL).alias(CONTRACT_HEADER_COLUMN), expr(EXTRA_FIELDS_SQL).alias(EXTRA_FIELDS_COLUMN))
    return parse_records(records, plan.topic, columns, schema_text, versions, jvm_only)


def parse_records(records: DataFrame, topic: str, columns: tuple[Column, ...], schema_text: str,
                  versions: tuple[VersionText, ...] = (), jvm_only: bool = False) -> DataFrame:
    """``records`` (the lake's passed-through columns, the contract header, ``CONTRACT_HEADER_COLUMN``,
    and the gateway's mark of extra fields, ``EXTRA_FIELDS_COLUMN``) with the parser's verdict
    (``REASON``), the contract's columns, and whether the event has fields outside them (``OUTSIDE``).

    By default each record is checked in a Python worker against the version its header names
    (``versions``), or against ``schema_text`` when it names none. A scalar Arrow UDF rather than
    ``mapInArrow``: the values go to Python and the JVM keeps them, so the bulk of the range is not
    sent back (0.5-1 s less per 200,000 records of 1 KB here).

    ``jvm_only``, for a topic only the bus writes (conveyor.pipeline.trust): every record keeps the
    gateway's verdict and is parsed in the JVM (conveyor.pipeline.fast_parse), with no Python
    worker, its fields outside the columns told by the gateway's mark; a record that still needs
    the full check (it names no held version, or the JVM cannot place it as the check would) is
    flagged in ``NEEDS_CHECK`` with no columns, for the caller to read the range again through the
    full check. ``NEEDS_CHECK`` is false on the default path.
    """
    from pyspark.sql.functions import arrow_udf, coalesce, col, lit

    header = col(CONTRACT_HEADER_COLUMN)
    if not jvm_only:
        returns = ", ".join([f"{quote(REASON)} string"] + [c.ddl for c in columns] + [f"{OUTSIDE} boolean"])
        verdict = arrow_udf(values_parser(topic, schema_text, columns, versions), returns)
        return records.select(*PASSED_THROUGH, verdict("raw_value", header).alias("parsed"),
                              lit(False).alias(NEEDS_CHECK)).select(*PASSED_THROUGH, "parsed.*", NEEDS_CHECK)
    held = coalesce(header.cast("string").isin([f"{i}:{number}" for number, i, _ in versions]), lit(False))
    # Each step its own projection, so the optimizer keeps from_json, and each time's regular
    # expression and cast, to one evaluation per record: the check reads the placed columns.
    parsed = records.select("*", parsed_struct("raw_value", columns).alias(FAST))
    parsed = parsed.select("*", *[placed(c).alias(placed_name(c)) for c in columns])
    parsed = parsed.select("*", needs_check(held, columns).alias(NEEDS_CHECK))
    return parsed.select(*PASSED_THROUGH, lit(None).cast("string").alias(REASON),
                         *[placed_column(c).alias(c.name) for c in columns],
                         col(EXTRA_FIELDS_COLUMN).alias(OUTSIDE), NEEDS_CHECK)


class _NeedsFullCheck(Exception):
    """Records of a range read in the JVM alone need the full check: the branch written is dropped
    and the range is read again through it."""


@dataclass(frozen=True)
class _CommitPlan:
    """What every commit of one attempt carries, and where it must land."""

    properties: dict[str, str]
    #: Per table: the snapshot the attempt read its positions from; a commit lands right after it or not at all.
    bases: dict[str, int]
    #: The branch each commit goes through (one per attempt; refs are per table).
    branch: str


def _requested_schema(platform: Platform, topic: str) -> dict[str, Any] | None:
    """A topic granted through the bus has no contract file: its contract is the registry's."""
    spec = platform.topics.get(topic)
    if spec is None or spec.contract is not None or spec.requested_by is None:
        return None
    versions = topic_versions(platform, topic)
    return versions[-1].parsed if versions else None


class _TopicLanding:
    """One topic's part of a run."""

    def __init__(self, spark: SparkSession, platform: Platform, topic: str, run_id: str, step: StepCallback) -> None:
        self.spark, self.platform, self.topic, self.run_id = spark, platform, topic, run_id
        self.step = partial(step, topic)
        schema = _requested_schema(platform, topic) or read_schema(platform, topic)
        self.schema_text = json.dumps(schema, sort_keys=True)
        self.columns = contract_columns(topic, schema)
        #: The registry's versions of the topic's contract (none without a registry).
        self.versions: tuple[VersionText, ...] = ()
        self.trust = Trust(topic, False, "not judged yet")
        #: A range of this run had records the JVM alone could not land: the rest go through the full check.
        self._full_check = False
        self.data, self.quarantine = data_table(topic), quarantine_table(topic)

    def run(self) -> TopicRun:
        """Land the topic; a commit lost to a concurrent run is retried from the table's new positions."""
        attempts = self.platform.pipeline.lake.commit_attempts
        started, orphans, prepared = time.monotonic(), 0, False
        self._counts = LandingCounts()
        for attempt in range(1, attempts + 1):
            with spark_failures(f"{self.topic} (what is committed stands; the next run redoes the rest)"):
                try:
                    if not prepared:
                        orphans, prepared = self._prepare(), True
                    plan, listed_at, committed = self._attempt(guard.branch_name(self.run_id, attempt))
                except LakeConflictError as conflict:
                    if attempt == attempts:
                        raise LakeConflictError(
                            f"{self.topic}: lost {attempts} commits in a row to concurrent runs (the last: {conflict})"
                        ) from conflict
                    self.step(f"{conflict}; again from the new positions ({attempt}/{attempts})")
                    time.sleep(random.uniform(0.2, 1.0) * attempt)  # runs that collided do not meet again
                    continue
            guard.clear_running(self.platform, self.topic)
            return TopicRun(topic=self.topic, ranges=plan.ranges, gaps=plan.gaps, **asdict(self._counts),
                            trust=self.trust, orphans_deleted=orphans, committed=committed,
                            seconds=time.monotonic() - started, listed_at=listed_at)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _prepare(self) -> int:
        """Tables ready, and what a killed run left deleted; the files deleted. The clusters' ACLs
        are read here, once per run, not on each attempt after a lost commit."""
        self.step("preparing tables")
        self.trust = live_trust(self.platform, self.topic)
        tables = (self.data, self.quarantine, GAPS_TABLE)
        with guard.conflicts(self.data):
            ensure_tables(self.spark, self.topic, self.columns)
            for table in tables:
                guard.ensure_snapshot(self.spark, table)
        orphans = 0
        if guard.interrupted(self.platform, self.topic):
            self.step("deleting files of an interrupted run")
            age = self.platform.pipeline.lake.orphan_age
            orphans = sum(guard.clean_up(self.spark, t, age) for t in tables)
        guard.mark_running(self.platform, self.topic, self.run_id)
        return orphans

    def _attempt(self, branch: str) -> tuple[RangePlan, datetime, bool]:
        """Read the positions, land what is missing from them; the plan, when it was listed, and
        whether it committed. Counts go to ``self._counts`` commit by commit."""
        commits = {t: current_commit(self.spark, t) for t in (self.quarantine, self.data)}
        self.step("listing offsets")
        listed_at, marks = list_watermarks(self.platform, self.topic)
        plan = plan_ranges(self.topic, {t: c.positions if c else None for t, c in commits.items()}, marks)
        publish_position(self.platform, self.topic, [c.positions for c in commits.values() if c])
        self._learn_versions()
        if plan.gaps:
            self.step(f"recording {len(plan.gaps)} gap(s)")
            with guard.conflicts(GAPS_TABLE):
                record_gaps(self.spark, plan.gaps, listed_at)
        stale = [t for t, c in commits.items() if c is None or c.positions != plan.end_positions]
        if stale:
            self.step(f"reading {plan.records:,} offsets")
            properties = commit_properties(plan.end_positions, listed_at, self.run_id)
            bases = {t: c.snapshot_id for t, c in commits.items() if c is not None}
            last = commits[self.quarantine]
            self._land(plan, stale, _CommitPlan(properties, bases, branch), listed_at,
                       bad_before=bool(last and last.added_records))
        publish_position(self.platform, self.topic, [plan.end_positions])
        return plan, listed_at, bool(stale)

    def _learn_versions(self) -> None:
        """The registry's versions of the topic's contract, read after the plan's end offsets were
        listed: a gateway enforces a version only once the registry holds it, so every record of the
        range names a version read here. A record without a header is checked against the latest,
        and the table gets every version's columns (a new one added before the rows that fill it)."""
        versions = topic_versions(self.platform, self.topic)
        if not versions:
            return
        self.versions = tuple((v.version, v.id, v.schema) for v in versions)
        self.schema_text = versions[-1].schema
        columns = versions_columns(self.topic, [v.parsed for v in versions])
        # As a set: the registry keeps a schema's properties sorted, the contract file in its own order.
        if not set(columns) <= set(self.columns):
            self.step(ADDING_COLUMNS)
            with guard.conflicts(self.data):
                ensure_tables(self.spark, self.topic, columns)
        self.columns = columns

    def _land(
        self, plan: RangePlan, stale: list[str], commit: _CommitPlan, listed_at: datetime, bad_before: bool
    ) -> None:
        """Commit the stale tables; on a topic only the bus writes, first with the range read in the
        JVM alone, and again through the full check when records of it need that."""
        if self._jvm_only():
            try:
                self._land_read(plan, stale, commit, listed_at, bad_before, jvm_only=True)
                return
            except _NeedsFullCheck as needing:
                self.step(f"{needing} need the full check; reading the range again through it")
                self._full_check = True
        self._land_read(plan, stale, commit, listed_at, bad_before, jvm_only=False)

    def _jvm_only(self) -> bool:
        """Whether records are read in the JVM alone: the topic keeps the gateway's verdict
        (``self.trust``, which says why not when the contract or the registry rule it out) and no
        range of this run needed the full check yet."""
        blocker = jvm_blocker(self.columns) or (None if self.versions else "the registry holds no version of it")
        self.trust = as_read(self.trust, blocker)
        return self.trust.trusted and not self._full_check

    def _land_read(
        self, plan: RangePlan, stale: list[str], commit: _CommitPlan, listed_at: datetime, bad_before: bool,
        jvm_only: bool,
    ) -> None:
        """Commit the stale tables, the rows first, adding each commit's counts to ``self._counts``.

        The rows' commit reads and parses the range once, counting it on the way (an observation,
        not another pass). The quarantine's commit reads it again only when that count found bad
        records; otherwise it is an empty commit that moves its offsets. The parsed range is kept
        on local disk and read back, which costs less than reading and parsing it again, when the
        quarantine's last commit added rows (``bad_before``: a topic that had bad records likely
        has more). De-duplication adds no pass over the range: the copies are found from the keys
        of what the append wrote, and deleted before the branch reaches ``main``
        (conveyor.pipeline.dedup).
        """
        from pyspark import StorageLevel
        from pyspark.sql import Observation
        from pyspark.sql.functions import coalesce, col, count, length, lit, when
        from pyspark.sql.functions import sum as sum_

        parsed = parsed_range(self.spark, self.platform, plan, self.columns, self.schema_text, self.versions,
                              jvm_only)
        cached = bad_before and self.data in stale and self.quarantine in stale
        if cached:
            parsed = parsed.persist(StorageLevel.DISK_ONLY)
        eligible, rejected = col(REASON).isNull() & ~col(NEEDS_CHECK), col(REASON).isNotNull()
        if plan.needs_filter(self.data):
            eligible = eligible & _at_or_above(plan.floors[self.data])
        if plan.needs_filter(self.quarantine):
            rejected = rejected & _at_or_above(plan.floors[self.quarantine])
        observation = Observation(f"conveyor-lake-{self.run_id}")
        counted = parsed.observe(
            observation,
            count(lit(1)).alias("read"),
            coalesce(sum_(length("raw_value")), lit(0)).alias("bytes"),
            count(when(eligible, 1)).alias("good"),
            count(when(rejected, 1)).alias("bad"),
            count(when(col(NEEDS_CHECK), 1)).alias("needing"),
        )

        def all_placed() -> None:
            """Called once a commit's rows are written to its branch, before the branch becomes ``main``."""
            if observation.get["needing"]:
                raise _NeedsFullCheck(f"{observation.get['needing']:,} record(s)")

        verified = all_placed if jvm_only else None
        checked = "read" if not jvm_only else "needing"  # needing is 0 once a JVM-only commit stands
        try:
            if self.data in stale:
                self.step(WRITING_ROWS)
                window = dedup_window(self.platform, self.topic)
                since = listed_at - timedelta(seconds=window) if window > 0 else None
                raw = col("raw_value")
                if self.topic not in self.platform.pipeline.lake.keep_raw_value:
                    raw = when(col(OUTSIDE), raw)  # the bytes only where they say more than the columns
                rows = counted.where(eligible).select(*self._table_columns(raw), lit(listed_at).alias(LANDED_AT))
                landed = self._commit(rows, self.data, commit, since, verified)
                stats = observation.get  # only once the observed pass succeeded: it waits for one
                self._add(LandingCounts(records_read=stats["read"], bytes_read=stats["bytes"], landed=landed,
                                        duplicates_dropped=stats["good"] - landed, checked=stats[checked]))
            if self.quarantine in stale:
                self.step("committing quarantine")
                if self.data not in stale:  # this is the pass that counts
                    bad = counted.where(rejected)
                elif observation.get["bad"]:
                    bad = parsed.where(rejected)
                else:  # nothing bad: an empty commit (it still moves the offsets), without reading again
                    bad = parsed.where(lit(False))
                bad = bad.select(*PASSED_THROUGH, col(REASON).alias("reason"), lit(listed_at).alias("quarantined_at"))
                quarantined = self._commit(bad, self.quarantine, commit, verified=verified)
                read = observation.get if self.data not in stale else {"read": 0, "bytes": 0, checked: 0}
                self._add(LandingCounts(records_read=read["read"], bytes_read=read["bytes"], quarantined=quarantined,
                                        checked=read[checked]))
        finally:
            if cached:
                parsed.unpersist()

    def _add(self, counts: LandingCounts) -> None:
        self._counts = LandingCounts(*(a + b for a, b in zip(astuple(self._counts), astuple(counts), strict=True)))

    def _table_columns(self, raw: SparkColumn) -> list[SparkColumn]:
        """The data table's columns, its ``raw_value`` being ``raw``."""
        from pyspark.sql.functions import col

        coordinates = [raw.alias(name) if name == "raw_value" else col(name) for name, _ in COORDINATES]
        return [col(c.name) for c in self.columns] + coordinates

    def _commit(self, rows: DataFrame, table: str, commit: _CommitPlan, since: datetime | None = None,
                verified: Callable[[], None] | None = None) -> int:
        """Append ``rows`` right after the snapshot the run started from (with ``since``, less the
        copies of event ids that landed since then, whatever their event time:
        conveyor.pipeline.dedup); the rows it added. ``verified`` may still refuse the written rows
        by raising: nothing of them reaches ``main``."""
        base = commit.bases[table]

        def write(branch: str) -> None:
            append(rows, table, commit.properties, branch)
            if verified is not None:
                verified()
            if since is not None:
                drop_copies(self.spark, table, branch, base, since)

        return guard.conditional_commit(self.spark, table, base, commit.branch, self.run_id, write)


def _noop(topic: str, step: str) -> None:
    return None


def run_once(
    spark: SparkSession, platform: Platform, topics: list[str] | None = None, step: StepCallback = _noop
) -> RunSummary:
    """One bounded run over ``topics`` (default: the lake's topics); other runs may work beside it
    (see conveyor.pipeline.guard)."""
    platform = platform.acting_as(Part.lake)
    require_catalog(spark, platform)
    chosen = lake_topics(platform, topics)
    run_id = uuid.uuid4().hex
    started_at = datetime.now(timezone.utc)
    started = time.monotonic()
    results = []
    for topic in chosen:
        results.append(_TopicLanding(spark, platform, topic, run_id, step).run())
    return RunSummary(run_id, started_at, tuple(results), time.monotonic() - started)
