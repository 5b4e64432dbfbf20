"""Kubernetes manifests for the platform's services (conveyor.deploy.services): a Deployment per
gateway pool, the replicator's workers and the watcher; a StatefulSet for the dispatcher, whose
clients are sent to one node by a fixed name (as the reports run theirs); a CronJob for the lake;
a Deployment of one for the views job; a Service for each that serves, with probes on /healthz and
/readyz.

Every container reads the platform file and the contract files it names from the ConfigMap
``conveyor-platform`` at /etc/conveyor, the certificate files from the Secret ``conveyor-tls`` at
/etc/conveyor/tls, and its secrets (the ``${VAR}`` of platform.yaml) from the Secret
``conveyor-secrets``; the team creates both Secrets. Its working folder (``CONVEYOR_HOME``) is a
volume of its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conveyor.config.loading import HOME_VARIABLE
from conveyor.deploy.services import EnvRef, Probe, Service

CONFIG_DIR = "/etc/conveyor"
WORK_DIR = "/var/lib/conveyor"
CONFIG_MAP = "conveyor-platform"
SECRET = "conveyor-secrets"
#: The certificate files platform.yaml names (the clusters' CA, the edges' certificate and key), as
#: files of the Secret ``conveyor-tls``: platform.yaml names them under this folder.
TLS_DIR = f"{CONFIG_DIR}/tls"
TLS_SECRET = "conveyor-tls"
#: Instances of each part that can run side by side (the views job is one query per checkpoint).
REPLICAS = {"gateway": 2, "replicator": 2, "registrar": 1, "dispatcher": 2, "views": 1, "watcher": 1}


def cron(every: str) -> str:
    """A cron schedule for a run every ``every`` (``10m``, ``2h``); ValueError for one cron cannot say."""
    number, unit = every[:-1], every[-1:]
    if not number.isdigit() or int(number) < 1:
        raise ValueError(f"{every!r} is not a whole number of minutes (10m) or hours (2h)")
    n = int(number)
    if unit == "m" and 60 % n == 0:
        return f"*/{n} * * * *" if n > 1 else "* * * * *"
    if unit == "h" and 24 % n == 0:
        return f"0 */{n} * * *" if n > 1 else "0 * * * *"
    raise ValueError(f"a run every {every} is no cron schedule: give minutes that divide an hour or hours "
                     "that divide a day")


def _labels(service: Service) -> dict[str, str]:
    return {"app.kubernetes.io/name": service.name, "app.kubernetes.io/part-of": "conveyor",
            "app.kubernetes.io/component": service.part}


def _args(args: tuple[str | EnvRef, ...]) -> list[str]:
    # Kubernetes expands $(NAME) from the container's env; a literal $ is written $$.
    return [f"$({a.name})" if isinstance(a, EnvRef) else a.replace("$", "$$") for a in args]


def _probe(probe: Probe, path: str | None) -> dict[str, Any]:
    check = ({"tcpSocket": {"port": probe.port}} if path is None else
             {"httpGet": {"path": path, "port": probe.port, "scheme": "HTTPS" if probe.https else "HTTP"}})
    return {**check, "periodSeconds": 10, "failureThreshold": 3}


def _container(service: Service, image: str, args: tuple[str | EnvRef, ...]) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": service.part,
        "image": image,
        "command": ["conveyor"],
        "args": _args(args),
        "workingDir": WORK_DIR,
        "envFrom": [{"secretRef": {"name": SECRET, "optional": True}}],
        "env": [{"name": HOME_VARIABLE, "value": WORK_DIR}],
        "volumeMounts": [{"name": "platform", "mountPath": CONFIG_DIR, "readOnly": True},
                         {"name": "tls", "mountPath": TLS_DIR, "readOnly": True},
                         {"name": "work", "mountPath": WORK_DIR}],
    }
    if any(isinstance(a, EnvRef) for a in args):
        container["env"] += [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                             {"name": "CONVEYOR_ADVERTISE",
                              "value": f"$(POD_NAME).{service.name}:{service.ports['grpc']}"}]
    if args == service.args:
        container["ports"] = [{"name": name, "containerPort": port} for name, port in service.ports.items()]
        if service.probe is not None:
            container["livenessProbe"] = _probe(service.probe, service.probe.live)
            container["readinessProbe"] = _probe(service.probe, service.probe.ready or service.probe.live)
    return container


def _pod(service: Service, image: str, items: list[dict[str, str]], args: tuple[str | EnvRef, ...],
         restart: str = "Always") -> dict[str, Any]:
    return {
        "metadata": {"labels": _labels(service)},
        "spec": {
            "restartPolicy": restart,
            # SIGTERM drains: the gateway answers what it holds, the lake finishes its commit.
            "terminationGracePeriodSeconds": 90,
            "containers": [_container(service, image, args)],
            "volumes": [{"name": "platform", "configMap": {"name": CONFIG_MAP, "items": items}},
                        {"name": "tls", "secret": {"secretName": TLS_SECRET, "optional": True}},
                        {"name": "work", "emptyDir": {}}],
        },
    }


def _workload(service: Service, image: str, items: list[dict[str, str]]) -> dict[str, Any]:
    meta = {"name": service.name, "labels": _labels(service)}
    if service.every is not None:
        job = {"backoffLimit": 2, "template": _pod(service, image, items, service.once, restart="OnFailure")}
        # A run still going when the next is due is left to finish: the lake's runs may overlap, but
        # need not.
        return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta,
                "spec": {"schedule": cron(service.every), "concurrencyPolicy": "Forbid", "jobTemplate": {"spec": job}}}
    spec: dict[str, Any] = {"replicas": REPLICAS[service.part], "selector": {"matchLabels": _labels(service)},
                            "template": _pod(service, image, items, service.args)}
    if service.stateful:
        return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta,
                "spec": {**spec, "serviceName": service.name, "podManagementPolicy": "Parallel"}}
    if REPLICAS[service.part] == 1:
        spec["strategy"] = {"type": "Recreate"}  # never two at once, even during a rollout
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": spec}


def _service(service: Service) -> dict[str, Any]:
    spec: dict[str, Any] = {"selector": _labels(service),
                            "ports": [{"name": n, "port": p, "targetPort": p} for n, p in service.ports.items()]}
    if service.stateful:
        spec["clusterIP"] = "None"  # each node by name: <pod>.<service>
        spec["publishNotReadyAddresses"] = True
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": service.name, "labels": _labels(service)},
            "spec": spec}


def _key(path: str) -> str:
    # A ConfigMap's keys hold no "/": each file is mounted back at its path by the volume's items.
    return path.replace("/", "__")


def manifests(services: list[Service], image: str, files: dict[str, str]) -> list[dict[str, Any]]:
    """The ConfigMap of ``files`` (path under /etc/conveyor -> text), then per service its workload
    and, for one that serves, its Service."""
    items = [{"key": _key(path), "path": path} for path in files]
    found = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CONFIG_MAP},
              "data": {_key(path): text for path, text in files.items()}}]
    for service in services:
        found.append(_workload(service, image, items))
        if service.ports and service.every is None:
            found.append(_service(service))
    return found


def platform_files(platform_file: Path, contracts: list[str]) -> dict[str, str]:
    """platform.yaml and the contract files it names (relative to it), by their path under the
    config folder."""
    root = platform_file.parent
    return {"platform.yaml": platform_file.read_text(), **{c: (root / c).read_text() for c in contracts}}
