"""``conveyor topics plan`` and ``conveyor topics apply``: every topic in every cluster."""

from __future__ import annotations

from typing import Annotated

import typer
from conveyor.cli.common import (DEFAULT_PLATFORM, Column, OutputFormat, OutputOption, PlatformOption, Report, Section,
                                 StrictOption, YesOption, confirm, durability_section, platform_from, platform_to_apply,
                                 render)
from conveyor.acls import provisioner as acl_provisioner
from conveyor.topics import provisioner
from conveyor.topics.lint import durability_findings
from conveyor.topics.plan import ChangeKind, ClusterPlan

app = typer.Typer(rich_markup_mode="markdown", help="Make every cluster's topics match platform.yaml.", no_args_is_help=True)

ClusterOption = Annotated[
    list[str] | None,
    typer.Option("--cluster", "-c", envvar="CONVEYOR_CLUSTER", help="Only this cluster (repeatable)."),
]
PruneOption = Annotated[
    bool, typer.Option("--prune", help="Also delete topics that platform.yaml does not declare.")
]


#: The change column of a cluster that matches platform.yaml, and of what Kafka cannot apply.
IN_SYNC, CANNOT_APPLY = "in sync", "cannot apply"
_STYLE = {ChangeKind.delete.value: "red", IN_SYNC: "green", CANNOT_APPLY: "bold red"}


def _plan_rows(plans: list[ClusterPlan]) -> list[dict[str, str | None]]:
    rows: list[dict[str, str | None]] = []
    for plan in plans:
        if plan.in_sync:
            rows.append({"cluster": plan.cluster, "topic": None, "change": IN_SYNC, "detail": None})
        rows += [{"cluster": plan.cluster, "topic": c.topic, "change": c.kind.value, "detail": c.detail}
                 for c in plan.changes]
        rows += [{"cluster": plan.cluster, "topic": r.topic, "change": CANNOT_APPLY, "detail": r.reason}
                 for r in plan.refusals]
    return rows


_COLUMNS = (Column("cluster"), Column("topic"),
            Column("change", cell=lambda r: f"[{_STYLE.get(r['change'], 'yellow')}]{r['change']}[/]"), Column("detail"))


def _plan_section(plans: list[ClusterPlan]) -> Section:
    return Section("changes", "topics: platform.yaml against the live clusters", _COLUMNS, _plan_rows(plans))


@app.command()
def plan(
    platform: PlatformOption = DEFAULT_PLATFORM,
    cluster: ClusterOption = None,
    prune: PruneOption = False,
    output: OutputOption = OutputFormat.table,
    strict: StrictOption = False,
) -> None:
    """Show what `apply` would change: missing topics, fewer partitions than declared, config
    drift, and what Kafka cannot change; then the durability warnings (settings that stop writes
    or lose records once a broker fails). Exit status, as Terraform's -detailed-exitcode: 0 when
    every cluster matches platform.yaml, 2 when `apply` would change something, 1 on an error, when
    the plan holds something Kafka cannot apply, or with --strict on a warning."""
    model = platform_from(platform)
    plans = provisioner.plan(model, cluster, prune)
    findings = [f for f in durability_findings(model) if not cluster or f.cluster in cluster]
    code = 1 if strict and findings else plan_exit_code(plans)
    warnings = [durability_section(findings)] if findings or output is OutputFormat.json else []
    render(output, _plan_section(plans), *warnings, exit_code=code)
    raise typer.Exit(code)


#: Exit statuses of a plan: nothing to do, or changes that `apply` would make.
PLAN_IN_SYNC, PLAN_CHANGES = 0, 2


def plan_exit_code(plans: list[ClusterPlan]) -> int:
    if any(p.refusals for p in plans):
        return 1
    return PLAN_IN_SYNC if all(p.in_sync for p in plans) else PLAN_CHANGES


@app.command()
def apply(
    platform: PlatformOption = DEFAULT_PLATFORM,
    cluster: ClusterOption = None,
    prune: PruneOption = False,
    yes: YesOption = False,
    output: OutputOption = OutputFormat.table,
) -> None:
    """Create missing topics, add partitions and fix config drift on every cluster. Deletes only
    with --prune, after a typed confirmation (or --yes). Changes nothing if any part cannot apply."""
    platform_model = platform_to_apply(platform, keep=True)
    plans = provisioner.plan(platform_model, cluster, prune)
    deletions = [(p.cluster, c.topic) for p in plans for c in p.changes if c.kind == ChangeKind.delete]
    report = Report(output)
    report.add(_plan_section(plans))
    if deletions and not any(p.refusals for p in plans):
        confirm(platform_model.name, f"delete {len(deletions)} topic(s)", yes)
    done = provisioner.apply(platform_model, plans)
    report.say(f"applied {len(done)} change(s)" if done else "nothing to change")
    # New topics need their producers' and consumers' ACLs on secured clusters before anyone can use them.
    secured, granted = acl_provisioner.apply_secured(platform_model, cluster)
    if granted:
        report.say(f"applied {granted} ACL and user change(s) on {', '.join(secured)} (`conveyor acl plan`)")
    report.close(applied=len(done), acl_changes=granted)
