"""The platforms the benches start: on their own ports only, so that two benches (the smoke tests'
two workers) or a bench beside a running demo never bind the same port."""

from __future__ import annotations

from pathlib import Path

import yaml

from bench.common import DEMO_PLATFORM, demo_data
from bench.dispatch_throughput import _with_topics

#: The runtime's servers on fixed ports of their own, not on ports from ``runtime.base_port``.
FIXED_PORTS = ("prometheus", "alertmanager", "node_exporter")


def test_the_demo_file_has_servers_on_fixed_ports_which_a_bench_platform_leaves_out():
    demo = yaml.safe_load(DEMO_PLATFORM.read_text())["runtime"]
    assert set(FIXED_PORTS) <= set(demo), "the demo no longer runs them: this test checks nothing"
    assert not set(FIXED_PORTS) & set(demo_data()["runtime"])


def test_the_dispatcher_bench_platform_of_its_own_leaves_them_out(tmp_path: Path):
    path = _with_topics(DEMO_PLATFORM, tmp_path, 20_000, ["bench-t"])
    runtime = yaml.safe_load(path.read_text())["runtime"]
    assert runtime["base_port"] == 20_000 and not set(FIXED_PORTS) & set(runtime)
