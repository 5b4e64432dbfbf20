"""The path's size limits (conveyor.limits): what the gateway accepts leaves every later hop room
for its headers."""

from __future__ import annotations

import pytest

from conveyor.limits import (
    BROKER_DEFAULT_MAX,
    GATEWAY_HEADERS_MAX,
    HOP_HEADERS_MAX,
    PATH_HEADERS_MAX,
    PRODUCER_MESSAGE_MAX,
    batch_size,
    event_limit,
    fit_headers,
    headers_size,
    record_size,
)
from conveyor_sdk.contract import EXTRA_FIELDS, ContractVersion


def test_kafka_s_limits_and_the_hops_headroom_lower_the_event_limit_and_the_batch_size():
    assert event_limit(2**20, BROKER_DEFAULT_MAX) == PRODUCER_MESSAGE_MAX - 36 - PATH_HEADERS_MAX == 997_820
    assert event_limit(2**20, 20_000) == 20_000 - 61 - 36 - PATH_HEADERS_MAX  # the topic's, framing included
    assert event_limit(300, 20_000) == 300                                     # the gateway's own
    assert batch_size([BROKER_DEFAULT_MAX, BROKER_DEFAULT_MAX]) == PRODUCER_MESSAGE_MAX
    assert batch_size([BROKER_DEFAULT_MAX, 20_000]) == 20_000 - 61


def test_the_gateway_s_largest_headers_keep_within_their_room():
    verdict = ContractVersion(2**31 - 1, 2**31 - 1).header()
    assert headers_size([verdict, EXTRA_FIELDS]) <= GATEWAY_HEADERS_MAX


def test_the_largest_accepted_event_with_two_hops_largest_headers_fits_the_producer():
    limit = event_limit(2**20, BROKER_DEFAULT_MAX)
    key, value = b"k" * 36, b"v" * (limit - 36)
    copied = fit_headers([("conveyor-origin", b"dc1/" + b"t" * 2000)])  # the replicator's
    lettered = copied + fit_headers([("topic", b"t" * 249), ("group", b"g" * 249), ("reason", b"x" * 5000)])
    assert headers_size(lettered) <= PATH_HEADERS_MAX
    assert record_size(key, value, lettered) <= PRODUCER_MESSAGE_MAX
    assert record_size(key, value + b"v", [("h", b"x" * (PATH_HEADERS_MAX - 11))]) > PRODUCER_MESSAGE_MAX


def test_fit_headers_cuts_the_last_values_first_and_leaves_small_headers_alone():
    small = [("a", b"1"), ("b", b"2")]
    assert fit_headers(small) == small
    fitted = fit_headers([("topic", b"t" * 100), ("reason", b"r" * 2000)])
    assert fitted[0] == ("topic", b"t" * 100)
    assert fitted[1][1].endswith(b"...") and headers_size(fitted) <= HOP_HEADERS_MAX
    with pytest.raises(ValueError, match="header names alone"):
        fit_headers([("k" * 2000, b"")])
