"""The share dispatcher's position on the feed, from the share-group state as Kafka's
ShareGroupCommand prints it. No broker."""

from __future__ import annotations

import pytest

from conveyor.dispatch.share_positions import share_position
from conveyor.kafka_tools import ShareOffsets, parse_share_offsets

# What kafka-share-groups 4.3.1 printed with every record acknowledged (its start offsets trail).
OUTPUT = """
GROUP           TOPIC           PARTITION  START-OFFSET  LAG
mailer.ae7bd5   test-776c5bcc77 0          0             0
mailer.ae7bd5   test-776c5bcc77 1          0             0
mailer.ae7bd5   test-776c5bcc77 2          8             3
mailer.ae7bd5   test-776c5bcc77 3          -             -
"""


def test_the_tools_rows_of_the_group_are_read_and_uninitialised_partitions_left_out() -> None:
    assert parse_share_offsets(OUTPUT, "mailer.ae7bd5") == {
        ("test-776c5bcc77", 0): ShareOffsets(0, 0), ("test-776c5bcc77", 1): ShareOffsets(0, 0),
        ("test-776c5bcc77", 2): ShareOffsets(8, 3)}
    assert parse_share_offsets(OUTPUT, "mailer") == {}
    assert parse_share_offsets("\nShare group 'g' has no offset information.\n", "g") == {}


@pytest.mark.parametrize(("offsets", "end", "position"), [
    (ShareOffsets(0, 0), 27, 27),     # all settled: at the end, whatever the start offset says
    (ShareOffsets(8, 3), 13, 10),     # three to settle
    (ShareOffsets(8, 9), 13, 8),      # never below the start offset
    (ShareOffsets(8, None), 13, 8),   # no lag from the broker: the start offset
    (ShareOffsets(8, 0), None, 8),    # no end known
])
def test_the_position_leaves_exactly_the_unsettled_records_as_lag(offsets, end, position) -> None:
    assert share_position(offsets, end, end, floor=0) == position


@pytest.mark.parametrize(("before", "after", "floor", "position"), [
    # The CI failure: 27 settled, published; 4 arrive between the first end read and the state,
    # whose lag counts them. Old code published 27 - 4 = 23, a rewind by four.
    (27, 31, 27, 27),
    (27, 31, None, 23),  # nothing published yet: the lower bound
    (27, 31, 20, 23),    # an older publish below the lower bound does not pull it down
    (27, 31, 40, 27),    # nor does a floor above what can be settled (after minus the lag) lift it past that
])
def test_records_arriving_during_the_reading_never_move_the_position_back(before, after, floor, position) -> None:
    assert share_position(ShareOffsets(0, 4), before, after, floor) == position
