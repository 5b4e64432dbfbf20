"""Prometheus's own rule engine over the platform's rules file (``promtool test rules``): series
in, the alerts that fire out, with their labels and annotations as Prometheus renders them."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from conveyor.config import Ops
from conveyor.ops.rules import rules_document

#: A topic delivered at least once: its losses warn, through the rules' twins.
RELAXED = "logs.app"


#: Links declared for the host rules: the loopback reports no speed; eth0 reports its own, which wins.
DECLARED_MBIT = {"lo": 8000.0, "eth0": 10.0}


def rules() -> dict[str, Any]:
    return rules_document(Ops(max_lag_records=1000, machines={"link_speed_mbit": DECLARED_MBIT}), [RELAXED])


def write_rules(folder: Path) -> Path:
    path = folder / "rules.yml"
    path.write_text(yaml.safe_dump(rules(), sort_keys=False))
    return path


def annotations(alert: str, labels: dict[str, str], value: str) -> dict[str, str]:
    """The rule's annotations as Prometheus renders them for one series."""
    rule = next(r for g in rules()["groups"] for r in g["rules"] if r["alert"] == alert)
    render = {key: re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)],
                         re.sub(r"\{\{ \$value( \| [^}]+)? \}\}", value, text))
              for key, text in rule["annotations"].items()}
    return render


def expect(alert: str, eval_time: str, firing: list[tuple[dict[str, str], str]]) -> dict[str, Any]:
    rule = next(r for g in rules()["groups"] for r in g["rules"] if r["alert"] == alert)
    return {"eval_time": eval_time, "alertname": alert,
            "exp_alerts": [{"exp_labels": {**labels, **rule["labels"]}, "exp_annotations": annotations(alert, labels, value)}
                           for labels, value in firing]}


def run_promtool(tmp_path: Path, blocks: list[dict[str, Any]]) -> None:
    tests = {"rule_files": [str(write_rules(tmp_path))], "evaluation_interval": "1m", "tests": blocks}
    path = tmp_path / "rules_test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    tested = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    return {"series": name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}", "values": values}


