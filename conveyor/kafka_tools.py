"""Kafka's own command-line tools, run from the resolved jars: reassignment, client quotas and
share groups' state.

confluent-kafka 2.16's AdminClient has no partition reassignment, no client-quota calls and no
share-group calls (no ``list_share_group_offsets``, no share-group describe), so these run the same
classes operators know as ``kafka-reassign-partitions``, ``kafka-configs`` and
``kafka-share-groups``: ``java -cp <classpath> <class> ...``. Each call is one short-lived JVM
(about 2 s on a busy two-core machine), so callers batch work into few calls. Output is parsed line
by line from the tools' documented messages; a non-zero exit raises :class:`KafkaToolError` with the
tool's last lines.

A cluster's security settings (its ``client`` settings, or a secured local cluster's) are handed
to the tools as a ``--command-config`` file, mapped to the Java client's names by
:mod:`conveyor.java_client`, which refuses what it cannot map.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from conveyor import kafka
from conveyor.config import Platform
from conveyor.errors import ConveyorError
from conveyor.jars import Jars, java_binary, resolve_jars
from conveyor.java_client import JavaClientSettingError, java_settings, properties_text

REASSIGN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
CONFIGS = "kafka.admin.ConfigCommand"
CLUSTER_TOOL = "org.apache.kafka.tools.ClusterTool"
SHARE_GROUPS = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
#: A small heap and the client compiler only: these JVMs live for a second or two.
_JVM_FLAGS = ("-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Djava.awt.headless=true")
_VERIFY_LINE = re.compile(r"^Reassignment of partition (?P<tp>\S+) is (?P<state>completed|still in progress)")
_PRODUCER_RATE = re.compile(r"\bproducer_byte_rate=(?P<rate>[0-9.]+)")
_QUOTA_LINE = re.compile(r"^Quota configs for client-id '(?P<client>[^']*)' are (?P<configs>.*)$")

Assignment = Mapping[tuple[str, int], tuple[int, ...]]


class KafkaToolError(ConveyorError):
    """A Kafka tool exited with an error; ``tool`` is its class, ``output`` its last lines."""

    def __init__(self, tool: str, returncode: int, output: str) -> None:
        self.tool, self.returncode, self.output = tool, returncode, output
        super().__init__(f"{tool.rsplit('.', 1)[-1]} failed (exit {returncode}):\n{output}")


class ToolSettingsError(ConveyorError):
    """A cluster's client settings have no equivalent the Java tools take."""


@dataclass(frozen=True)
class VerifyResult:
    """What ``--verify`` reported per partition. Throttles are cleared only once all completed."""

    completed: frozenset[tuple[str, int]]
    in_progress: frozenset[tuple[str, int]]

    @property
    def done(self) -> bool:
        return not self.in_progress


def reassignment_json(assignment: Assignment) -> str:
    """Kafka's reassignment file for ``assignment`` (the first replica is the preferred leader)."""
    partitions = [{"topic": t, "partition": p, "replicas": list(r), "log_dirs": ["any"] * len(r)}
                  for (t, p), r in sorted(assignment.items())]
    return json.dumps({"version": 1, "partitions": partitions})


def parse_assignment(text: str) -> dict[tuple[str, int], tuple[int, ...]]:
    """The inverse of :func:`reassignment_json` (also reads the tools' own output)."""
    return {(p["topic"], int(p["partition"])): tuple(int(b) for b in p["replicas"])
            for p in json.loads(text)["partitions"]}


def _split_partition(name: str) -> tuple[str, int]:
    topic, _, number = name.rpartition("-")
    return topic, int(number)


def parse_verify(output: str) -> VerifyResult:
    completed, pending = set(), set()
    for line in output.splitlines():
        match = _VERIFY_LINE.match(line.strip())
        if match:
            (completed if match["state"] == "completed" else pending).add(_split_partition(match["tp"]))
    return VerifyResult(frozenset(completed), frozenset(pending))


def parse_quotas(output: str) -> dict[str, dict[str, float]]:
    """``Quota configs for client-id 'c' are consumer_byte_rate=1048576.0`` -> {c: {...}}."""
    quotas: dict[str, dict[str, float]] = {}
    for line in output.splitlines():
        match = _QUOTA_LINE.match(line.strip())
        if match:
            pairs = (item.split("=", 1) for item in match["configs"].split(",") if "=" in item)
            quotas[match["client"]] = {key.strip(): float(value) for key, value in pairs}
    return quotas


@dataclass(frozen=True)
class ShareOffsets:
    """A share partition's persisted state as the group coordinator summarises it."""

    #: The share-partition start offset (SPSO) as last written to the share-group state.
    start: int
    #: Records neither acknowledged nor archived (KIP-1226); None when the broker gives none.
    lag: int | None


def parse_share_offsets(output: str, group: str) -> dict[tuple[str, int], ShareOffsets]:
    """``kafka-share-groups --describe --offsets`` rows of ``group`` -> {(topic, partition): offsets}.
    A partition whose state is not initialised yet shows ``-`` and is left out."""
    offsets: dict[tuple[str, int], ShareOffsets] = {}
    for line in output.splitlines():
        fields = line.split()
        # GROUP TOPIC PARTITION START-OFFSET LAG (the group's name has no spaces)
        if len(fields) >= 4 and fields[0] == group and fields[2].isdigit() and fields[3].isdigit():
            lag = int(fields[4]) if len(fields) > 4 and fields[4].isdigit() else None
            offsets[(fields[1], int(fields[2]))] = ShareOffsets(int(fields[3]), lag)
    return offsets


def command_config(settings: Mapping[str, str]) -> dict[str, str]:
    """Java client properties for a cluster's librdkafka settings, without its address (the tools
    take ``--bootstrap-server``)."""
    try:
        props = java_settings({k: v for k, v in settings.items() if k != "bootstrap.servers"})
    except JavaClientSettingError as err:
        raise ToolSettingsError(f"Kafka's tools cannot reach this cluster: {err}") from None
    return props


class KafkaTools:
    """Kafka's tools against one cluster. Constructing it does no I/O."""

    def __init__(self, platform: Platform, cluster: str, jars: Jars | None = None, timeout: float = 300.0) -> None:
        self.platform, self.cluster, self.timeout = platform, cluster, timeout
        self.bootstrap = platform.bootstrap(cluster)
        self._jars = jars

    @property
    def jars(self) -> Jars:
        if self._jars is None:
            self._jars = resolve_jars()
        return self._jars

    def run(self, tool: str, args: Iterable[str], command: str | None = None) -> str:
        """Run ``tool`` (its sub-``command``, for tools that have them) with ``args`` against the
        cluster; its standard output."""
        argv = [java_binary(), *_JVM_FLAGS, "-cp", self.jars.classpath, tool, *([command] if command else []),
                "--bootstrap-server", self.bootstrap]
        with tempfile.TemporaryDirectory(prefix="conveyor-tool-") as tmp:
            props = command_config(kafka.client_config(self.platform, self.cluster))
            if props:
                path = Path(tmp) / "client.properties"
                path.write_text(properties_text(props))
                argv += ["--command-config", str(path)]
            try:
                result = subprocess.run([*argv, *args], capture_output=True, text=True, timeout=self.timeout)
            except subprocess.TimeoutExpired:
                raise KafkaToolError(tool, -1, f"no answer within {self.timeout:.0f} s") from None
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-12:])
            raise KafkaToolError(tool, result.returncode, tail)
        return result.stdout

    def _with_file(self, tool: str, content: str, args: list[str]) -> str:
        """Run ``tool`` with ``content`` in a temporary file whose path replaces ``{file}`` in ``args``."""
        with tempfile.NamedTemporaryFile("w", prefix="conveyor-", suffix=".json") as handle:
            handle.write(content)
            handle.flush()
            return self.run(tool, [handle.name if a == "{file}" else a for a in args])

    # -- reassignment --------------------------------------------------------------------------

    def reassign_execute(self, assignment: Assignment, throttle: int | None, additional: bool = False) -> None:
        """Start moving ``assignment``; ``throttle`` bytes/s caps replication on the brokers involved
        (Kafka sets it on the brokers and topics of these partitions; :meth:`reassign_verify`
        clears it once every partition completed). None: no throttle. Kafka refuses while another
        reassignment runs unless ``additional`` (used to resubmit our own after an interruption)."""
        args = ["--execute", "--reassignment-json-file", "{file}"]
        if additional:
            args.append("--additional")
        if throttle is not None:
            args += ["--throttle", str(int(throttle))]
        self._with_file(REASSIGN, reassignment_json(assignment), args)

    def reassign_verify(self, assignment: Assignment) -> VerifyResult:
        """Which partitions of ``assignment`` completed; clears the throttles when all did."""
        output = self._with_file(REASSIGN, reassignment_json(assignment),
                                 ["--verify", "--reassignment-json-file", "{file}"])
        return parse_verify(output)

    def reassign_generate(self, topics: Iterable[str], brokers: Iterable[int],
                          rack_aware: bool = True) -> dict[tuple[str, int], tuple[int, ...]]:
        """Kafka's own proposal (``--generate``) for ``topics`` over ``brokers``."""
        request = json.dumps({"version": 1, "topics": [{"topic": t} for t in sorted(topics)]})
        args = ["--generate", "--topics-to-move-json-file", "{file}", "--broker-list",
                ",".join(str(b) for b in sorted(brokers))]
        if not rack_aware:
            args.append("--disable-rack-aware")
        output = self._with_file(REASSIGN, request, args)
        proposal = output.split("Proposed partition reassignment configuration", 1)[-1].strip()
        return parse_assignment(proposal.splitlines()[0])

    # -- client quotas -------------------------------------------------------------------------

    def client_quotas(self) -> dict[str, dict[str, float]]:
        """Every client-id quota: {client id: {quota name: value}}."""
        return parse_quotas(self.run(CONFIGS, ["--describe", "--entity-type", "clients"]))

    def set_consumer_quota(self, client_id: str, bytes_per_second: int) -> None:
        self.run(CONFIGS, ["--alter", "--entity-type", "clients", "--entity-name", client_id,
                           "--add-config", f"consumer_byte_rate={int(bytes_per_second)}"])

    def remove_consumer_quota(self, client_id: str) -> None:
        self.run(CONFIGS, ["--alter", "--entity-type", "clients", "--entity-name", client_id,
                           "--delete-config", "consumer_byte_rate"])

    def default_producer_quota(self) -> int | None:
        """The client-id default ``producer_byte_rate``: every producer without a quota of its own
        has it; None when unset."""
        described = self.run(CONFIGS, ["--describe", "--entity-type", "clients", "--entity-default"])
        found = _PRODUCER_RATE.search(described)
        return int(float(found["rate"])) if found else None

    def set_default_producer_quota(self, bytes_per_second: int | None) -> None:
        """Set the client-id default ``producer_byte_rate``, or remove it (None)."""
        change = (["--add-config", f"producer_byte_rate={int(bytes_per_second)}"] if bytes_per_second is not None
                  else ["--delete-config", "producer_byte_rate"])
        self.run(CONFIGS, ["--alter", "--entity-type", "clients", "--entity-default", *change])

    # -- share groups --------------------------------------------------------------------------

    def share_group_offsets(self, group: str) -> dict[tuple[str, int], ShareOffsets]:
        """Each partition's start offset and lag in share group ``group`` (Admin.listShareGroupOffsets)."""
        return parse_share_offsets(self.run(SHARE_GROUPS, ["--describe", "--group", group, "--offsets"]), group)

    # -- brokers -------------------------------------------------------------------------------

    def unregister_broker(self, broker_id: int) -> None:
        """Forget a broker that was shut down for good (``kafka-cluster unregister``): KRaft keeps a
        stopped broker registered, fenced, until told otherwise."""
        self.run(CLUSTER_TOOL, ["--id", str(broker_id)], command="unregister")
