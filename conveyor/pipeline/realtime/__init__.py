"""Real-time views: windowed counters of the central cluster's events in Redis, exactly once.

``plan`` turns pipeline.realtime into plain values a Spark task can use; ``deltas`` (pure, run in
Spark's Python workers) turns a micro-batch into per-key deltas, rejects and event times; ``store``
applies them to Redis idempotently; ``job`` is the Structured Streaming query and ``service`` runs it
(``views run``); ``views`` reads them.
"""
