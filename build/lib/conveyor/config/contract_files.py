"""The one place a topic's contract file is read (the gateway, the lake, the views and the config
checks all come through here)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from conveyor.errors import ConveyorError

if TYPE_CHECKING:
    from conveyor.config.platform import Platform


class ContractFileError(ConveyorError):
    """A topic has no contract, or its file cannot be read as a JSON object."""

    exit_code = 2


def read_contract(platform: Platform, topic: str) -> dict[str, Any]:
    """The JSON Schema of ``topic``'s contract, as written in its file."""
    spec = platform.topics.get(topic)
    if spec is None or spec.contract is None:
        raise ContractFileError(f"topic {topic} has no contract in platform.yaml")
    path = platform.resolve(spec.contract)
    try:
        schema = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ContractFileError(f"contract of topic {topic} ({path}) cannot be read: {err}") from None
    if not isinstance(schema, dict):
        raise ContractFileError(f"contract of topic {topic} ({path}) is not a JSON object")
    return schema
