"""The contract registry through the gateways, against real brokers: Confluent's own Schema Registry
client lists subjects, reads versions, checks compatibility and registers a version through one
gateway; the other gateway enforces the new version within 10 s and writes the version it checked
in each record's header; an incompatible version is refused with 409 and changes no cluster and no
registry record."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import orjson
import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from conveyor import kafka
from conveyor.bus.registry_state import canonical
from conveyor_sdk.contract import CONTRACT_HEADER
from conveyor.config import Platform
from conveyor.topics import provisioner
from tests.conftest import base_port, demo_event, eventually, platform_variant, read_topic, without_registry_topic

pytestmark = pytest.mark.integration

#: The two gateways of the test listen on base_port + these.
GATEWAY_PORTS = (670, 671)
ADSERVER = {"Authorization": "Bearer demo-adserver-token"}

#: A closed contract: an optional field added is a BACKWARD-compatible version (docs/contracts.md).
V1 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "x-key": "user_id",
    "additionalProperties": False,
    "required": ["event_id", "event_time", "user_id"],
    "properties": {"event_id": {"type": "string", "format": "uuid"},
                   "event_time": {"type": "string", "format": "date-time"},
                   "user_id": {"type": "string", "maxLength": 64}, "site_id": {"type": "string"}},
}
V2 = {**V1, "properties": {**V1["properties"], "country": {"type": "string", "maxLength": 2}}}
#: site_id from string to integer: refused under BACKWARD.
INCOMPATIBLE = {**V2, "properties": {**V2["properties"], "site_id": {"type": "integer"}}}


@pytest.fixture
def registry_case(provisioned: Platform, platform_data, platform_file: Path, tmp_path: Path) -> tuple[Platform, str]:
    """The session's platform with a topic of the test's own (on every cluster, adserver its
    producer, the lake its reader), whose contract file is V1."""
    topic = f"test-contract-{uuid.uuid4().hex[:8]}"
    data = copy.deepcopy(platform_data)
    for spec in data["topics"].values():
        if spec.get("contract"):
            spec["contract"] = str(platform_file.parent / spec["contract"])
    contract = tmp_path / f"{topic}.schema.json"
    contract.write_text(json.dumps(V1))
    data["topics"][topic] = {"partitions": 2, "contract": str(contract), "producers": ["adserver"], "consumers": ["lake"]}
    platform = platform_variant(data, tmp_path / "platform.yaml")
    provisioner.apply(platform, provisioner.plan(platform))
    return platform, topic


def registry_end(platform: Platform) -> int:
    consumer = kafka.consumer(platform, platform.registry_cluster, "registry-peek", "registry-peek")
    try:
        return consumer.get_watermark_offsets(TopicPartition(platform.contracts.topic, 0), timeout=10)[1]
    finally:
        consumer.close()


def event_with(**fields) -> dict:
    event = demo_event()
    return {"event_id": event["event_id"], "event_time": event["event_time"], "user_id": "u-1", **fields}


def test_confluent_s_client_reads_checks_and_registers_and_every_gateway_enforces_the_new_version(
        registry_case, serve_gateway, tmp_path):
    platform, topic = registry_case
    subject = f"{topic}-value"
    first, second = (serve_gateway(platform, dc, port=base_port() + port)
                     for dc, port in zip(("dc1", "dc2"), GATEWAY_PORTS, strict=True))
    # The token as HTTP Basic's password, as the client's basic.auth.user.info sends it.
    client = SchemaRegistryClient({"url": first, "basic.auth.user.info": "adserver:demo-adserver-token"})

    # The contract file is version 1, registered by the first gateway to start.
    assert subject in client.get_subjects()
    assert client.get_versions(subject) == [1]
    latest = client.get_latest_version(subject)
    assert (latest.version, json.loads(latest.schema.schema_str)) == (1, V1)
    assert client.get_schema(latest.schema_id).schema_str == canonical(V1)
    assert client.get_compatibility(subject) == "BACKWARD"

    # Before version 2, a country is a field the closed contract refuses, at both gateways.
    with_country = event_with(country="NL")
    for url in (first, second):
        refused = httpx.post(f"{url}/v1/topics/{topic}/events", json=with_country, headers=ADSERVER, timeout=30)
        assert refused.status_code == 422, refused.text

    assert client.test_compatibility(subject, Schema(json.dumps(V2), "JSON")) is True
    assert client.test_compatibility(subject, Schema(json.dumps(INCOMPATIBLE), "JSON")) is False
    schema_id = client.register_schema(subject, Schema(json.dumps(V2), "JSON"))
    assert client.get_versions(subject) == [1, 2] and schema_id != latest.schema_id
    # The same schema again is the version it already is.
    assert client.register_schema(subject, Schema(json.dumps(V2), "JSON")) == schema_id

    # The other gateway enforces version 2 within 10 s, and says so in each record's header.
    started = time.monotonic()

    def taken() -> httpx.Response | None:
        answer = httpx.post(f"{second}/v1/topics/{topic}/events", json=with_country, headers=ADSERVER, timeout=30)
        return answer if answer.status_code == 200 else None

    answer = eventually(taken, 10, "the second gateway to take the new version")
    assert time.monotonic() - started < 10
    (placed,) = answer.json()["events"]
    [record] = [m for m in read_topic(platform, "dc2", topic)
                if (m.partition(), m.offset()) == (placed["partition"], placed["offset"])]
    assert orjson.loads(record.value()) == with_country
    assert dict(record.headers() or []) == {CONTRACT_HEADER: f"{schema_id}:2".encode()}

    # An incompatible version: 409 naming the rule and the field, and nothing written anywhere.
    before, ends = registry_end(platform), {c: provisioner_ends(platform, c, topic) for c in ("dc1", "dc2")}
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(subject, Schema(json.dumps(INCOMPATIBLE), "JSON"))
    assert refused.value.http_status_code == 409
    direct = httpx.post(f"{second}/v1/topics/{topic}/contract", json=INCOMPATIBLE, headers=ADSERVER, timeout=30)
    assert direct.status_code == 409, direct.text
    body = direct.json()
    assert body["rule"] == "BACKWARD"
    assert [(i["field"], i["old"], i["new"], i["sink"] is not None) for i in body["incompatibilities"]] == [
        ("site_id", "string", "integer", False), ("site_id", "string", "bigint", True)]

    # Under the rule NONE, the lake still cannot take a column's type changed.
    client.set_compatibility(subject, "NONE")
    assert client.get_compatibility(subject) == "NONE"
    assert client.test_compatibility(subject, Schema(json.dumps(INCOMPATIBLE), "JSON")) is False
    direct = httpx.post(f"{first}/v1/topics/{topic}/contract", json=INCOMPATIBLE, headers=ADSERVER, timeout=30)
    assert direct.status_code == 409, direct.text
    assert direct.json()["message"].startswith(f"{subject}: a sink cannot take the new version: site_id: lake column "
                                               "type changed (was 'string', now 'bigint')")
    assert registry_end(platform) == before + 1  # the rule's record alone
    assert {c: provisioner_ends(platform, c, topic) for c in ("dc1", "dc2")} == ends
    assert client.get_versions(subject) == [1, 2]

    # The command line: the versions as any gateway serves them; a dry run of the breaking version
    # fails in one line naming the field.
    def conveyor(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "conveyor", "topics", "contract", topic, "--gateway", second,
                               "--token", "demo-adserver-token", "--platform", str(tmp_path / "platform.yaml"),
                               "-o", "json", *args], capture_output=True, text=True, timeout=120)

    listed = conveyor()
    assert listed.returncode == 0, listed.stderr
    assert [(v["version"], v["fields"]) for v in json.loads(listed.stdout)["versions"]] == [
        (1, "event_id, event_time, site_id, user_id"), (2, "country, event_id, event_time, site_id, user_id")]
    breaking = tmp_path / "breaking.schema.json"
    breaking.write_text(json.dumps(INCOMPATIBLE))
    refused_here = conveyor("--schema", str(breaking), "--dry-run")
    assert refused_here.returncode == 1 and "(409)" in refused_here.stderr and "site_id" in refused_here.stderr


def test_reading_takes_a_token_and_registering_takes_the_topic_s_producer(registry_case, serve_gateway):
    platform, topic = registry_case
    url = serve_gateway(platform, "dc1", port=base_port() + GATEWAY_PORTS[0])
    assert httpx.get(f"{url}/subjects", timeout=30).status_code == 401
    mailer = {"Authorization": "Bearer demo-mailer-token"}
    assert httpx.get(f"{url}/subjects", headers=mailer, timeout=30).status_code == 200
    registered = httpx.post(f"{url}/subjects/{topic}-value/versions", headers=mailer, timeout=30,
                            json={"schema": json.dumps(V2), "schemaType": "JSON"})
    assert registered.status_code == 403 and registered.json()["error_code"] == 40301, registered.text
    unknown = httpx.get(f"{url}/subjects/no-such-topic-value/versions", headers=mailer, timeout=30)
    assert unknown.status_code == 404 and unknown.json()["error_code"] == 40401
    not_a_contract = httpx.post(f"{url}/v1/topics/{topic}/contract", headers=ADSERVER, timeout=30,
                                json={**V2, "required": ["user_id"]})  # event_id and event_time are required
    assert not_a_contract.status_code == 422 and not_a_contract.json()["error"] == "invalid_contract"


def provisioner_ends(platform: Platform, cluster: str, topic: str) -> dict[int, int]:
    consumer = kafka.consumer(platform, cluster, "offsets-peek", "offsets-peek")
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in (0, 1)}
    finally:
        consumer.close()


def test_a_gateway_serves_by_the_contract_files_until_the_registry_s_topic_exists(provisioned, platform_data,
                                                                                 platform_file, tmp_path, serve_gateway):
    platform = without_registry_topic(platform_data, platform_file, tmp_path / "platform.yaml")
    url = serve_gateway(platform, "dc1", port=base_port() + GATEWAY_PORTS[0])
    accepted = httpx.post(f"{url}/v1/topics/ad-events/events", json=demo_event(), headers=ADSERVER, timeout=30)
    assert accepted.status_code == 200, accepted.text
    assert httpx.get(f"{url}/subjects", headers=ADSERVER, timeout=30).json() == []
    registering = httpx.post(f"{url}/v1/topics/ad-events/contract", headers=ADSERVER, timeout=30, json=V1)
    assert registering.status_code == 503 and "topics apply" in registering.json()["message"], registering.text
