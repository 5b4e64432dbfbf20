"""``conveyor acl plan`` and ``conveyor acl apply``: each service's principal, its SCRAM credential
and its ACLs on every secured cluster, derived from the topics' producers and consumers."""

from __future__ import annotations

from typing import Annotated

import typer

from conveyor.acls import provisioner
from conveyor.acls.plan import AclPlan
from conveyor.cli.common import (
    DEFAULT_PLATFORM,
    Column,
    OutputFormat,
    OutputOption,
    PlatformOption,
    Report,
    Section,
    YesOption,
    confirm,
    platform_with_granted,
    render,
)
from conveyor.cli.topics_cmd import PLAN_CHANGES, PLAN_IN_SYNC, ClusterOption, PruneOption

app = typer.Typer(help="Make every secured cluster's principals and ACLs match platform.yaml.", no_args_is_help=True)

_STYLE = {"add": "yellow", "remove": "red", "create user": "yellow", "in sync": "green", "not secured": "dim"}
_COLUMNS = (Column("cluster"), Column("principal"),
            Column("change", cell=lambda r: f"[{_STYLE[r['change']]}]{r['change']}[/]"), Column("detail"))


def _rows(plans: list[AclPlan]) -> list[dict[str, str | None]]:
    rows: list[dict[str, str | None]] = []
    for plan in plans:
        if not plan.secured:
            rows.append({"cluster": plan.cluster, "principal": None, "change": "not secured",
                         "detail": "clients connect without credentials: no authorizer to feed"})
        elif plan.in_sync:
            rows.append({"cluster": plan.cluster, "principal": None, "change": "in sync", "detail": None})
        rows += [{"cluster": plan.cluster, "principal": f"User:{u}", "change": "create user",
                  "detail": "SCRAM-SHA-512 credential"} for u in plan.users]
        rows += [{"cluster": plan.cluster, "principal": g.principal, "change": "add", "detail": g.describe()}
                 for g in plan.add]
        rows += [{"cluster": plan.cluster, "principal": g.principal, "change": "remove", "detail": g.describe()}
                 for g in plan.remove]
    return rows


def _section(plans: list[AclPlan]) -> Section:
    return Section("changes", "ACLs: platform.yaml against the live clusters", _COLUMNS, _rows(plans))


@app.command()
def plan(
    platform: PlatformOption = DEFAULT_PLATFORM,
    cluster: ClusterOption = None,
    prune: PruneOption = False,
    output: OutputOption = OutputFormat.table,
) -> None:
    """Show what `apply` would change: missing SCRAM users and ACLs, and with --prune the ACLs
    platform.yaml does not declare. Exit status: 0 when every secured cluster matches, 2 when
    `apply` would change something, 1 on an error."""
    plans = provisioner.plan(platform_with_granted(platform, keep=False), cluster, prune)
    code = PLAN_IN_SYNC if all(p.in_sync for p in plans) else PLAN_CHANGES
    render(output, _section(plans), exit_code=code)
    raise typer.Exit(code)


@app.command()
def apply(
    platform: PlatformOption = DEFAULT_PLATFORM,
    cluster: ClusterOption = None,
    prune: PruneOption = False,
    yes: YesOption = False,
    reset_passwords: Annotated[bool, typer.Option(
        "--reset-passwords", help="Also set the users the cluster already has to the passwords Conveyor holds "
        "for them (after the local principals.json was lost or restored from an older copy).")] = False,
    output: OutputOption = OutputFormat.table,
) -> None:
    """Create the missing SCRAM users (those a cluster's users names) and ACLs; with --prune, after a typed
    confirmation (or --yes), also remove the ACLs platform.yaml does not declare."""
    model = platform_with_granted(platform, keep=True)
    plans = provisioner.plan(model, cluster, prune, reset_passwords)
    report = Report(output)
    report.add(_section(plans))
    removals = sum(len(p.remove) for p in plans)
    if removals:
        confirm(model.name, f"remove {removals} ACL(s)", yes)
    done = provisioner.apply(model, plans)
    report.say(f"applied {done} change(s)" if done else "nothing to change")
    report.close(applied=done)
