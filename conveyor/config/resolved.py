"""The resolved view: what `conveyor up` started, in platform.yaml's own terms.

A cluster that platform.yaml gives no ``bootstrap`` is one `conveyor up` starts on this machine.
Once it runs, up writes ``<runtime.home>/resolved.yaml`` with what a real deployment writes in
platform.yaml for an existing cluster (its bootstrap, client settings, each part's credentials, the
SCRAM users to keep, its nodes' metrics pages and data disks), the views' Redis, and the edges'
certificate with its authority. The CLI loads platform.yaml with this view laid over it, so code
below the CLI reads one model and never asks the local runtime where things are. What
platform.yaml itself says wins over a view written before it changed.
"""

from __future__ import annotations

import os
from enum import Enum
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, SecretStr, ValidationError

from conveyor.config.clusters import MetricsPage, Part
from conveyor.config.loading import load_platform
from conveyor.config.platform import Platform
from conveyor.config.problems import ConfigError, Problem
from conveyor.config.tls import Tls
from conveyor.config.units import Model, Name, Secret

RESOLVED_VIEW_FILE = "resolved.yaml"
_HEADER = ("# Written by `conveyor up`: what it started, in platform.yaml's terms. Secrets are in clear:\n"
           "# the file is its owner's only. `conveyor down` removes it.\n")


class ResolvedCluster(Model):
    """A started cluster: the settings of the same names under platform.yaml's ``clusters:``."""

    bootstrap: str = Field(min_length=1)
    client: dict[str, Secret] = Field(default_factory=dict)
    credentials: dict[Part, dict[str, Secret]] = Field(default_factory=dict)
    users: dict[str, Secret] = Field(default_factory=dict)
    metrics: list[MetricsPage] = Field(default_factory=list)
    disks: dict[int, str] = Field(default_factory=dict)


class ResolvedCatalog(Model):
    """The lake's JDBC catalog database up started: ``pipeline.catalog``'s settings of the same names."""

    uri: str = Field(min_length=1)
    options: dict[str, Secret] = Field(default_factory=dict)


class ResolvedView(Model):
    clusters: dict[Name, ResolvedCluster] = Field(default_factory=dict)
    #: The views' Redis (``pipeline.realtime.redis``), and as its read-only user sees it
    #: (``redis_reader``); each URL carries its user's password.
    redis: Secret | None = None
    redis_reader: Secret | None = None
    #: The edges' certificate and its authority (platform.yaml's top-level ``tls:``).
    tls: Tls | None = None
    #: The database of a jdbc catalog that names none (``pipeline.catalog``).
    catalog: ResolvedCatalog | None = None
    #: The local Alertmanager's base URL (``ops.alertmanager_url``).
    alertmanager: str | None = None


def resolved_view_file(platform: Platform) -> Path:
    return platform.home / RESOLVED_VIEW_FILE


def read_resolved_view(platform: Platform) -> ResolvedView | None:
    """The view `conveyor up` wrote for ``platform``; None before it ran (or after `conveyor down`)."""
    path = resolved_view_file(platform)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        return ResolvedView.model_validate(data or {})
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, yaml.YAMLError, ValidationError) as err:
        reason = f"{type(err).__name__}: {str(err).splitlines()[0]}"
        raise ConfigError([Problem("", f"is not a view `conveyor up` wrote ({reason}): run `conveyor up` "
                                       "again to write it anew")], path) from None


def write_resolved_view(platform: Platform, view: ResolvedView) -> Path:
    """Write the view readable by its owner only, in one step: a reader never sees half a file."""
    path = resolved_view_file(platform)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = _HEADER + yaml.safe_dump(_plain(view.model_dump(exclude_defaults=True)), sort_keys=False)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(text)
    partial.replace(path)
    return path


def with_resolved_view(platform: Platform, view: ResolvedView) -> Platform:
    """``platform`` with ``view`` laid over it: each started cluster's settings, and the Redis, the
    certificate, the catalog's database and the Alertmanager where platform.yaml names none. The
    view's values were validated as it was read."""
    clusters = dict(platform.clusters)
    for name, started in view.clusters.items():
        cluster = clusters.get(name)
        if cluster is not None and cluster.bootstrap is None:
            clusters[name] = cluster.model_copy(update=dict(started))
    update: dict[str, Any] = {"clusters": clusters}
    if platform.tls is None and view.tls is not None:
        update["tls"] = view.tls
    pipeline: dict[str, Any] = {}
    realtime, catalog = platform.pipeline.realtime, platform.pipeline.catalog
    if realtime.redis is None and view.redis is not None:
        pipeline["realtime"] = realtime.model_copy(update={"redis": view.redis, "redis_reader": view.redis_reader})
    if catalog.type == "jdbc" and catalog.uri is None and view.catalog is not None:
        pipeline["catalog"] = catalog.model_copy(
            update={"uri": view.catalog.uri, "options": {**view.catalog.options, **catalog.options}})
    if pipeline:
        update["pipeline"] = platform.pipeline.model_copy(update=pipeline)
    if platform.ops.alertmanager_url is None and view.alertmanager is not None:
        update["ops"] = platform.ops.model_copy(update={"alertmanager_url": view.alertmanager})
    return platform.model_copy(update=update)


def resolved(platform: Platform) -> Platform:
    """``platform`` with the view `conveyor up` wrote in its home laid over it, when there is one."""
    view = read_resolved_view(platform)
    return platform if view is None else with_resolved_view(platform, view)


def load_resolved_platform(path: str | Path) -> Platform:
    """platform.yaml with the view of `conveyor up` laid over it, when up has written one."""
    return resolved(load_platform(path))


def _plain(value: Any) -> Any:
    """A model dump as YAML takes it: secrets revealed, enums as their values."""
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
