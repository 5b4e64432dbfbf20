"""The lake job's Prometheus metrics: served on /metrics by ``--every``, or written to a file for
node_exporter's textfile collector after ``--once``."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, write_to_textfile

from conveyor.pipeline.completeness import HOUR, last_complete_hour
from conveyor.pipeline.lake import RunSummary


class LakeMetrics:
    def __init__(self, lateness: timedelta) -> None:
        self.registry = CollectorRegistry()
        self._lateness = lateness

        def per_topic(name: str, doc: str) -> Counter:
            return Counter(name, doc, ["topic"], registry=self.registry)

        self.runs = Counter("conveyor_lake_runs", "Lake runs by result (ok, failed).", ["result"],
                            registry=self.registry)
        self.records_read = per_topic("conveyor_lake_records_read", "Kafka records read.")
        self.bytes_read = per_topic("conveyor_lake_bytes_read", "Bytes of Kafka record values read.")
        self.checked = per_topic("conveyor_lake_records_checked", "Records checked against their contract by the lake; "
                                 "the rest kept the gateway's verdict and were parsed in the JVM.")
        self.landed = per_topic("conveyor_lake_rows_landed", "Rows committed to the topic's table.")
        self.quarantined = per_topic("conveyor_lake_rows_quarantined", "Records committed to quarantine.")
        self.duplicates = per_topic("conveyor_lake_duplicates_dropped", "Rows dropped as an event_id already landed.")
        self.gaps = per_topic("conveyor_lake_gaps", "Gaps found (retention deleted unread data).")
        self.lost = Counter("conveyor_lake_lost_records", "Offsets retention deleted before they landed (gaps).",
                            ["topic", "partition"], registry=self.registry)
        self.last_success = Gauge("conveyor_lake_last_success_timestamp_seconds", "When the topic's last run finished.",
                                  ["topic"], registry=self.registry)
        self.duration = Gauge("conveyor_lake_run_duration_seconds", "Duration of the last run.", registry=self.registry)
        # Every hour before it is complete too: one number per topic says which hours are, where a
        # series per hour would make each new hour a new series.
        self.complete_until = Gauge("conveyor_lake_complete_until_timestamp_seconds",
                                    "End of the topic's last complete hour.", ["topic"], registry=self.registry)

    def observe(self, summary: RunSummary) -> None:
        self.runs.labels("ok").inc()
        self.duration.set(summary.seconds)
        finished = summary.started_at.timestamp() + summary.seconds
        for run in summary.topics:
            self.records_read.labels(run.topic).inc(run.records_read)
            self.bytes_read.labels(run.topic).inc(run.bytes_read)
            self.checked.labels(run.topic).inc(run.checked)
            self.landed.labels(run.topic).inc(run.landed)
            self.quarantined.labels(run.topic).inc(run.quarantined)
            self.duplicates.labels(run.topic).inc(run.duplicates_dropped)
            self.gaps.labels(run.topic).inc(len(run.gaps))
            for gap in run.gaps:
                self.lost.labels(run.topic, str(gap.partition)).inc(gap.count)
            self.last_success.labels(run.topic).set(finished)
            partitions = [r.partition for r in run.ranges]
            hour = last_complete_hour(dict.fromkeys(partitions, run.listed_at), partitions, self._lateness)
            if hour is not None:
                self.complete_until.labels(run.topic).set((hour + HOUR).timestamp())

    def failed(self) -> None:
        self.runs.labels("failed").inc()

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_to_textfile(str(path), self.registry)
