"""Service tokens checked against their stored hashes: SHA-256, or salted scrypt. No server."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conveyor.auth import Authorizer, Unauthenticated, scrypt_matches, token_digest, token_scrypt
from conveyor.config import parse_platform


def _platform(**services: dict[str, str]):
    return parse_platform({"clusters": {"c": {"role": "writable"}},
                           "topics": {"t": {"partitions": 1, "producers": list(services)}},
                           "services": services})


def test_a_scrypt_hash_is_salted_and_verifies_only_its_token():
    first, second = token_scrypt("s3cret-token"), token_scrypt("s3cret-token")
    assert first != second  # a salt of its own each time
    assert scrypt_matches("s3cret-token", first) and scrypt_matches("s3cret-token", second)
    assert not scrypt_matches("s3cret-tokem", first)


def test_the_authorizer_knows_services_by_either_hash_and_refuses_other_tokens():
    authorizer = Authorizer(_platform(fast={"token_sha256": token_digest("fast-token")},
                                      slow={"token_scrypt": token_scrypt("slow-token")}))
    assert authorizer.service_of("Bearer fast-token") == "fast"
    assert authorizer.service_of("Bearer slow-token") == "slow"
    assert authorizer.service_of("Bearer slow-token") == "slow"  # remembered: no second scrypt
    for wrong in ("Bearer slow-tokem", "Bearer slow-tokem"):
        with pytest.raises(Unauthenticated, match="unknown service token"):
            authorizer.service_of(wrong)


def test_hash_token_reads_the_token_on_stdin_and_prints_the_platform_line():
    run = subprocess.run([sys.executable, "-m", "conveyor", "config", "hash-token", "--scrypt"],
                         input="from-stdin\n", capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    key, _, value = run.stdout.strip().partition(": ")
    assert key == "token_scrypt" and scrypt_matches("from-stdin", value)
    assert "from-stdin" not in run.stdout


def _book(clock=None):
    from conveyor.auth import TokenBook
    from conveyor.config.tokens import TokenHash

    hashes = {"slow": TokenHash(token_scrypt=token_scrypt("slow-token")),
              "fast": TokenHash(token_sha256=token_digest("fast-token"))}
    return TokenBook(hashes, clock=clock) if clock else TokenBook(hashes)


def test_unknown_tokens_past_the_rate_of_an_address_are_refused_without_a_hash(monkeypatch):
    from conveyor import auth

    now = [1000.0]
    book = _book(lambda: now[0])
    hashed = []
    real = auth.scrypt_matches
    monkeypatch.setattr(auth, "scrypt_matches", lambda token, stored: hashed.append(token) or real(token, stored))
    assert book.name_of("slow-token", "10.0.0.1") == "slow"
    hashed.clear()
    for i in range(auth.UNKNOWN_PER_MINUTE):
        assert book.name_of(f"garbage-{i}", "10.0.0.1") is None
    with pytest.raises(auth.TooManyAttempts, match="more than 20 unknown tokens from 10.0.0.1") as refused:
        book.name_of("garbage-more", "10.0.0.1")
    assert refused.value.status == 429 and refused.value.retry_after >= 1
    assert len(hashed) == auth.UNKNOWN_PER_MINUTE  # the refused one cost no hash
    # Neither another address, nor a token already verified, nor one already judged is held up by it.
    assert book.name_of("garbage-other", "10.0.0.2") is None
    assert book.name_of("slow-token", "10.0.0.1") == "slow" and book.name_of("fast-token", "10.0.0.1") == "fast"
    assert book.name_of("garbage-0", "10.0.0.1") is None and book.decided("garbage-0")
    now[0] += 61
    assert book.name_of("garbage-new", "10.0.0.1") is None  # a new minute


def test_garbage_cannot_flush_a_known_token_s_verdict(monkeypatch):
    from conveyor import auth

    monkeypatch.setattr(auth, "_REJECTED", 5)
    book = _book()
    assert book.name_of("slow-token") == "slow"
    for i in range(12):
        assert book.name_of(f"garbage-{i}", f"10.0.0.{i}") is None
    assert book.decided("slow-token") and book.decided("fast-token")
    assert not book.decided("garbage-0")  # the oldest garbage was forgotten, the known token not


def test_scrypt_runs_at_most_in_its_slots_and_a_waiter_past_its_wait_gets_429(monkeypatch):
    import threading

    from conveyor import auth

    monkeypatch.setattr(auth, "SLOT_WAIT_S", 0.2)
    release, running, peak = threading.Event(), [], [0]
    lock = threading.Lock()

    def slow_match(token, stored):
        with lock:
            running.append(token)
            peak[0] = max(peak[0], len(running))
        release.wait(5)
        with lock:
            running.remove(token)
        return False

    monkeypatch.setattr(auth, "scrypt_matches", slow_match)
    book = _book()
    threads = [threading.Thread(target=book.name_of, args=(f"t{i}", f"a{i}")) for i in range(auth.SCRYPT_SLOTS)]
    for thread in threads:
        thread.start()
    while len(running) < auth.SCRYPT_SLOTS:
        threading.Event().wait(0.01)
    with pytest.raises(auth.TooManyAttempts, match="slot is busy"):
        book.name_of("one-too-many", "b")
    release.set()
    for thread in threads:
        thread.join(5)
    assert peak[0] == auth.SCRYPT_SLOTS


def test_a_token_comes_as_bearer_or_as_basic_s_password():
    import base64

    import pytest

    from conveyor.auth import Unauthenticated, presented_token

    basic = base64.b64encode(b"adserver:the-token").decode()
    assert presented_token("Bearer the-token") == presented_token(f"Basic {basic}") == "the-token"
    for refused in (None, "", "Basic !!!", f"Basic {base64.b64encode(b'no-password').decode()}", "Token x"):
        with pytest.raises(Unauthenticated):
            presented_token(refused)
