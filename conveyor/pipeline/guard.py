"""Many lake runs, on any hosts, against one catalog: a commit lands only on the table state its run
started from, and the clean-up after a run that was killed.

Every commit of a lake table goes through a branch of its own. The branch is created at the
snapshot the run read its positions from; Spark appends the rows (and the offsets, in the snapshot
summary) to the branch; then one catalog commit fast-forwards ``main`` to the branch and drops it
(Iceberg's ``ManageSnapshots.fastForwardBranch``). Iceberg allows the fast-forward only while
``main`` is an ancestor of the branch, that is while nothing was committed to ``main`` since the run
read its positions, and the catalog swaps table metadata atomically (a row update in the JDBC
catalog, a conditional call in REST or Hive), so the check holds between hosts. A run whose
fast-forward is refused lost to a concurrent run: :class:`LakeConflictError`, after which the run
re-reads the table's positions and lands what is still missing.

A run marks each topic it works on in a local folder and clears the mark after the topic's last
commit. A mark found at the start of a run means a run died there: files under the table that no
snapshot references and that are older than ``lake.orphan_age`` are deleted, and so are branches of
dead runs. The marks only decide when to look: another host's run never sees them, and that costs
disk space, never a row. The age keeps the files of runs still in progress (on any host) safe.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conveyor.config import Platform
from conveyor.pipeline.catalog import local_warehouse
from conveyor.pipeline.errors import LakeConflictError
from conveyor.pipeline.tables import RUN_PROPERTY, iceberg_table, live_records

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Branches of lake runs (:func:`branch_name`).
BRANCH_PREFIX = "conveyor_run_"
#: Iceberg's exception for a commit whose base is no longer the table's.
COMMIT_FAILED = "org.apache.iceberg.exceptions.CommitFailedException"
#: A ValidationException is a conflict only when it says the commits made since the base clash
#: with this one (Iceberg's MergingSnapshotProducer checks); it says much else too (an S3 URI it
#: cannot parse, a schema it cannot apply), which no retry mends.
_VALIDATION = "org.apache.iceberg.exceptions.ValidationException"
_CONCURRENT = re.compile(r"conflicting|concurrent|found new|missing required files|cannot determine history", re.I)
#: Commits of branch references retried when another commit (of any reference) came between.
_REF_ATTEMPTS = 20


def state_dir(platform: Platform) -> Path:
    """Beside the tables when the warehouse is a local folder, else under the runtime home."""
    warehouse = local_warehouse(platform)
    folder = warehouse / ".conveyor" if warehouse is not None else platform.home / "lake"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _java_origin(err: BaseException) -> Any:
    """The Java exception behind a Py4J or PySpark error, or None."""
    return getattr(err, "java_exception", None) or getattr(err, "_origin", None)


def java_chain(err: BaseException) -> list[tuple[str, str]]:
    """(class, message) of each Java exception behind ``err`` (a Py4J or PySpark error), causes included."""
    origin = _java_origin(err)
    chain = []
    while origin is not None and len(chain) < 20:
        chain.append((str(origin.getClass().getName()), str(origin.getMessage() or "")))
        origin = origin.getCause()
    return chain


def is_conflict(chain: list[tuple[str, str]]) -> bool:
    """Whether the exceptions say that another commit came first. Pure."""
    return any(name == COMMIT_FAILED or (name == _VALIDATION and _CONCURRENT.search(message) is not None)
               for name, message in chain)


def _first_line(err: BaseException) -> str:
    """What Iceberg said: the Java exception's class and message (a Py4J error's own first line only
    names the call), cut to one line."""
    origin = _java_origin(err)
    try:
        text = str(origin.toString()) if origin is not None else str(err)
    except Exception:  # noqa: BLE001 (a gateway gone: the Python side's text will do)
        text = str(err)
    lines = text.strip().splitlines()
    return lines[0][:500] if lines else type(err).__name__


@contextmanager
def conflicts(table: str) -> Iterator[None]:
    """Turn Iceberg's "another commit came first" into :class:`LakeConflictError`."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    try:
        yield
    except (PySparkException, Py4JError) as err:
        if is_conflict(java_chain(err)):
            raise LakeConflictError(f"{table}: another run committed first ({_first_line(err)})") from err
        raise


def _ref_commit(spark: SparkSession, table: str, change: Any) -> None:
    """Commit ``change(manage_snapshots)``, again when another commit came between: reference
    updates are not re-applied by Iceberg itself. A refused precondition (IllegalArgumentException)
    is a conflict."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    for attempt in range(_REF_ATTEMPTS):
        try:
            change(iceberg_table(spark, table).manageSnapshots()).commit()
            return
        except (PySparkException, Py4JError) as err:  # PySpark converts some Java exceptions itself
            names = [name for name, _ in java_chain(err)]
            if "java.lang.IllegalArgumentException" in names[:1]:
                raise LakeConflictError(f"{table}: {_first_line(err)}") from err
            if names[:1] != [COMMIT_FAILED] or attempt == _REF_ATTEMPTS - 1:
                raise
            time.sleep(0.05 * (attempt + 1))


def branch_name(run_id: str, attempt: int) -> str:
    """``conveyor_run_<created, ms>_<run id>_<attempt>``: a branch points at the snapshot it
    started from, which may be days old, so its age for the clean-up is in its name."""
    return f"{BRANCH_PREFIX}{int(time.time() * 1000)}_{run_id}_{attempt}"


def _created_ms(name: str, snapshot: Any) -> int | None:
    created = name.removeprefix(BRANCH_PREFIX).split("_", 1)[0]
    if created.isdigit() and len(created) >= 13:
        return int(created)
    return snapshot.timestampMillis() if snapshot is not None else None  # named before the time was


def _require_built_on(iceberg: Any, table: str, branch: str, base: int, run_id: str) -> None:
    """The run's first commit on ``branch`` sits right on ``base``. Iceberg appends to a branch that
    no longer exists by creating it at ``main``'s head, so a branch dropped under a run (a clean-up
    that took it for a dead run's) would otherwise carry the run's rows on top of another run's
    and fast-forward ``main`` without a conflict: the same range landed twice."""
    snapshot = iceberg.snapshot(branch)
    while snapshot is not None and snapshot.parentId() is not None and snapshot.parentId() != base:
        snapshot = iceberg.snapshot(snapshot.parentId())
    first = snapshot.summary().get(RUN_PROPERTY) if snapshot is not None else None
    if snapshot is None or snapshot.parentId() != base or first != run_id:
        raise LakeConflictError(f"{table}: branch {branch} no longer starts at snapshot {base}; "
                                "another run moved or dropped it")


def conditional_commit(spark: SparkSession, table: str, base: int, branch: str, run_id: str,
                       write: Callable[[str], None]) -> int:
    """Make the commits ``write(branch)`` makes to ``branch`` the next ones after snapshot ``base``
    (its first carries ``run_id``): :class:`LakeConflictError` when ``main`` moved past ``base``
    first. Returns the rows they added (less those they deleted)."""
    _ref_commit(spark, table, lambda manage: manage.createBranch(branch, base))
    try:
        with conflicts(table):
            write(branch)
        iceberg = iceberg_table(spark, table)
        _require_built_on(iceberg, table, branch, base, run_id)
        added = live_records(iceberg.snapshot(branch).summary()) - live_records(iceberg.snapshot(base).summary())
        _ref_commit(spark, table, lambda manage: manage.fastForwardBranch("main", branch).removeBranch(branch))
        return added
    except BaseException:
        _drop_branch(spark, table, branch)
        raise


def _drop_branch(spark: SparkSession, table: str, branch: str) -> None:
    if iceberg_table(spark, table).refs().containsKey(branch):
        try:
            _ref_commit(spark, table, lambda manage: manage.removeBranch(branch))
        except LakeConflictError:
            pass  # dropped meanwhile by another run's clean-up


def ensure_snapshot(spark: SparkSession, table: str) -> None:
    """Give a new table an empty first snapshot: every commit then has a snapshot to start from
    (two runs that both found no snapshot could otherwise both land the same rows)."""
    iceberg = iceberg_table(spark, table)
    if iceberg.currentSnapshot() is None:
        with conflicts(table):
            iceberg.newAppend().commit()


def _marker(platform: Platform, topic: str) -> Path:
    return state_dir(platform) / "running" / topic


def interrupted(platform: Platform, topic: str) -> bool:
    """True when a run died while landing ``topic`` (on this host, with this state folder)."""
    return _marker(platform, topic).exists()


def mark_running(platform: Platform, topic: str, run_id: str) -> None:
    marker = _marker(platform, topic)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(run_id)


def clear_running(platform: Platform, topic: str) -> None:
    _marker(platform, topic).unlink(missing_ok=True)


def clean_up(spark: SparkSession, table: str, orphan_age: float) -> int:
    """Drop branches of runs that died and delete the files under ``table`` that no snapshot
    references, both when older than ``orphan_age`` seconds; returns the files deleted."""
    cutoff = int((time.time() - orphan_age) * 1000) + 1
    iceberg = iceberg_table(spark, table)
    refs = iceberg.refs()
    for name in list(refs.keySet()):
        if not name.startswith(BRANCH_PREFIX):
            continue
        created = _created_ms(name, iceberg.snapshot(refs.get(name).snapshotId()))
        if created is None or created < cutoff:
            _drop_branch(spark, table, name)
    jvm = spark.sparkContext._jvm
    action = jvm.org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession).deleteOrphanFiles(
        iceberg_table(spark, table)
    )
    # Hadoop lists a local or HDFS table's folder; an object store's (s3://, which Hadoop has no file
    # system for without hadoop-aws) is listed by the table's own FileIO (S3FileIO lists by prefix).
    if not str(iceberg.location()).startswith(("file:", "/", "hdfs:")):
        action = action.usePrefixListing(True)
    result = action.olderThan(cutoff).execute()
    return sum(1 for _ in result.orphanFileLocations())
