"""Commands that change a cluster ask for its name first, unless --yes."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from conveyor.cli import app

ROOT = Path(__file__).resolve().parents[3]


def test_the_throttle_asks_for_the_clusters_name_and_does_nothing_without_it() -> None:
    args = ["ops", "throttle", "-p", str(ROOT / "platform.yaml"), "--cluster", "central", "--once"]
    refused = CliRunner().invoke(app, args, input="dc1\n")
    assert refused.exit_code == 1
    assert "type central to let the throttle set client quotas" in refused.output
    assert "not confirmed; nothing was changed" in refused.output
    assert "busy:" not in refused.output, "no round ran"
