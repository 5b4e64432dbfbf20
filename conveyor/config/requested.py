"""requested-topics.yaml: the topics services asked for through the bus, beside platform.yaml.

It holds ``topics:`` in platform.yaml's own form (each with ``requested_by``), so that
`conveyor topics plan` and `apply`, the ACLs and the routes read them as they read declared ones,
and a GitOps repository sees every request as a change to a file. Only the bus writes it
(conveyor.bus.registrar), whole or not at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import Field, ValidationError

from conveyor.config.problems import ConfigError, Problem
from conveyor.config.topics import Topic
from conveyor.config.units import TOPIC_NAME, Model
from conveyor.files import replace_atomically

REQUESTED_FILE = "requested-topics.yaml"
#: Where the contracts of requested topics go, relative to platform.yaml's folder.
REQUESTED_CONTRACTS = "contracts/requested"
_HEADER = ("# Topics requested through the bus (POST /v1/topics, `conveyor topics request`); written by\n"
           "# Conveyor. `conveyor topics plan` and `apply` read it beside platform.yaml.\n")


class RequestedTopics(Model):
    topics: dict[Annotated[str, Field(pattern=TOPIC_NAME)], Topic] = Field(default_factory=dict)


def requested_path(root: Path) -> Path:
    return root / REQUESTED_FILE


def read_requested(root: Path) -> dict[str, Topic]:
    """The requested topics of the platform whose file is in ``root``; none when there is no file."""
    path = requested_path(root)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise ConfigError([Problem("", f"cannot be read: {err}")], path) from None
    try:
        topics = RequestedTopics.model_validate(data or {}).topics
    except ValidationError as err:
        raise ConfigError([Problem(".".join(map(str, e["loc"])), e["msg"]) for e in err.errors()], path) from None
    unsigned = sorted(name for name, topic in topics.items() if topic.requested_by is None)
    if unsigned:
        raise ConfigError([Problem(f"topics.{name}.requested_by", "is required in this file") for name in unsigned],
                          path)
    return topics


def write_requested(root: Path, topics: dict[str, Topic]) -> None:
    data: dict[str, Any] = {"topics": {name: topic.model_dump(mode="json", exclude_defaults=True)
                                       for name, topic in sorted(topics.items())}}
    replace_atomically(requested_path(root), (_HEADER + yaml.safe_dump(data, sort_keys=False)).encode())


@dataclass
class RequestedWatch:
    """Re-reads requested-topics.yaml when it changed: for the services that pick up requests live."""

    root: Path
    _seen: tuple[int, int, int] | None = None

    def changed(self) -> dict[str, Topic] | None:
        """The requested topics when the file changed since the last call, else None. The first call
        always reads: the platform a service loaded at its start may predate the file it sees now."""
        try:
            stat = requested_path(self.root).stat()
            seen = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        except FileNotFoundError:
            seen = (0, 0, 0)
        if seen == self._seen:
            return None
        topics = read_requested(self.root)
        self._seen = seen
        return topics
