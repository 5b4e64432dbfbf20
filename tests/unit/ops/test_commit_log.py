"""Commit records of __consumer_offsets decoded as Kafka writes them (key and value schemas of its
group coordinator, values 0 to 4), and the partition a group's commits go to."""

from __future__ import annotations

import struct

import pytest

from conveyor.ops.commit_log import coordinator_partition, decode_key, decode_value, java_hash


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def _compact(text: str) -> bytes:
    data = text.encode()
    return bytes([len(data) + 1]) + data


@pytest.mark.parametrize(("text", "expected"), [
    ("", 0), ("hello", 99162322), ("polygenelubricants", -2147483648), ("é", 233), ("𝄞", 0xD834 * 31 + 0xDD1E),
])
def test_java_hash_matches_string_hash_code(text, expected):
    assert java_hash(text) == expected


def test_a_group_goes_to_the_partition_kafka_picks():
    # Kafka's Utils.abs: Integer.MIN_VALUE is 0, not an overflow; a negative hash is negated, not masked.
    assert coordinator_partition("polygenelubricants", 50) == 0
    assert coordinator_partition("hello", 50) == 99162322 % 50
    assert java_hash("mailer") == -1081573212
    assert coordinator_partition("mailer", 50) == 1081573212 % 50 == 12


def test_an_offset_commit_key_names_group_topic_and_partition_and_other_records_are_skipped():
    key = struct.pack(">h", 1) + _string("mailer") + _string("notifications") + struct.pack(">i", 7)
    assert decode_key(key) == ("mailer", "notifications", 7)
    assert decode_key(struct.pack(">h", 2) + _string("mailer")) is None  # group metadata


@pytest.mark.parametrize(("value", "expected"), [
    (struct.pack(">hq", 0, 42) + _string("m") + struct.pack(">q", 1_000), (42, None, "m", 1_000)),
    (struct.pack(">hq", 1, 42) + _string("") + struct.pack(">qq", 1_000, -1), (42, None, "", 1_000)),
    (struct.pack(">hqi", 3, 42, 5) + _string("ack:v1") + struct.pack(">q", 1_000), (42, 5, "ack:v1", 1_000)),
    (struct.pack(">hqi", 3, 42, -1) + _string("") + struct.pack(">q", 1_000), (42, None, "", 1_000)),
    (struct.pack(">hqi", 4, 42, 5) + _compact("ack") + struct.pack(">q", 1_000) + b"\x00", (42, 5, "ack", 1_000)),
    (None, (None, None, "", None)),
])
def test_commit_values_of_every_version_and_a_tombstone(value, expected):
    assert decode_value(value) == expected
