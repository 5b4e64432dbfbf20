"""The local runtime: brokers, controllers, Redis, PostgreSQL and the services, started on this machine for
the demo and the tests (``conveyor up``/``down``). It sits at the edge beside the CLI: nothing below
imports it."""
