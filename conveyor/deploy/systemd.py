"""systemd units for the platform's services (conveyor.deploy.services): one unit per service,
restarted on failure, its secrets from an environment file only root reads, its working folder a
state directory of its own."""

from __future__ import annotations

import re

from conveyor.config.loading import HOME_VARIABLE
from conveyor.deploy.services import EnvRef, Service

#: Where each unit reads its secrets (``${VAR}`` of platform.yaml): /etc/conveyor/<unit>.env.
ENV_DIR = "/etc/conveyor"
_PLAIN = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")


def quote(arg: str) -> str:
    """An ExecStart word: ``%`` (a specifier) doubled, ``$`` (a variable) doubled, and quoted when
    it holds anything but plain characters."""
    escaped = arg.replace("%", "%%").replace("$", "$$")
    if _PLAIN.match(arg):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _exec(service: Service, program: str) -> str:
    # ${NAME}, unquoted and whole, is one word taken from the environment when the unit starts.
    return " ".join(f"${{{a.name}}}" if isinstance(a, EnvRef) else quote(a) for a in (program, *service.args))


def unit(service: Service, program: str, description: str) -> str:
    """The unit file's text; ``program`` is the installed ``conveyor`` executable."""
    advertise = ""
    if service.stateful and "grpc" in service.ports:
        # A default that the environment file replaces with the address clients use.
        advertise = f"Environment=CONVEYOR_ADVERTISE=%H:{service.ports['grpc']}\n"
    state = f"conveyor/{service.name.removeprefix('conveyor-')}"
    return (
        "[Unit]\n"
        f"Description={description}\n"
        "Wants=network-online.target\n"
        "After=network-online.target\n"
        "\n"
        "[Service]\n"
        "Type=simple\n"
        f"ExecStart={_exec(service, program)}\n"
        f"{advertise}"
        f"EnvironmentFile=-{ENV_DIR}/{service.name}.env\n"
        f"StateDirectory={state}\n"
        f"WorkingDirectory=%S/{state}\n"
        f"Environment={HOME_VARIABLE}=%S/{state}\n"
        "Restart=on-failure\n"
        "RestartSec=5s\n"
        # SIGTERM drains (the gateway answers what it holds, the lake finishes its commit).
        "KillSignal=SIGTERM\n"
        "TimeoutStopSec=90s\n"
        "NoNewPrivileges=yes\n"
        "PrivateTmp=yes\n"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


DESCRIPTIONS = {
    "gateway": "Conveyor gateway: events in over HTTP, checked and written to Kafka",
    "replicator": "Conveyor replicator: the routes' copies between clusters",
    "registrar": "Conveyor registrar: topic requests granted on every cluster",
    "dispatcher": "Conveyor dispatcher node: messages handed to readers over gRPC",
    "lake": "Conveyor lake: topics landed in Iceberg exactly once, a run at a time",
    "views": "Conveyor real-time views: Structured Streaming into Redis",
    "watcher": "Conveyor watcher: lag, broker health and the dashboard",
}


def units(services: list[Service], program: str) -> dict[str, str]:
    """File name -> unit text, one per service."""
    return {f"{s.name}.service": unit(s, program, DESCRIPTIONS[s.part]) for s in services}
