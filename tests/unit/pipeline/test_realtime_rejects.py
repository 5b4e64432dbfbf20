"""The side output's headers: every field a reader needs, within the bytes a hop may add. Pure."""

from __future__ import annotations

from conveyor.limits import HOP_HEADERS_MAX, headers_size
from conveyor.pipeline.realtime.deltas import Reject
from conveyor.pipeline.realtime.rejects import reject_fields, reject_headers


def test_a_reject_s_headers_name_it_and_a_long_reason_is_cut_to_fit():
    reject = Reject("incomplete", "user_interests", "group-by field category is missing", "ad-events", 2, 41,
                    b"user-1", b"{}")
    assert reject_fields(reject_headers(reject, 7)) == {
        "kind": "incomplete", "view": "user_interests", "topic": "ad-events", "partition": "2", "offset": "41",
        "batch": "7", "reason": "group-by field category is missing"}

    wordy = Reject("malformed", None, "breaks the contract: " + "x" * 5000, "ad-events", 0, 3, None, b"!")
    headers = reject_headers(wordy, 7)
    fields = reject_fields(headers)
    assert headers_size(headers) <= HOP_HEADERS_MAX and "view" not in fields
    assert fields["reason"].startswith("breaks the contract: x") and fields["reason"].endswith("...")
    assert (fields["kind"], fields["offset"]) == ("malformed", "3")
