"""The commit-metadata codec: round trips, the smaller form, the size bound, garbage."""

from __future__ import annotations

import base64
import random
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor.dispatch.ackcodec import (
    MAX_OFFSET,
    MAX_SPAN,
    AckSet,
    Form,
    decode,
    encode,
    encode_as,
    max_length,
)
from conveyor.dispatch.acktracker import PartitionAcks
from conveyor.dispatch.errors import (
    AckMetadataError,
    MalformedAckMetadataError,
    UnknownAckVersionError,
)
from conveyor.errors import ConveyorError


def packed(*data: int) -> str:
    return base64.b85encode(bytes(data)).decode("ascii")


@st.composite
def run_shaped(draw: st.DrawFn) -> frozenset[int]:
    """Acks as runs with gaps, the shape out-of-order acks take, up to ~2 * 10^5 offsets wide."""
    offsets: set[int] = set()
    cursor = 1
    for gap, length in draw(
        st.lists(st.tuples(st.integers(0, 5_000), st.integers(1, 300)), max_size=40)
    ):
        cursor += gap
        offsets.update(range(cursor, cursor + length))
        cursor += length
    return frozenset(offsets)


relative_acks = st.one_of(
    st.frozensets(st.integers(1, 3_000), max_size=400),
    run_shaped(),
)
bases = st.one_of(st.integers(0, 1_000), st.integers(0, 2**62))


def absolute(base: int, relative: frozenset[int]) -> frozenset[int]:
    return frozenset(base + r for r in relative)


def count_runs(offsets: frozenset[int]) -> int:
    return sum(1 for o in offsets if o - 1 not in offsets)


@given(bases, relative_acks)
def test_round_trip(base: int, relative: frozenset[int]) -> None:
    acked = absolute(base, relative)
    expected = AckSet(base, tuple(sorted(acked)))
    assert decode(encode(base, acked)) == expected
    for form in Form:
        assert decode(encode_as(form, base, acked)) == expected


@given(bases, relative_acks)
def test_chosen_form_is_never_larger_than_the_other(base: int, relative: frozenset[int]) -> None:
    acked = absolute(base, relative)
    forms = {form: encode_as(form, base, acked) for form in Form}
    chosen = encode(base, acked)
    assert chosen in forms.values()
    assert all(len(chosen) <= len(text) for text in forms.values())


@given(bases, relative_acks)
def test_max_length_bounds_every_encoding(base: int, relative: frozenset[int]) -> None:
    acked = absolute(base, relative)
    span = max(relative, default=0)
    assert len(encode(base, acked)) <= max_length(base, span, count_runs(acked))


def test_the_bitset_wins_on_scattered_acks_and_runs_on_long_runs() -> None:
    every_other = range(1, 20_001, 2)
    one_long_run = range(50, 20_050)
    assert encode(0, every_other) == encode_as(Form.BITSET, 0, every_other)
    assert encode(0, one_long_run) == encode_as(Form.RUNS, 0, one_long_run)
    assert len(encode(0, one_long_run)) < 20


def test_layout_is_the_documented_one() -> None:
    # Base 10, acks 11, 12, 13 and 16: relative bits 0, 1, 2, 5.
    acked = [11, 12, 13, 16]
    assert encode_as(Form.BITSET, 10, acked) == packed(1, 1, 10, 0b100111)
    # One run of three from relative 0, then a gap of two (stored minus one) and a run of one.
    assert encode_as(Form.RUNS, 10, acked) == packed(1, 2, 10, 0, 2, 1, 0)
    assert encode(10, acked) == packed(1, 1, 10, 0b100111)
    # A base past 127 takes a two-byte varint, least significant group first.
    assert decode(packed(1, 1, 0x80 | 44, 2, 1)) == AckSet(300, (301,))


def test_nothing_acked_encodes_short_and_empty_text_decodes() -> None:
    assert decode(encode(123_456, [])) == AckSet(123_456, ())
    assert len(encode(123_456, [])) <= 8
    assert decode("") == AckSet(None, ())


def test_the_widest_span_round_trips() -> None:
    acked = [7, 5 + MAX_SPAN]
    assert decode(encode(5, acked)).acked == tuple(acked)


def test_offsets_at_the_top_of_kafkas_range() -> None:
    acked = [MAX_OFFSET - 3, MAX_OFFSET]
    assert decode(encode(MAX_OFFSET - 5, acked)).acked == tuple(acked)


@pytest.mark.parametrize(
    ("base", "acked"),
    [(10, [10]), (10, [9, 12]), (-1, [3]), (0, [MAX_OFFSET + 1]), (5, [5 + MAX_SPAN + 1])],
    ids=["ack-at-base", "ack-below-base", "negative-base", "beyond-range", "beyond-span"],
)
def test_encode_refuses_acks_it_cannot_record(base: int, acked: list[int]) -> None:
    with pytest.raises(ValueError):
        encode(base, acked)


def test_unknown_version_names_the_version() -> None:
    with pytest.raises(UnknownAckVersionError) as caught:
        decode(packed(2, 1, 0))
    assert caught.value.version == 2
    assert isinstance(caught.value, ConveyorError)


@pytest.mark.parametrize(
    "text",
    [
        "not base85 ü",
        "a b c",
        "0",  # a dangling character b85decode would silently drop
        "~~~~~",  # overflows a base85 group
        packed(1),  # no form byte
        packed(1, 9, 0),  # unknown form
        packed(1, 1),  # no base
        packed(1, 1, 0x80),  # base ends mid-varint
        packed(1, 1, 0x80, 0),  # base with a padding byte
        packed(1, 1, *[0xFF] * 9, 1),  # base longer than an offset
        packed(1, 1, 0, 1, 0),  # bitset ending in a zero byte
        packed(1, 2, 0, 3),  # run without its length
        packed(1, 2, 0, 0, 0xFF, 0xFF, 0xFF, 0x7F),  # 2^28 acks in one run
        packed(1, 1, 0, *[0] * (MAX_SPAN // 8), 1),  # bitset wider than the span
        packed(1, 2, 0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F, 0, 5),  # past 2^63
    ],
)
def test_decode_rejects_malformed_metadata(text: str) -> None:
    with pytest.raises(MalformedAckMetadataError):
        decode(text)


@given(st.text())
def test_decode_of_any_text_returns_acks_or_raises_the_codec_error(text: str) -> None:
    try:
        decode(text)
    except AckMetadataError:
        pass


@settings(deadline=None)
@given(st.sampled_from([1, 2]), st.binary(max_size=64))
def test_decode_of_any_binary_is_either_rejected_or_a_faithful_ack_set(
    form: int, body: bytes
) -> None:
    # Version 1 and a real form, so the body parsers themselves face the garbage.
    try:
        recorded = decode(packed(1, form, *body))
    except MalformedAckMetadataError:
        return
    assert recorded.base is not None
    assert all(offset > recorded.base for offset in recorded.acked)
    assert decode(encode(recorded.base, recorded.acked)) == recorded


def offset_stream(rnd: random.Random, start: int) -> Iterator[int]:
    """Offsets as Kafka returns them; the gaps stand for transaction markers and compaction."""
    offset = start
    while True:
        yield offset
        offset += rnd.choice((1, 1, 1, 1, 2, 9, 300))


@settings(deadline=None)
@given(st.sampled_from([24, 48, 96, 400]), st.integers(0, 2**40), st.integers(0, 2**32))
def test_metadata_never_exceeds_the_limit_when_the_tracker_said_it_fits(
    limit: int, start: int, seed: int
) -> None:
    # Sessions long enough to reach the limit; a seeded generator keeps them cheap to draw.
    rnd = random.Random(seed)
    acks = PartitionAcks(start)
    fetched = offset_stream(rnd, start)
    held = next(fetched)
    pending: list[int] = []
    for _ in range(800):
        action = rnd.random()
        if action < 0.6:
            if acks.may_deliver(held, limit):
                acks.deliver(held)
                pending.append(held)
                held = next(fetched)
        elif pending and action < 0.9:
            acks.ack(pending.pop(rnd.randrange(len(pending))))
        elif pending:
            acks.nack(rnd.choice(pending))
        assert acks.encoded_size() <= limit


@settings(deadline=None)
@given(st.sampled_from([64, 200, 1_000]), st.integers(1, 100), st.integers(0, 2**32))
def test_may_fetch_more_promises_room_for_the_headroom(
    limit: int, headroom: int, seed: int
) -> None:
    rnd = random.Random(seed)
    acks = PartitionAcks(0)
    offset = 0
    pending: list[int] = []
    for _ in range(60):
        if not acks.may_fetch_more(limit, headroom):
            # Acks free room; the lowest pending offset holds the commit back until last.
            for _ in range(rnd.randrange(len(pending) + 1)):
                acks.ack(pending.pop(rnd.randrange(1, len(pending)) if len(pending) > 1 else 0))
            continue
        for _ in range(headroom):
            assert acks.may_deliver(offset, limit)
            acks.deliver(offset)
            pending.append(offset)
            offset += 1
            if pending and rnd.random() < 0.6:
                acks.ack(pending.pop(rnd.randrange(len(pending))))
        assert acks.encoded_size() <= limit
