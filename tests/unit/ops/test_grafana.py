"""The Grafana dashboards name only metrics, and labels of them, that the platform exports."""

from __future__ import annotations

import json
import re

from typer.testing import CliRunner

from conveyor.cli import app
from conveyor.ops.grafana import DASHBOARDS, dashboard_document
from tests.metricskit import KAFKA_EXPORTER_LABELS, NODE_EXPORTER_LABELS, exported_label_names

_METRIC = re.compile(r"\b(?:conveyor|node|kafka)_[a-z0-9_]+|\bup(?=\{)")
#: Labels Prometheus adds to every series it scrapes.
_TARGET_LABELS = {"instance", "job"}


def _labels_used(expr: str, legend: str) -> set[str]:
    grouped = {label.strip() for by in re.findall(r"by \(([^)]*)\)", expr) for label in by.split(",")}
    selected = set(re.findall(r"(\w+)=\"", expr))
    return (grouped | selected | set(re.findall(r"\{\{(\w+)\}\}", legend))) - _TARGET_LABELS


def test_every_expression_names_exported_metrics_and_their_labels() -> None:
    exported = exported_label_names() | NODE_EXPORTER_LABELS | KAFKA_EXPORTER_LABELS
    for dashboard in DASHBOARDS:
        for panel in dashboard.panels:
            for expr, legend in panel.targets:
                names = set(_METRIC.findall(expr))
                assert names, (dashboard.uid, panel.title, expr)
                for name in names:
                    assert name in exported, (dashboard.uid, panel.title, name)
                    used = _labels_used(expr, legend) - {"le", "quantile"} if "histogram_quantile" in expr \
                        else _labels_used(expr, legend)
                    assert used <= exported[name], (dashboard.uid, panel.title, name, used - exported[name])


def test_the_files_are_dashboards_grafana_imports(tmp_path) -> None:
    result = CliRunner().invoke(app, ["ops", "dashboards", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == sorted(f"{d.uid}.json" for d in DASHBOARDS)
    for dashboard in DASHBOARDS:
        document = json.loads((tmp_path / f"{dashboard.uid}.json").read_text())
        assert document == dashboard_document(dashboard)
        assert [v["name"] for v in document["templating"]["list"]] == ["datasource"]
        ids = [p["id"] for p in document["panels"]]
        assert len(ids) == len(set(ids)) and all(p["targets"] and p["fieldConfig"]["defaults"]["unit"]
                                                 for p in document["panels"])
