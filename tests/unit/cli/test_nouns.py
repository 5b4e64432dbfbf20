"""Commands sit under their nouns; the old top-level names stay, hidden, for a release."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from conveyor.cli import app


@pytest.mark.parametrize(("new", "old"), [(["ops", "lag"], ["lag"]), (["ops", "health"], ["health"]),
                                          (["ops", "dashboard"], ["dashboard"]),
                                          (["gateway", "generate"], ["generate"]),
                                          (["lake", "run"], ["pipeline", "lake"]),
                                          (["lake", "audit"], ["pipeline", "audit"]),
                                          (["views", "run"], ["pipeline", "realtime"])])
def test_the_noun_command_and_its_hidden_alias_both_answer(new: list[str], old: list[str]) -> None:
    runner = CliRunner()
    assert runner.invoke(app, [*new, "--help"]).exit_code == 0
    alias = runner.invoke(app, [*old, "--help"])
    assert alias.exit_code == 0 and "Deprecated" in alias.output
    listed = runner.invoke(app, ["--help"]).output
    assert f"│ {old[0]} " not in listed, f"{old[0]} is still listed at the top level"
