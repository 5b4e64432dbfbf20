"""Every size an event meets on its path, derived in one place, so that the largest event the
gateway accepts crosses every part: the replicator's copy, the lake, the views' rejects and the
dispatcher's dead letters. Pure: no Kafka here.

Each part that produces a record (the gateway, the replicator, the views' reject side output, the
dispatcher's dead letters) uses a producer whose ``message.max.bytes`` is :data:`PRODUCER_MESSAGE_MAX`
and writes the event's key and value unchanged, adding at most :data:`HOP_HEADERS_MAX` bytes of
headers to those it found. An event meets at most :data:`HOPS_AFTER_GATEWAY` such hops in a row (the
replicator's copy, then a dead letter or a reject of the copy), and the gateway keeps their headroom
out of the events it accepts, so no later hop can meet a record it is not allowed to write.

librdkafka refuses in ``produce()`` a record whose key, value and serialized headers plus its
framing exceed the producer's ``message.max.bytes``; the broker refuses a record batch above the
topic's ``max.message.bytes``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

#: The message.max.bytes of every Conveyor producer (librdkafka's default, set explicitly so the
#: limit is ours).
PRODUCER_MESSAGE_MAX = 1_000_000
#: librdkafka accepts key + value + headers + 36 bytes up to message.max.bytes (measured on 2.16: a
#: record's largest framing in the v2 format).
RECORD_OVERHEAD = 36
#: A record batch's header, which the broker counts against the topic's max.message.bytes.
BATCH_OVERHEAD = 61
#: The broker's default max.message.bytes, assumed for a topic whose config cannot be read.
BROKER_DEFAULT_MAX = 1_048_588
#: Serialized header bytes any one hop after the gateway may add to an accepted event's record (the
#: replicator's origin, a dead letter's why, a reject's reason). Each hop keeps within it
#: (:func:`fit_headers`); the gateway keeps it free.
HOP_HEADERS_MAX = 1024
#: The replicator's copy, then a dead letter or a reject of it: each keeps the headers it found.
HOPS_AFTER_GATEWAY = 2
#: The gateway's own headers on a record it writes, at their largest: the contract version it checked
#: the event against (``conveyor-contract: <id>:<version>``, conveyor.gateway.verdict) and the mark of
#: fields outside it (``conveyor-extra-fields: 1``).
GATEWAY_HEADERS_MAX = 96
#: Header bytes the gateway keeps free in every event it accepts: its own, and the hops' after it.
PATH_HEADERS_MAX = GATEWAY_HEADERS_MAX + HOPS_AFTER_GATEWAY * HOP_HEADERS_MAX
#: A varint's largest size: a header's key and value lengths each take one.
_VARINT_MAX = 5

Headers = Sequence[tuple[str, bytes | None]]


def headers_size(headers: Headers | None) -> int:
    """The most bytes ``headers`` take in a v2 record: per header a varint of each length and the
    bytes themselves (a varint counted at its largest, 5 bytes)."""
    return sum(2 * _VARINT_MAX + len(key.encode()) + len(value or b"") for key, value in headers or ())


def record_size(key: bytes | None, value: bytes | None, headers: Headers | None = None) -> int:
    """What librdkafka counts against ``message.max.bytes`` for one record."""
    return len(key or b"") + len(value or b"") + headers_size(headers) + RECORD_OVERHEAD


def event_limit(gateway_max: int, topic_max: int) -> int:
    """The most bytes one accepted event's key and value may take together: within the gateway's
    own limit, and with room for the path's headers in every producer and on every cluster the topic
    lives on (``topic_max``: its smallest max.message.bytes among them)."""
    return min(gateway_max,
               PRODUCER_MESSAGE_MAX - RECORD_OVERHEAD - PATH_HEADERS_MAX,
               topic_max - BATCH_OVERHEAD - RECORD_OVERHEAD - PATH_HEADERS_MAX)


def batch_size(topic_maxima: Iterable[int]) -> int:
    """The producer's batch.size: no batch of several records may exceed any topic's limit, or the
    broker refuses the whole batch after other batches of the same request were written."""
    return min([PRODUCER_MESSAGE_MAX, *(m - BATCH_OVERHEAD for m in topic_maxima)])


def fit_headers(headers: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """``headers`` within :data:`HOP_HEADERS_MAX`: free-text values (the last ones first) are cut,
    marked with a trailing ``...``, so a hop's own words never make a record too large to write."""
    fitted = list(headers)
    excess = headers_size(fitted) - HOP_HEADERS_MAX
    for index in reversed(range(len(fitted))):
        if excess <= 0:
            break
        key, value = fitted[index]
        keep = max(0, len(value) - excess - 3)
        cut = value[:keep] + b"..."
        excess -= len(value) - len(cut)
        fitted[index] = (key, cut)
    if excess > 0:
        raise ValueError(f"header names alone take {headers_size(fitted)} bytes, above {HOP_HEADERS_MAX}")
    return fitted
