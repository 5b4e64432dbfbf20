"""Which of Iceberg's exceptions say that another run committed first (and are retried from the
table's new positions), and which say something no retry mends."""

from __future__ import annotations

import pytest

from conveyor.pipeline.guard import COMMIT_FAILED, is_conflict

VALIDATION = "org.apache.iceberg.exceptions.ValidationException"
SPARK = "org.apache.spark.SparkException"


@pytest.mark.parametrize("chain", [
    [(COMMIT_FAILED, "Cannot commit lake.events.ads: metadata location has changed")],
    [(SPARK, "Job aborted"), (VALIDATION, "Found conflicting files that can contain records matching true: [a.parquet]")],
    [(VALIDATION, "Found new conflicting delete files that can apply to records matching true")],
    [(VALIDATION, "Missing required files to delete: a.parquet")],
    [(VALIDATION, "Cannot determine history between starting snapshot 1 and the last known ancestor 2")],
], ids=["commit-failed", "conflicting-files-as-a-cause", "new-deletes", "files-gone", "history"])
def test_another_commit_first_is_a_conflict(chain):
    assert is_conflict(chain)


@pytest.mark.parametrize("chain", [
    # A table of another warehouse in the same catalog: retrying cannot read it either.
    [(VALIDATION, "Invalid S3 URI, cannot determine scheme: /tmp/warehouse/ops/gaps/metadata/00001.metadata.json")],
    [(VALIDATION, "Cannot find field 'event_id' in struct")],
    [(SPARK, "Task failed"), ("java.io.IOException", "No space left on device")],
    [],
], ids=["s3-uri", "schema", "io", "no-java-exception"])
def test_what_no_retry_mends_is_not_a_conflict(chain):
    assert not is_conflict(chain)
