"""``conveyor deploy systemd|kubernetes``: the platform's long-running services as units or manifests
a team installs, each service on a host of its own (docs/deploy.md)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Annotated

import typer
import yaml

from conveyor.cli.common import DEFAULT_PLATFORM, PlatformOption, console, err_console
from conveyor.config import Platform, duration_text, load_platform

app = typer.Typer(help="Write systemd units or Kubernetes manifests for the platform's services (docs/deploy.md).",
                  no_args_is_help=True)

def _loaded(path: Path) -> Platform:
    """platform.yaml as written: a deployed service reads nothing `conveyor up` writes, and the
    secrets stay references that each host resolves (none need be set where this runs)."""
    platform = load_platform(path, resolve_secrets=False)
    for name, cluster in platform.clusters.items():
        if cluster.bootstrap is None:
            err_console.print(f"[yellow]clusters.{name} has no bootstrap: only `conveyor up` on this machine starts "
                              "it, and a service on another host cannot reach it; give its bootstrap[/]")
    return platform


@app.command()
def systemd(
    platform: PlatformOption = DEFAULT_PLATFORM,
    out: Annotated[Path, typer.Option("--out", help="Folder for the unit files.")] = Path("systemd"),
    program: Annotated[str, typer.Option(
        "--program", help="The installed conveyor executable the units run.")] = "/usr/local/bin/conveyor",
    platform_path: Annotated[str, typer.Option(
        "--platform-path", help="Where platform.yaml lies on the hosts.")] = "/etc/conveyor/platform.yaml",
    host: Annotated[str, typer.Option("--host", help="Address every service listens on.")] = "0.0.0.0",
) -> None:
    """One unit per service (gateway per data centre, replicator, registrar, dispatcher, lake every
    pipeline.lake.every, views, watcher): restarted on failure, secrets from /etc/conveyor/<unit>.env (the ${VAR} of
    platform.yaml; mode 0600), a state directory of its own. Check them with `systemd-analyze verify`."""
    from conveyor.deploy.services import services
    from conveyor.deploy.systemd import units

    if shutil.which(program) is None and not Path(program).is_file():
        err_console.print(f"[yellow]{program} is not on this machine: install conveyor there on the hosts[/]")
    found = services(_loaded(platform), platform_path, host)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in units(found, program).items():
        (out / name).write_text(text)
        console.print(f"wrote {out / name}")


@app.command()
def kubernetes(
    platform: PlatformOption = DEFAULT_PLATFORM,
    out: Annotated[Path, typer.Option("--out", help="The manifests' file (several YAML documents).")]
    = Path("conveyor.k8s.yaml"),
    image: Annotated[str, typer.Option("--image", help="A container image with conveyor installed.")]
    = "conveyor:0.1.0",
) -> None:
    """Manifests: the ConfigMap of platform.yaml and its contract files, a Deployment per gateway
    pool, the replicator's workers and the watcher, a StatefulSet for the dispatcher, a CronJob for
    the lake on pipeline.lake.every, the views job, Services, and probes on /healthz and /readyz. Secrets come from the
    Secret conveyor-secrets, which you create. Check them with `kubernetes-validate`."""
    from conveyor.deploy.kubernetes import CONFIG_DIR, cron, manifests, platform_files
    from conveyor.deploy.services import services

    model = _loaded(platform)
    try:
        cron(duration_text(model.pipeline.lake.every))
    except ValueError as err:
        err_console.print(f"[bold red]pipeline.lake.every:[/] {err}")
        raise typer.Exit(2) from None
    contracts = sorted({spec.contract for spec in model.topics.values() if spec.contract is not None})
    found = services(model, f"{CONFIG_DIR}/platform.yaml", "0.0.0.0")
    documents = manifests(found, image, platform_files(platform, contracts))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump_all(documents, sort_keys=False, width=120))
    console.print(f"wrote {out}: {len(documents)} manifests")
