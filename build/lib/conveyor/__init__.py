"""Conveyor: a platform for high-load event data on Apache Kafka."""

__version__ = "0.1.0"
