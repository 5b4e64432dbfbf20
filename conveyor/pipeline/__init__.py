"""PySpark jobs over the central cluster: exactly-once lake ingestion into Apache Iceberg, its
completeness, and the reconciliation of landed rows against the gateway's audit counts.

Pure logic (offset ranges and gaps, record parsing, completeness, reconciliation) sits in modules
without I/O; ``spark`` builds the one kind of Spark session every job uses.
"""
