"""PySpark jobs over the central cluster: exactly-once lake ingestion into Apache Iceberg, its
completeness, and the reconciliation of landed rows against the gateway's audit counts.

Pure logic (offset ranges and gaps, record parsing, completeness, reconciliation, the scheduler's
``schedule``) sits in modules without I/O; ``spark`` builds the one kind of Spark session every job
uses; ``lake_service`` runs the lake once or as a scheduler.
"""
