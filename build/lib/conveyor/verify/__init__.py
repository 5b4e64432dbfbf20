"""``conveyor verify``: the platform's end-to-end promise checked in every sink (docs/verify.md).

:mod:`conveyor.verify.checks` judges plain data (pure); :mod:`conveyor.verify.gather` reads it from
the lake (Spark), Redis, Kafka and the components' /metrics pages.
"""
