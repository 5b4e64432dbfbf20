"""The demo's platform.yaml names in ops.running exactly the parts `make demo` leaves running, so
the rules file `conveyor up` writes waits on none it never keeps up (the dispatcher of `dispatch
demo`, the throttle) and misses none it does."""

from __future__ import annotations

import re
from pathlib import Path

from conveyor.cli.common import platform_from
from conveyor.ops.rules import PRESENCE, rules_document

ROOT = Path(__file__).resolve().parents[2]
#: The command that leaves each part running in the background, as the Makefile writes it.
SERVICES = {"gateway start": "gateway", "replicate start": "replicator", "dispatch serve": "dispatcher",
            "lake start": "lake", "views start": "views", "ops dashboard": "watcher", "ops throttle": "throttle"}


def demo_recipe() -> str:
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^demo:.*\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    assert recipe, "no demo target in the Makefile"
    return recipe[1]


def test_ops_running_names_what_make_demo_leaves_running() -> None:
    recipe = demo_recipe()
    started = {part for command, part in SERVICES.items() if f"$(BIN)/conveyor {command}" in recipe}
    ops = platform_from(ROOT / "platform.yaml").ops
    assert set(ops.running) == started
    absent = {r["alert"] for g in rules_document(ops)["groups"] for r in g["rules"]
              if r["alert"].startswith("ConveyorComponentAbsent")}
    assert absent == {f"ConveyorComponentAbsent{''.join(w.title() for w in PRESENCE[p][0].split())}" for p in started}
    assert not absent & {"ConveyorComponentAbsentDispatcher", "ConveyorComponentAbsentThrottle"}
