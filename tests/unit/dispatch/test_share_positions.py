"""The share dispatcher's position on the feed, from the share-group state as Kafka's
ShareGroupCommand prints it. No broker."""

from __future__ import annotations

import pytest

from conveyor.dispatch.share_positions import share_position
from conveyor.ops.kafka_tools import ShareOffsets, parse_share_offsets

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
    assert share_position(offsets, end) == position
