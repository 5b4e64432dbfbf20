"""The session's platform as a team deploys it, and the pods of the manifests `conveyor deploy
kubernetes` writes for it, each run as a process on a host of its own.

- :func:`deployed_platform`: platform.yaml naming the session's clusters by ``bootstrap``, with
  what `conveyor up` wrote in its resolved view laid in (what a deployment writes in platform.yaml
  for existing clusters), every credential as ``${VAR}`` (the Secret ``conveyor-secrets``), the
  certificate files in the folder the Secret ``conveyor-tls`` is mounted at, and no runtime.home:
  each pod's ``CONVEYOR_HOME`` gives its own.
- :class:`Pod`: one replica of a workload, run from its container as written: the command and
  arguments with ``$(VAR)`` expanded from its environment, the ConfigMap's files and the Secret's
  mounted as folders, an empty working folder. What a pod's network gives it, the test maps: the
  host's address (127.77.<worker>.<n>) for ``0.0.0.0``, and for a StatefulSet pod's DNS name.
- :class:`Fleet`: every pod of the manifests, their replacements after a host's loss, and one-off
  pods of a spec (a CronJob's run, `conveyor verify`); :class:`ServiceTransport` stands for a
  Service in front of a pool of pods.
- :func:`deployed_case`: the platform both deploy tests run, with a topic of its own.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from conveyor.config import Platform, load_platform
from conveyor.config.resolved import read_resolved_view
from conveyor.deploy.kubernetes import CONFIG_DIR, TLS_DIR, WORK_DIR
from conveyor.runtime.security import local_security

#: The Secret conveyor-secrets' variables are named after what they hold.
_VARIABLE = re.compile(r"[^A-Z0-9]+")


@dataclass(frozen=True)
class Deployed:
    #: platform.yaml and its contract files, as the team keeps them (what the ConfigMap is made of).
    source: Path
    #: What every pod mounts at /etc/conveyor: the ConfigMap's files, and the certificate files of
    #: the Secret conveyor-tls under tls/.
    etc: Path
    #: The Secret conveyor-secrets: every ``${VAR}`` of platform.yaml.
    secrets: dict[str, str]
    #: The authority of the clusters' and the edges' certificates, as the pods have it.
    ca: Path


def _secret(secrets: dict[str, str], name: str, value: str) -> str:
    variable = "CONVEYOR_" + _VARIABLE.sub("_", name.upper()).strip("_")
    secrets[variable] = value
    return f"${{{variable}}}"


def _certificate(etc: Path, path: str | None) -> str | None:
    """The file at ``path``, put in the Secret conveyor-tls: its path where the pods mount it."""
    if path is None:
        return None
    (etc / "tls").mkdir(parents=True, exist_ok=True)
    shutil.copy(path, etc / "tls" / Path(path).name)
    return str(etc / "tls" / Path(path).name)


def deployed_platform(platform_data: dict[str, Any], platform_file: Path, folder: Path,
                      hosts: list[str]) -> Deployed:
    """The session's platform (``platform_data``, written at ``platform_file`` and up) as deployed
    on ``hosts``: the edges' certificate names them, issued by the session's authority."""
    platform = load_platform(platform_file)
    view = read_resolved_view(platform)
    assert view is not None, "the session's platform is not up"
    source, etc, secrets = folder / "source", folder / "etc", {}
    data = copy.deepcopy(platform_data)
    data.pop("runtime", None)
    for name, started in view.clusters.items():
        cluster = data["clusters"][name]
        cluster.pop("security", None)  # an existing cluster's security is its client settings
        client = {key: value.get_secret_value() for key, value in started.client.items()}
        if "ssl.ca.location" in client:
            client["ssl.ca.location"] = _certificate(etc, client["ssl.ca.location"])
        cluster.update({
            "bootstrap": started.bootstrap, "client": client,
            "credentials": {part.value: {key: _secret(secrets, f"{name}_{part.value}_{key}", value.get_secret_value())
                                         for key, value in settings.items()}
                            for part, settings in started.credentials.items()},
            "metrics": [page.model_dump(mode="json", exclude_none=True) for page in started.metrics]})
    realtime = data["pipeline"].setdefault("realtime", {})
    for key in ("redis", "redis_reader"):
        value = getattr(view, key)
        if value is not None and key not in realtime:
            realtime[key] = _secret(secrets, key, value.get_secret_value())
    assert view.tls is not None and view.tls.ca is not None and "tls" not in data
    (etc / "tls").mkdir(parents=True, exist_ok=True)
    cert, key = etc / "tls" / "edge.pem", etc / "tls" / "edge-key.pem"
    local_security(platform.home).edge_certificate_for(hosts, cert, key)
    data["tls"] = {"cert": str(cert), "key": str(key), "ca": _certificate(etc, view.tls.ca)}
    options = data["pipeline"].get("catalog", {}).get("options", {})
    for key, value in options.items():
        if re.search(r"password|secret|access-key", key):
            options[key] = _secret(secrets, f"catalog_{key}", value)
    (source / "contracts").mkdir(parents=True)
    for spec in data["topics"].values():
        if spec.get("contract"):
            # Beside platform.yaml, as the ConfigMap carries them.
            shutil.copy(platform_file.parent / spec["contract"], source / "contracts" / Path(spec["contract"]).name)
            spec["contract"] = f"contracts/{Path(spec['contract']).name}"
    (source / "platform.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return Deployed(source, etc, secrets, Path(data["tls"]["ca"]))


def manifests(deployed: Deployed, folder: Path) -> list[dict[str, Any]]:
    """`conveyor deploy kubernetes` of the deployed platform; the ConfigMap's files laid out in
    ``deployed.etc`` as its volume's items mount them."""
    out = folder / "conveyor.k8s.yaml"
    written = subprocess.run([sys.executable, "-m", "conveyor", "deploy", "kubernetes", "--platform",
                              str(deployed.source / "platform.yaml"), "--out", str(out)],
                             capture_output=True, text=True, timeout=120)
    assert written.returncode == 0, written.stderr
    documents = list(yaml.safe_load_all(out.read_text()))
    config = next(d for d in documents if d["kind"] == "ConfigMap")
    for document in documents:
        for volume in (pod_spec(document) or {}).get("volumes", []):
            for item in volume.get("configMap", {}).get("items", []):
                target = deployed.etc / item["path"]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(config["data"][item["key"]])
    return documents


def pod_spec(document: dict[str, Any]) -> dict[str, Any] | None:
    """The pod spec of a workload (a Deployment's, a StatefulSet's, a CronJob's job's)."""
    spec = document.get("spec", {})
    template = spec.get("template") or spec.get("jobTemplate", {}).get("spec", {}).get("template")
    return None if template is None else template["spec"]


def _expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' expansion: ``$(NAME)`` of a variable defined before, ``$$`` a literal ``$``."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


#: The data centres the deployed topic is published in.
DCS = ("dc1", "dc2")


def case_topic(folder: Path) -> str:
    """The topic the services of the case in ``folder`` carry: the case's own, so that a case run
    after another on the session's clusters reads none of its records, copies or counters."""
    return f"deployed-{uuid.uuid5(uuid.NAMESPACE_URL, str(folder)).hex[:10]}"


def deployed_case(platform_data: dict[str, Any], platform_file: Path, lake_database: Any, s3_server: Any,
                  folder: Path, hosts: list[str]) -> tuple[Platform, Deployed, list[dict[str, Any]]]:
    """The session's platform with a topic of its own (routed from both data centres to central,
    landed by the lake, counted by the views), every edge on TLS, the lake's catalog on PostgreSQL
    with its warehouse and the views' checkpoint on object storage: as the test process sees it
    (its users and ACLs granted, its topics made), as deployed on ``hosts``, and its manifests."""
    from conveyor.topics import provisioner
    from tests.conftest import platform_variant
    from tests.realtimekit import views_of
    from tests.s3kit import ACCESS_KEY, SECRET_KEY

    topic = case_topic(folder)
    data = copy.deepcopy(platform_data)
    for spec in data["topics"].values():  # the file is written elsewhere: keep contracts found
        if spec.get("contract"):
            spec["contract"] = str(platform_file.parent / spec["contract"])
    data["topics"][topic] = {**data["topics"]["ad-events"], "partitions": 3, "consumers": ["lake", "realtime"]}
    data["topics"][f"{topic}-rejects"] = {"partitions": 1, "retention": "7d", "clusters": ["central"]}
    data["routes"] = {f"{dc}-deployed": {"source": dc, "destination": "central", "topics": [topic]} for dc in DCS}
    for edge in ("gateway", "dispatch", "ops"):  # every edge serves TLS, as the demo's do
        data[edge] = {**data.get(edge, {}), "tls": {}}
    data["ops"]["components"] = {}  # the session's pages are on addresses no pod serves
    data["pipeline"] = {
        "source": "central",
        "catalog": {"type": "jdbc", "uri": lake_database.url,
                    "warehouse": s3_server.warehouse(f"{folder.name}/warehouse"),
                    "options": {"jdbc.user": lake_database.user, **s3_server.catalog_options(),
                                "s3.access-key-id": ACCESS_KEY, "s3.secret-access-key": SECRET_KEY}},
        # Two tasks at once, as the demo runs: a lake run's tasks mostly wait on S3, a small file each.
        # The driver's heap is the platform's default, as it ships: a local[2] driver runs the tasks
        # too, and a task's OutOfMemoryError shuts its SparkContext down mid-job.
        "spark": {"master": "local[2]", "shuffle_partitions": 2},
        "lake": {"topics": [topic]},
        "realtime": {"checkpoint": s3_server.warehouse(f"{folder.name}/checkpoints"), "trigger": "5s",
                     "rejects_topic": f"{topic}-rejects", "views": views_of(topic, "2m", "10m")},
    }
    variant = platform_variant(data, folder / "variant.yaml")
    provisioner.apply(variant, provisioner.plan(variant))
    deployed = deployed_platform(data, folder / "variant.yaml", folder / "deployed", hosts)
    return variant, deployed, manifests(deployed, folder)


class NotReady(Exception):
    """A readiness probe that did not pass, and what it got."""


@dataclass
class Pod:
    """One replica of ``workload``, named as Kubernetes names it, at ``address``."""

    workload: dict[str, Any]
    name: str
    address: str
    deployed: Deployed
    #: The pod's empty working folder and its log.
    folder: Path
    #: Pod DNS names (a StatefulSet's ``<pod>.<service>``) -> the addresses that stand for them.
    dns: dict[str, str] = field(default_factory=dict)
    #: Arguments after the container's (a one-off run of a service's pod spec).
    extra: tuple[str, ...] = ()
    #: Arguments in place of the container's: a one-off command in a pod of this spec.
    args: tuple[str, ...] | None = None
    process: subprocess.Popen | None = None

    @property
    def container(self) -> dict[str, Any]:
        spec = pod_spec(self.workload)
        assert spec is not None
        return spec["containers"][0]

    def _mapped(self, text: str) -> str:
        """A path or address of the container as this host has it."""
        if text == "0.0.0.0":  # every address of the pod's own network
            return self.address
        for mount, folder in ((WORK_DIR, self.folder / "work"), (TLS_DIR, self.deployed.etc / "tls"),
                              (CONFIG_DIR, self.deployed.etc)):
            if text == mount or text.startswith(mount + "/"):
                return str(folder) + text[len(mount):]
        for name, address in self.dns.items():
            text = text.replace(name, address)
        return text

    def environment(self) -> dict[str, str]:
        env = {"PATH": os.environ["PATH"], "HOME": os.environ["HOME"], "LANG": "C.UTF-8", **self.deployed.secrets}
        # The machine's JVM, and the suite's setting for every JVM it starts (C1 alone, tests/conftest.py):
        # a node's own, not the manifest's, and without it each pod's Spark spends about 40 % more CPU.
        for name in ("JAVA_HOME", "JAVA_TOOL_OPTIONS"):
            if name in os.environ:
                env[name] = os.environ[name]
        for entry in self.container.get("env", []):
            if "value" in entry:
                env[entry["name"]] = self._mapped(_expand(entry["value"], env))
            else:
                assert entry["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}, entry
                env[entry["name"]] = self.name
        return env

    def argv(self, env: dict[str, str]) -> list[str]:
        args = self.container.get("args", []) if self.args is None else list(self.args)
        command, *rest = [self._mapped(_expand(word, env)) for word in self.container["command"] + args]
        assert command == "conveyor", command
        return [str(Path(sys.executable).parent / "conveyor"), *rest, *self.extra]

    @property
    def log_file(self) -> Path:
        # Beside the host's folder, not in it: the pod's log outlives the host, as a cluster's logs do.
        return self.folder.with_name(f"{self.folder.name}.log")

    def start(self) -> None:
        (self.folder / "work").mkdir(parents=True)
        env = self.environment()
        with self.log_file.open("ab") as out:
            self.process = subprocess.Popen(self.argv(env), cwd=self._mapped(self.container["workingDir"]), env=env,
                                            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def part(self) -> str:
        return self.container["name"]

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def lose(self) -> bool:
        """The host lost: SIGKILL to every process of the pod, its folder deleted; True when it was
        running (the loss landed)."""
        assert self.process is not None
        landed = self.alive()
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(60)
        shutil.rmtree(self.folder)
        return landed

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")[-3000:]

    def ready(self) -> bool:
        """The container's readiness probe, as written, against this host; NotReady says why not."""
        assert self.process is not None and self.process.poll() is None, f"{self.name} exited: {self.log()}"
        probe = self.container["readinessProbe"]
        if "tcpSocket" in probe:
            try:
                socket.create_connection((self.address, probe["tcpSocket"]["port"]), timeout=2).close()
            except OSError as err:
                raise NotReady(f"{self.name}: {err}") from None
            return True
        check = probe["httpGet"]
        url = f"{check['scheme'].lower()}://{self.address}:{check['port']}{check['path']}"
        try:  # the kubelet checks no certificate
            answer = httpx.get(url, timeout=5, verify=False)
        except httpx.HTTPError as err:
            raise NotReady(f"{url}: {err!r}") from None
        if answer.status_code != 200:
            raise NotReady(f"{url}: {answer.status_code} {answer.text[:300]}")
        return True

    def stop(self) -> None:
        """As Kubernetes stops a pod: SIGTERM to the container's process, and after the grace
        period SIGKILL to everything in it."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(30)


def addresses(worker: int, count: int) -> list[str]:
    """Host addresses of one pytest-xdist worker: 127.77.<worker>.2 and on (all on the loopback)."""
    return [f"127.77.{worker}.{n}" for n in range(2, 2 + count)]


class Fleet:
    """Every pod of the manifests, and their replacements on hosts of their own: a lost pod of a
    Deployment comes back under a new name, one of a StatefulSet under its own (its DNS name then
    stands for the new address), each at the next free address, from an empty folder."""

    def __init__(self, documents: list[dict[str, Any]], deployed: Deployed, hosts: list[str], folder: Path) -> None:
        self.deployed, self.folder = deployed, folder
        self._hosts = iter(hosts)
        self.pods: list[Pod] = []
        self.dns: dict[str, str] = {}
        self.cronjob = next(d for d in documents if d["kind"] == "CronJob")
        for document in documents:
            if document["kind"] in ("Deployment", "StatefulSet"):
                for i in range(document["spec"]["replicas"]):
                    self.pods.append(self._pod(document, i))

    def _pod(self, workload: dict[str, Any], ordinal: int | None = None, extra: tuple[str, ...] = (),
             args: tuple[str, ...] | None = None) -> Pod:
        name = workload["metadata"]["name"]
        if workload["kind"] == "StatefulSet":
            pod = f"{name}-{ordinal}"
        else:
            pod = f"{name}-{uuid.uuid4().hex[:5]}"
        address = next(self._hosts)
        if workload["kind"] == "StatefulSet":
            self.dns[f"{pod}.{name}"] = address
        return Pod(workload, pod, address, self.deployed, self.folder / pod / address, self.dns, extra, args)

    def of(self, part: str) -> list[Pod]:
        return [pod for pod in self.pods if pod.part == part]

    def replace(self, lost: Pod) -> Pod:
        """A pod in place of ``lost`` (already lost), started."""
        ordinal = int(lost.name.rsplit("-", 1)[1]) if lost.workload["kind"] == "StatefulSet" else None
        pod = self._pod(lost.workload, ordinal, lost.extra)
        self.pods[self.pods.index(lost)] = pod
        pod.start()
        return pod

    def run(self, workload: dict[str, Any], *extra: str, args: tuple[str, ...] | None = None) -> Pod:
        """A one-off pod of ``workload``, started: a CronJob's run, a service's pod spec with ``extra``
        arguments, or ``args`` in place of its own."""
        pod = self._pod(workload, extra=extra, args=args)
        pod.start()
        return pod

    def stop(self) -> None:
        for pod in self.pods:
            pod.stop()


class ServiceTransport(httpx.HTTPTransport):
    """A Kubernetes Service in front of a pool of pods: each request goes to one of the pool's
    running pods, whatever host the client named; a pod lost on the way is the client's retry."""

    def __init__(self, fleet: Fleet, part: str, workload: str, verify: Any) -> None:
        super().__init__(verify=verify)
        self.fleet, self.part, self.workload = fleet, part, workload
        self._turn = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        pool = [p for p in self.fleet.of(self.part) if p.workload["metadata"]["name"] == self.workload and p.alive()]
        if pool:
            self._turn += 1
            request.url = request.url.copy_with(host=pool[self._turn % len(pool)].address)
        return super().handle_request(request)
