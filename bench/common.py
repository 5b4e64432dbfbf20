"""What every benchmark shares: where its figures go, and the host they were measured on."""

from __future__ import annotations

import argparse
import json
import os
import platform
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

_CLK_TCK = os.sysconf("SC_CLK_TCK")
#: Where the figures go: bench/results, or CONVEYOR_BENCH_RESULTS (the smoke tests' own folder).
RESULTS = Path(os.environ.get("CONVEYOR_BENCH_RESULTS") or Path(__file__).resolve().parent / "results")
DEMO_PLATFORM = Path(__file__).resolve().parent.parent / "platform.yaml"


def arguments(doc: str, base_port: int) -> argparse.ArgumentParser:
    """A benchmark's command line: its module's docstring as the help, and the first port of the
    platform it starts (each benchmark has its own, so that two never collide)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-port", type=int, default=base_port, help="first port of the platform this run starts")
    return parser


def provision(platform: Any) -> None:
    """What `conveyor topics apply` does: every declared topic, then, on secured clusters, the
    users and ACLs (a bench's lake or view topic needs its part's grants on a secured central)."""
    from conveyor.acls import provisioner as acls
    from conveyor.topics import provisioner

    provisioner.apply(platform, provisioner.plan(platform))
    acls.apply_secured(platform)


def host() -> dict[str, Any]:
    """The machine a figure was measured on, and how busy it was."""
    return {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "load_average_1m": round(os.getloadavg()[0], 2)}


def write_results(name: str, document: Mapping[str, Any], show: bool = False) -> Path:
    """Write a benchmark's figures to ``bench/results/<name>.json`` (and, with ``show``, to stdout);
    that path."""
    text = json.dumps(document, indent=2)
    path = RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    if show:
        print(text)
    return path


def without_monitoring(data: dict[str, Any]) -> dict[str, Any]:
    """A platform file's ``data`` without the demo's Prometheus, Alertmanager and node_exporter: a
    bench runs a platform of its own on ports of its own (theirs are fixed, and would clash with a
    demo's or another bench's), and its measurements share the cores with no scraper."""
    for monitor in ("prometheus", "alertmanager", "node_exporter"):
        data["runtime"].pop(monitor, None)
    return data


def demo_data() -> dict[str, Any]:
    """platform.yaml's content, without its monitoring (:func:`without_monitoring`)."""
    return without_monitoring(yaml.safe_load(DEMO_PLATFORM.read_text()))


def in_clear(data: dict[str, Any]) -> dict[str, Any]:
    """platform.yaml's ``data`` with every local cluster in plaintext and every edge without TLS:
    a bench that sets Conveyor beside a peer runs both over the same plain connections
    (bench.security_cost measures what securing the demo's way costs)."""
    for cluster in data["clusters"].values():
        cluster.pop("security", None)
    for edge in ("gateway", "dispatch", "ops"):
        (data.get(edge) or {}).pop("tls", None)
    return data


def routes_platform(folder: Path, base_port: int, routes: dict[str, Any]) -> tuple[Any, Path]:
    """The demo platform in clear with only ``routes``, its home in ``folder`` and its ports from
    ``base_port``, written to ``folder``/platform.yaml: (the model, the file) for a replicator bench."""
    from conveyor.config import parse_platform

    data = in_clear(demo_data())
    data["runtime"] |= {"home": str(folder / "home"), "base_port": base_port}
    data["routes"] = routes
    for topic in data["topics"].values():  # the file is written elsewhere: keep contracts found
        if "contract" in topic:
            topic["contract"] = str(DEMO_PLATFORM.parent / topic["contract"])
    path = folder / "platform.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return parse_platform(data, root=DEMO_PLATFORM.parent), path


@dataclass(frozen=True)
class Round:
    """One run of one path of a bench over its whole input; a sink that commits on its own
    (bench.iceberg_sink) also says when it first committed and how many commits it made."""
    seconds: float
    cpu_seconds: float
    #: From the sink's start to its first commit a reader sees: its fixed cost per start.
    first_commit_seconds: float | None = None
    commits: int | None = None

    def figures(self) -> dict[str, float]:
        return {k: round(v, 2) for k, v in asdict(self).items() if v is not None}


def tree_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of a process and of every live descendant, each with the children it has waited
    for (utime, stime, cutime, cstime of /proc/<pid>/stat), by pid, from one pass over /proc."""
    children: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # ended meanwhile
                continue
            children.setdefault(int(fields[1]), []).append(int(entry.name))
            cpu[int(entry.name)] = sum(int(v) for v in fields[11:15]) / _CLK_TCK
    tree, todo = {}, [pid]
    while todo:
        current = todo.pop()
        tree[current] = cpu.get(current, 0.0)
        todo += children.get(current, [])
    return tree


def cpu_since(before: dict[int, float], pid: int) -> float:
    """CPU seconds ``pid``'s process tree spent since ``before`` (:func:`tree_cpu`): what each
    live process added, all of a new one's. A process that ended meanwhile adds nothing: Spark's
    Python daemon ignores SIGCHLD, so an idle worker it stops leaves no trace in any parent's
    times, and a sum over the tree would lose its whole history, not only what it did since."""
    return sum(seconds - before.get(p, 0.0) for p, seconds in tree_cpu(pid).items())
