"""What a window showed for a moment (an offset move, a lost commit) stays in the watcher's metrics
for a while after it was last seen, so a rule can fire on it."""

from __future__ import annotations

from conveyor.ops.watch import Held


def test_a_key_stays_until_its_time_after_it_was_last_seen() -> None:
    held = Held(ms=1_000)
    held.see(["rewind"], 0)
    held.see(["lost"], 500)
    assert sorted(held.current(900)) == ["lost", "rewind"]
    held.see(["rewind"], 900)  # still in the window: held from now
    assert sorted(held.current(1_400)) == ["lost", "rewind"]
    assert held.current(1_600) == ["rewind"]
    assert held.current(2_000) == []
