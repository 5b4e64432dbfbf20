"""The gateway's OpenAPI document: one path per topic that takes events, its request body the
topic's contract, and every refusal's status with the error body it carries.

FastAPI would describe ``/v1/topics/{topic}/events`` with an opaque body, since the route reads
raw bytes (so that it can refuse before parsing). Client generators and API consoles need the
contract itself; OpenAPI 3.1 schemas are JSON Schema 2020-12, the contracts' own draft, so each
contract is placed as written under ``components/schemas`` with its local references re-rooted.
"""

from __future__ import annotations

from typing import Any

from conveyor.auth import AccessDenied
from conveyor.errors import Refusal
from conveyor.gateway import errors

_ACCEPTED = {
    "type": "object",
    "required": ["accepted"],
    "properties": {
        "accepted": {"type": "integer", "description": "Events written; all of the request or none."},
        "events": {"type": "array", "description": "Per event, where it landed (up to gateway.summary_above).",
                   "items": {"type": "object", "properties": {"cluster": {"type": "string"},
                                                              "partition": {"type": "integer"},
                                                              "offset": {"type": "integer"}}}},
        "partitions": {"type": "array", "description": "Per partition, the offsets written (larger requests).",
                       "items": {"type": "object", "properties": {
                           "cluster": {"type": "string"}, "partition": {"type": "integer"},
                           "first_offset": {"type": "integer"}, "last_offset": {"type": "integer"},
                           "count": {"type": "integer"}}}},
    },
}


def _refusals() -> list[type[Refusal]]:
    """Every refusal the publish path can answer with (authorization's and the gateway's own)."""
    found, todo = [], [AccessDenied, errors.Rejection]
    while todo:
        kind = todo.pop()
        todo.extend(kind.__subclasses__())
        if "status" in vars(kind):
            found.append(kind)
    return sorted(found, key=lambda k: (k.status, k.reason))


def _error_body(reasons: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["error", "message"],
        "properties": {
            "error": {"enum": reasons, "description": "What was refused; clients branch on this."},
            "message": {"type": "string", "description": "What is wrong and what to do, for people."},
            "index": {"type": "integer", "description": "The event refused, in a batch (contract)."},
            "field": {"type": "string", "description": "The field the contract refused it for."},
            "rule": {"type": "string", "description": "The contract's rule (required, minLength...)."},
        },
        "additionalProperties": True,
    }


def _rerooted(schema: Any, root: str) -> Any:
    """``schema`` with its local references (``#/$defs/x``) pointing into ``root`` instead."""
    if isinstance(schema, dict):
        return {k: (root + v[1:] if k == "$ref" and isinstance(v, str) and v.startswith("#") else _rerooted(v, root))
                for k, v in schema.items() if k not in ("$schema", "$id")}
    if isinstance(schema, list):
        return [_rerooted(item, root) for item in schema]
    return schema


def topic_paths(document: dict[str, Any], contracts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``document`` (FastAPI's) with the generic publish path replaced by one per topic."""
    paths = dict(document.get("paths", {}))
    paths.pop("/v1/topics/{topic}/events", None)
    components = document.setdefault("components", {}).setdefault("schemas", {})
    refusals = _refusals()
    components["Accepted"] = _ACCEPTED
    components["Refusal"] = _error_body([k.reason for k in refusals])
    statuses: dict[int, list[str]] = {}
    for kind in refusals:
        statuses.setdefault(kind.status, []).append(kind.reason)
    refused = {str(status): {"description": "refused: " + ", ".join(reasons) + "; nothing was written",
                             "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Refusal"}}}}
               for status, reasons in sorted(statuses.items())}
    for topic, contract in sorted(contracts.items()):
        name = f"{topic}.event"
        components[name] = _rerooted(contract, f"#/components/schemas/{name}")
        event = {"$ref": f"#/components/schemas/{name}"}
        paths[f"/v1/topics/{topic}/events"] = {"post": {
            "summary": f"Publish events to {topic}",
            "description": "One event, a JSON array of events, or NDJSON (one event per line). Every event is "
                           "checked against the topic's contract before any is written: all land or none.",
            "operationId": f"publish_{topic}",
            "security": [{"bearer": []}],
            "requestBody": {"required": True, "content": {
                "application/json": {"schema": {"oneOf": [event, {"type": "array", "items": event}]}},
                "application/x-ndjson": {"schema": event},
            }},
            "responses": {"200": {"description": "every event written",
                                  "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Accepted"}}}},
                          **refused},
        }}
    document["paths"] = paths
    document["components"].setdefault("securitySchemes", {})["bearer"] = {
        "type": "http", "scheme": "bearer", "description": "The service's token (platform.yaml services)."}
    return document
