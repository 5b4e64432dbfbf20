"""The position feed's pure parts: the real-time job's batch end offsets from a query progress, the
lake's lowest position over its tables, and the commit metadata that marks a monitoring group."""

from __future__ import annotations

import uuid

from pyspark.sql.streaming.listener import StreamingQueryProgress

from conveyor.pipeline.lake_positions import lowest
from conveyor.pipeline.realtime.job import batch_positions, records_behind
from conveyor.positions import client_ids, group_name, kept_in, metadata, spark_client_id


def _progress(end_offset: object, latest_offset: object = None) -> StreamingQueryProgress:
    source = {"description": "KafkaV2[Subscribe[ads]]", "startOffset": None, "endOffset": end_offset,
              "latestOffset": latest_offset or end_offset, "numInputRows": 3, "inputRowsPerSecond": 1.0,
              "processedRowsPerSecond": 1.0, "metrics": {}}
    return StreamingQueryProgress.fromJson({
        "id": str(uuid.uuid4()), "runId": str(uuid.uuid4()), "name": "q", "timestamp": "2026-01-01T00:00:00.000Z",
        "batchId": 4, "batchDuration": 10, "durationMs": {}, "eventTime": {}, "stateOperators": [],
        "sources": [source], "sink": {"description": "foreachBatch", "numOutputRows": 3, "metrics": {}},
        "numInputRows": 3, "inputRowsPerSecond": 1.0, "processedRowsPerSecond": 1.0, "observedMetrics": {}})


def test_batch_positions_read_the_progress_json_not_pysparks_text():
    progress = _progress({"ads": {"0": 42, "1": 7}})
    assert progress.sources[0].endOffset == "{'ads': {'0': 42, '1': 7}}"  # why the JSON is read instead
    assert batch_positions(progress) == {("ads", 0): 42, ("ads", 1): 7}
    assert batch_positions(None) == {}


def test_a_job_is_behind_by_what_its_partitions_held_beyond_its_last_batch():
    assert records_behind(_progress({"ads": {"0": 42, "1": 7}})) == 0  # it read all there was
    assert records_behind(_progress({"ads": {"0": 42, "1": 7}}, {"ads": {"0": 50, "1": 10}})) == 11
    assert records_behind(None) == 0


def test_the_lake_shows_the_lowest_position_of_its_tables():
    assert lowest([{0: 10, 1: 5}, {0: 8, 1: 9, 2: 3}, None]) == {0: 8, 1: 5, 2: 3}
    assert lowest([]) == {}


def test_monitoring_metadata_names_where_the_position_lives():
    assert group_name("lake", "ads") == "conveyor.lake.ads"
    assert kept_in(metadata("iceberg")) == "iceberg"
    assert kept_in("") is kept_in(None) is kept_in("my-own-metadata") is kept_in('["monitor-only"]') is None


def test_monitoring_metadata_names_the_readers_client_ids_for_the_throttle():
    assert client_ids(metadata("route topic", ["w1-b0"])) == ("w1-b0",)
    assert client_ids(metadata("share-group state", ["conveyor-dispatch@b:2", "conveyor-dispatch@a:1"])) == (
        "conveyor-dispatch@a:1", "conveyor-dispatch@b:2")
    assert client_ids(metadata("iceberg", [], unquotable="why")) == ()
    assert client_ids('{"monitor-only": "iceberg"}') == ()  # published before client ids were named
    assert client_ids(None) == client_ids("acks:1,2") == ()
    assert spark_client_id("lake", "ads") == "conveyor-lake.ads"
