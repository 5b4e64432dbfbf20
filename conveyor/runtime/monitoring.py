"""A local Prometheus, Alertmanager and node_exporter (Debian's packages) when ``runtime.prometheus``,
``runtime.alertmanager`` and ``runtime.node_exporter`` ask for them, as a platform team runs its own.

Prometheus scrapes the watcher (the broker health, lag and offset figures the rules read), every
component of ``ops.components`` (a batch job's ``file:`` page through the watcher, which serves it
as node_exporter's textfile collector would), every broker's own metrics page and the local
node_exporter (this machine, the local brokers' host), and evaluates the rules of ``conveyor ops
rules``, every alert of the platform. Alertmanager takes Prometheus's alerts, groups them and
routes them to ``ops.notify_url``; silences hold. All listen on 127.0.0.1 only and
keep their files under the runtime home; Prometheus and Alertmanager get their configuration
written anew by every ``conveyor up`` (a running one is told to reload it).
"""

from __future__ import annotations

import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

import yaml

from conveyor.config import Platform
from conveyor.ops.rules import duration, rules_document
from conveyor.ops.component_pages import served_by_watcher
from conveyor.runtime import node_exporter, processes
from conveyor.runtime.errors import NodeFailedError, RuntimeSetupError, StartTimeoutError
from conveyor.runtime.processes import Daemon
from conveyor.runtime.security import write_private
from conveyor.service import wait_healthy
from conveyor.tls import base_url, trusted_pem

PROMETHEUS = "prometheus"
ALERTMANAGER = "prometheus-alertmanager"
NODE_EXPORTER = "prometheus-node-exporter"
#: The ``instance`` of the local node_exporter's series: the host rules' summaries name it.
LOCAL_HOST = "localhost"


@dataclass(frozen=True)
class Monitor:
    """One of the servers: where it listens and keeps its files."""

    name: ClassVar[str]
    binary: ClassVar[str]
    #: Its answer once it serves.
    ready_path: ClassVar[str] = "/-/ready"
    port: int
    dir: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def marker(self) -> str:
        raise NotImplementedError

    @property
    def daemon(self) -> Daemon:
        return Daemon(self.name, self.dir / "pid", self.dir / f"{self.name}.log", self.marker)

    def argv(self, binary: str) -> list[str]:
        raise NotImplementedError


@dataclass(frozen=True)
class Configured(Monitor):
    """Prometheus or Alertmanager: a configuration file, re-read on SIGHUP."""

    @property
    def config_file(self) -> Path:
        return self.dir / f"{self.name}.yml"

    @property
    def marker(self) -> str:
        return f"--config.file={self.config_file}"

    def argv(self, binary: str) -> list[str]:
        return [binary, f"--config.file={self.config_file}", f"--web.listen-address=127.0.0.1:{self.port}",
                *self.options(), "--log.level=warn"]

    def options(self) -> list[str]:
        raise NotImplementedError

    def document(self, platform: Platform) -> dict[str, Any]:
        """The configuration, with the files it names written beside it."""
        raise NotImplementedError


class Prometheus(Configured):
    name, binary = "prometheus", PROMETHEUS

    def options(self) -> list[str]:
        return [f"--storage.tsdb.path={self.dir / 'data'}"]

    def document(self, platform: Platform) -> dict[str, Any]:
        rules_file = self.dir / "rules.yml"
        rules_file.write_text(yaml.safe_dump(rules_document(platform.ops, platform.relaxed_topics()), sort_keys=False, width=120))
        pem = trusted_pem(platform)
        ca_file = self.dir / "ca.pem" if pem else None
        if ca_file is not None and pem is not None:
            ca_file.write_bytes(pem)
        return prometheus_config(platform, rules_file, ca_file)


class Alertmanager(Configured):
    name, binary = "alertmanager", ALERTMANAGER

    def options(self) -> list[str]:
        # An empty cluster address turns off the gossip between replicas, which listens on all addresses.
        return [f"--storage.path={self.dir / 'data'}", "--cluster.listen-address="]

    def document(self, platform: Platform) -> dict[str, Any]:
        return alertmanager_config(platform)


@dataclass(frozen=True)
class NodeExporter(Monitor):
    """This machine's node_exporter, its filesystem exclusions worked out at its start."""

    name, binary, ready_path = "node-exporter", NODE_EXPORTER, "/metrics"
    #: Folders whose filesystems it must report: the runtime home and ``ops.machines.paths``.
    paths: tuple[Path, ...] = ()

    @property
    def marker(self) -> str:
        # It takes no configuration file: its address stands for it on the command line.
        return f"--web.listen-address=127.0.0.1:{self.port}"

    def argv(self, binary: str) -> list[str]:
        table = node_exporter.mounts()
        watched = [mount for path in self.paths if (mount := node_exporter.mount_of(path, table)) is not None]
        return [binary, *node_exporter.flags(f"127.0.0.1:{self.port}", watched)]


def monitors(platform: Platform) -> list[Monitor]:
    """The servers platform.yaml asks ``conveyor up`` for (none to all three)."""
    runtime, home = platform.runtime, platform.home / "monitoring"
    found: list[Monitor] = []
    if runtime.node_exporter is not None:
        paths = (platform.home, *(platform.resolve(Path(p)) for p in platform.ops.machines.paths))
        found.append(NodeExporter(runtime.node_exporter.port, home / "node-exporter",
                                  tuple(path.resolve() for path in paths)))
    if runtime.prometheus is not None:
        found.append(Prometheus(runtime.prometheus.port, home / "prometheus"))
    if runtime.alertmanager is not None:
        found.append(Alertmanager(runtime.alertmanager.port, home / "alertmanager"))
    return found


def _target(url: str, job: str, labels: dict[str, str], ca_file: Path | None) -> dict[str, Any]:
    parts = urlsplit(url)
    config: dict[str, Any] = {"job_name": job, "scheme": parts.scheme, "metrics_path": parts.path or "/metrics",
                              "static_configs": [{"targets": [parts.netloc], "labels": labels}]}
    if parts.scheme == "https" and ca_file is not None:
        config["tls_config"] = {"ca_file": str(ca_file)}
    return config


def prometheus_config(platform: Platform, rules_file: Path, ca_file: Path | None) -> dict[str, Any]:
    """Prometheus's configuration: its scrape jobs, the rules and where alerts go. Pure."""
    settings = platform.runtime.prometheus
    assert settings is not None
    ops = platform.ops
    watcher = base_url(ops.tls, ops.port)
    jobs = [_target(f"{watcher}/metrics", "conveyor-ops", {"instance": "watcher"}, ca_file)]
    host = None
    if platform.runtime.node_exporter is not None:
        host = f"http://127.0.0.1:{platform.runtime.node_exporter.port}/metrics"
        jobs.append(_target(host, "node-exporter", {"instance": LOCAL_HOST}, None))
    for name, url in ops.components.items():
        if url == host:
            continue  # runtime.node_exporter's page listed as a component too: scraped once, above
        page = f"{watcher}/components/{name}/metrics" if served_by_watcher(url) else url
        # The component's name is its instance: the rules and their summaries name it.
        jobs.append(_target(page, f"component-{name}", {"instance": name}, ca_file))
    for cluster_name, cluster in platform.clusters.items():
        for page in cluster.metrics:
            node = page.node or urlsplit(page.url).netloc
            jobs.append(_target(page.url, f"kafka-{cluster_name}-{node}",
                                {"instance": node, "cluster": cluster_name, "node": node}, ca_file))
    config: dict[str, Any] = {
        "global": {"scrape_interval": duration(settings.interval), "evaluation_interval": duration(settings.interval),
                   "external_labels": {"platform": platform.name}},
        "rule_files": [str(rules_file)],
        "scrape_configs": jobs,
    }
    if platform.runtime.alertmanager is not None:
        config["alerting"] = {"alertmanagers": [
            {"static_configs": [{"targets": [f"127.0.0.1:{platform.runtime.alertmanager.port}"]}]}]}
    return config


def alertmanager_config(platform: Platform) -> dict[str, Any]:
    """Alertmanager's configuration: every alert to ``ops.notify_url`` (resolved ones too), grouped
    per rule and cluster; with no notify_url, to a receiver that sends nothing (alerts still show
    and can be silenced). Pure."""
    settings = platform.runtime.alertmanager
    assert settings is not None
    receiver: dict[str, Any] = {"name": "conveyor"}
    if platform.ops.notify_url is not None:
        receiver["webhook_configs"] = [{"url": platform.ops.notify_url.get_secret_value(), "send_resolved": True}]
    return {
        "route": {"receiver": "conveyor", "group_by": ["alertname", "cluster"],
                  "group_wait": duration(settings.group_wait), "group_interval": duration(settings.group_interval),
                  "repeat_interval": duration(settings.repeat_interval)},
        "receivers": [receiver],
    }


def write_configs(platform: Platform, found: list[Monitor]) -> None:
    """Each server's configuration, owner-only (the receiver's URL may hold a secret)."""
    for monitor in found:
        if not isinstance(monitor, Configured):
            continue
        monitor.dir.mkdir(parents=True, exist_ok=True)
        write_private(monitor.config_file, yaml.safe_dump(monitor.document(platform), sort_keys=False).encode())


def start(platform: Platform) -> list[str]:
    """Write the configurations, start what does not run and have what runs reload; the names
    started. ``platform`` is the resolved one (the brokers' pages, the certificate's authority)."""
    found = monitors(platform)
    write_configs(platform, found)
    started = []
    for monitor in found:
        if not isinstance(monitor, Configured) and processes.running_pid(monitor.daemon) is not None:
            continue  # it runs; its flags change with a restart (SIGHUP would end it)
        if processes.signal_daemon(monitor.daemon, signal.SIGHUP) is not None:
            continue  # it runs, and reloads its configuration on SIGHUP
        binary = shutil.which(monitor.binary)
        if binary is None:
            raise RuntimeSetupError(f"{monitor.binary} is not installed: run `apt-get install -y {monitor.binary}` "
                                    "(make setup does it)")
        processes.start(monitor.daemon, monitor.argv(binary))
        started.append(monitor.name)
    return started


def wait_ready(platform: Platform, deadline: float) -> None:
    """Wait until each server answers (Prometheus and Alertmanager /-/ready, node_exporter /metrics)."""
    for monitor in monitors(platform):
        alive = lambda m=monitor: processes.running_pid(m.daemon) is not None  # noqa: E731
        if wait_healthy(f"{monitor.url}{monitor.ready_path}", max(0.0, deadline - time.monotonic()), alive):
            continue
        if not alive():
            raise NodeFailedError(f"{monitor.name} exited while starting:\n{processes.log_tail(monitor.daemon)}")
        raise StartTimeoutError(f"{monitor.name} did not answer on {monitor.url}; see {monitor.daemon.console_log}")


def stop(platform: Platform, timeout: float = 30.0) -> list[str]:
    return processes.stop([m.daemon for m in monitors(platform)], timeout)
