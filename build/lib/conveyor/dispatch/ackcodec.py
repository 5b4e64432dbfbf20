"""Individual acks above the committed offset, packed into offset commit metadata. Pure.

The dispatcher commits the lowest unacked offset (docs/dispatch.md); acks above it survive a
takeover only inside the commit's metadata string, which the broker caps at
``offset.metadata.max.bytes`` (4096 by default). As in Confluent's parallel-consumer the acks are
packed two ways and the smaller wins; ``max_length`` bounds the result so the tracker can hold
deliveries back before the cap is reached, where parallel-consumer drops the acks.

Binary layout::

    version (1 byte, = 1) | form (1 byte) | base (varint) | body
    form 1, bitset: bit i (least significant first) of byte i // 8 means offset base + 1 + i is
                    acked; the last byte is never zero.
    form 2, runs:   (gap, length - 1) varint pairs, one per run of consecutive acked offsets; gap
                    counts the unacked offsets before the run, minus one after the first run
                    (runs never touch, so a later gap is at least one).

The base is the committed offset the acks were written for, so a restore can tell metadata that
belongs to another offset. Varints are unsigned LEB128. The bytes travel as base85 (Python's
RFC 1924 alphabet): 5 characters per 4 bytes, where base64 would spend 4 per 3.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import IntEnum

from conveyor.dispatch.errors import MalformedAckMetadataError, UnknownAckVersionError

VERSION = 1
#: Kafka offsets are signed 64-bit integers.
MAX_OFFSET = 2**63 - 1
#: Version and form bytes.
_HEADER = 2
#: Widest range of offsets above the base that metadata covers. Ten times what a bitset fits in
#: 4096 characters, so only long runs behind a stuck message come near; the tracker delivers no
#: further ahead, which bounds its memory, and decode takes anything wider for garbage rather
#: than expanding a few bytes into millions of offsets.
MAX_SPAN = 1 << 18


class Form(IntEnum):
    BITSET = 1
    RUNS = 2


@dataclass(frozen=True)
class AckSet:
    """What one metadata string records."""

    #: The committed offset the acks were written for; None for "", which records nothing.
    base: int | None
    #: Acked offsets above the base, ascending.
    acked: tuple[int, ...]


def encode(base: int, acked: Iterable[int]) -> str:
    """The shorter of the two forms (the bitset on a tie) for ``acked``, all above ``base``."""
    relative = _relative(base, acked)
    return min((_text(form, base, relative) for form in Form), key=len)


def encode_as(form: Form, base: int, acked: Iterable[int]) -> str:
    """``acked`` in one given form, whatever its size."""
    return _text(form, base, _relative(base, acked))


def decode(text: str) -> AckSet:
    """The acks ``text`` records; raises an AckMetadataError for anything encode cannot write."""
    if not text:
        return AckSet(None, ())
    data = _binary(text)
    if data[0] != VERSION:
        raise UnknownAckVersionError(data[0])
    if len(data) < _HEADER:
        raise MalformedAckMetadataError("ack metadata ends before its form byte")
    try:
        form = Form(data[1])
    except ValueError:
        raise MalformedAckMetadataError(f"ack metadata has unknown form {data[1]}") from None
    base, pos = _read_varint(data, _HEADER)
    relative = _BODY_READERS[form](data[pos:])
    if relative and base + 1 + relative[-1] > MAX_OFFSET:
        raise MalformedAckMetadataError("ack metadata records offsets beyond Kafka's range")
    return AckSet(base, tuple(base + 1 + r for r in relative))


def text_length(binary_length: int) -> int:
    """Characters base85 spends on ``binary_length`` bytes (unpadded)."""
    full, rest = divmod(binary_length, 4)
    return 5 * full + (rest + 1 if rest else 0)


def varint_length(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


def max_length(max_base: int, span: int, runs: int) -> int:
    """The most characters ``encode`` returns for a base up to ``max_base`` and acks that lie
    within ``span`` (at most MAX_SPAN) offsets above the base and form at most ``runs`` runs.

    The bitset needs a bit per offset of the span whatever is acked; each run costs two varints,
    none larger than the span. The smaller bound holds because encode keeps the smaller form.
    """
    body = min((span + 7) // 8, 2 * runs * varint_length(span))
    return text_length(_HEADER + varint_length(max_base) + body)


def _relative(base: int, acked: Iterable[int]) -> list[int]:
    if not 0 <= base <= MAX_OFFSET:
        raise ValueError(f"base offset {base} is outside Kafka's offset range")
    relative = sorted({offset - base - 1 for offset in acked})
    if relative and (relative[0] < 0 or base + 1 + relative[-1] > MAX_OFFSET):
        raise ValueError(f"acked offsets must lie above the base {base} and within Kafka's range")
    if relative and relative[-1] >= MAX_SPAN:
        raise ValueError(f"acked offsets reach more than {MAX_SPAN} offsets above the base {base}")
    return relative


def _text(form: Form, base: int, relative: list[int]) -> str:
    data = bytearray((VERSION, form))
    _put_varint(data, base)
    data += _BODY_WRITERS[form](relative)
    return base64.b85encode(bytes(data)).decode("ascii")


def _binary(text: str) -> bytes:
    try:
        data = base64.b85decode(text)
    except ValueError as exc:
        raise MalformedAckMetadataError(f"ack metadata is not base85: {exc}") from None
    # b85decode tolerates dangling characters; insisting on the exact text encode writes keeps
    # one metadata string per ack set and turns more corruption into an error.
    if not data or base64.b85encode(data).decode("ascii") != text:
        raise MalformedAckMetadataError("ack metadata is not canonical base85")
    return data


def _bitset_body(relative: list[int]) -> bytes:
    if not relative:
        return b""
    bits = bytearray(relative[-1] // 8 + 1)
    for r in relative:
        bits[r >> 3] |= 1 << (r & 7)
    return bytes(bits)


def _runs_body(relative: list[int]) -> bytes:
    body = bytearray()
    end = 0  # relative offset just past the previous run
    i, count = 0, len(relative)
    while i < count:
        start, j = relative[i], i
        while j + 1 < count and relative[j + 1] == relative[j] + 1:
            j += 1
        _put_varint(body, start - end - (1 if i else 0))
        _put_varint(body, j - i)
        end = start + j - i + 1
        i = j + 1
    return bytes(body)


def _read_bitset(body: bytes) -> list[int]:
    if body and body[-1] == 0:
        raise MalformedAckMetadataError("ack bitset ends in a zero byte")
    if len(body) > MAX_SPAN // 8:
        raise MalformedAckMetadataError("ack bitset covers more offsets than metadata may")
    return [
        8 * i + bit for i, byte in enumerate(body) if byte for bit in range(8) if byte >> bit & 1
    ]


def _read_runs(body: bytes) -> list[int]:
    relative: list[int] = []
    end, pos = 0, 0
    while pos < len(body):
        gap, pos = _read_varint(body, pos)
        if pos == len(body):
            raise MalformedAckMetadataError("ack runs end inside a run")
        length, pos = _read_varint(body, pos)
        start = end + gap + (1 if relative else 0)
        end = start + length + 1
        if end > MAX_SPAN:
            raise MalformedAckMetadataError("ack runs cover more offsets than metadata may")
        relative.extend(range(start, end))
    return relative


def _put_varint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise MalformedAckMetadataError("ack metadata ends inside a number")
        byte = data[pos]
        pos += 1
        if byte == 0 and shift:
            raise MalformedAckMetadataError("ack metadata holds a number with padding bytes")
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift >= 63:
            raise MalformedAckMetadataError("ack metadata holds a number beyond Kafka's offsets")


_BODY_WRITERS: dict[Form, Callable[[list[int]], bytes]] = {
    Form.BITSET: _bitset_body,
    Form.RUNS: _runs_body,
}
_BODY_READERS: dict[Form, Callable[[bytes], list[int]]] = {
    Form.BITSET: _read_bitset,
    Form.RUNS: _read_runs,
}
