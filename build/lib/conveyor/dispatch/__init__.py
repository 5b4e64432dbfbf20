"""Consumer dispatcher: many clients share one partition, acking messages one by one.

Its pure core tracks the individual acks of a partition (``acktracker``) and packs the acks above
the committed offset into the offset commit metadata (``ackcodec``), so a takeover never hands out
an acked message again.
"""
