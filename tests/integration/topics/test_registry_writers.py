"""Registrations racing from many processes: every writer of the registry shares one
transactional id, so each one that starts fences whichever is in flight. Gateways started together
each register their declared contracts at once; every one of them must get through, each new
schema with an id of its own, and none may give up while the others keep fencing it."""

from __future__ import annotations

import logging
import threading
import uuid

import pytest

from conveyor.bus.registry import Registration, Registry
from conveyor.config import Platform
from tests.integration.topics.test_registry_follower import _schema

pytestmark = pytest.mark.integration

WRITERS = 8
#: Rounds of racing writers at most: on a loaded machine the threads of one round may run one after
#: another and fence nobody, and a race that never happened proves nothing.
ROUNDS = 5


def _race(registries: list[Registry], tag: str) -> dict[int, Registration | BaseException]:
    """Every writer registers a new subject at once; each one's answer, or what it raised."""
    together = threading.Barrier(len(registries))
    answers: dict[int, Registration | BaseException] = {}

    def write(n: int) -> None:
        together.wait()
        try:
            answers[n] = registries[n].register(f"test-race-{tag}-{n}-value", _schema(n), f"writer-{n}")
        except BaseException as err:  # noqa: BLE001 - the answer is checked below, whatever it is
            answers[n] = err

    threads = [threading.Thread(target=write, args=(n,)) for n in range(len(registries))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    return answers


def test_writers_started_together_fence_each_other_and_every_one_registers(provisioned: Platform, caplog) -> None:
    base = uuid.uuid4().hex[:8]
    registries = [Registry(provisioned, f"test-registry-writer-{base}-{n}") for n in range(WRITERS)]
    for registry in registries:
        registry.start()
    caplog.set_level(logging.INFO, logger="conveyor.registry")
    rounds: dict[str, dict[int, Registration | BaseException]] = {}
    try:
        for round_ in range(ROUNDS):
            tag = f"{base}-{round_}"
            rounds[tag] = _race(registries, tag)
            if any("fenced or interrupted" in r.getMessage() for r in caplog.records):
                break
    finally:
        for registry in registries:
            registry.stop()

    fenced = [r for r in caplog.records if "fenced or interrupted" in r.getMessage()]
    assert fenced, f"no writer was fenced in {ROUNDS} rounds: the writers never raced"
    for tag, answers in rounds.items():
        failed = {n: answer for n, answer in answers.items() if not isinstance(answer, Registration)}
        assert not failed, (tag, failed)
        assert len(answers) == WRITERS
        assert all(answer.created and answer.version.version == 1 for answer in answers.values())  # type: ignore[union-attr]
        assert len({answer.version.id for answer in answers.values()}) == WRITERS  # type: ignore[union-attr]

    fresh = Registry(provisioned, f"test-registry-writer-{base}-reader")
    fresh.start()
    try:
        with fresh.reading() as state:
            for tag, answers in rounds.items():
                for n in range(WRITERS):
                    held = state.versions(f"test-race-{tag}-{n}-value")
                    assert [(v.version, v.id) for v in held] == [(1, answers[n].version.id)]  # type: ignore[union-attr]
    finally:
        fresh.stop()
