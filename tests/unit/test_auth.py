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
