"""``conveyor topics plan`` and ``conveyor topics apply``: every topic in every cluster."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from conveyor.cli.common import DEFAULT_PLATFORM, PlatformOption, YesOption, confirm, console, platform_from
from conveyor.topics import provisioner
from conveyor.topics.plan import ChangeKind, ClusterPlan

app = typer.Typer(rich_markup_mode="markdown", help="Make every cluster's topics match platform.yaml.", no_args_is_help=True)

ClusterOption = Annotated[
    list[str] | None,
    typer.Option("--cluster", "-c", envvar="CONVEYOR_CLUSTER", help="Only this cluster (repeatable)."),
]
PruneOption = Annotated[
    bool, typer.Option("--prune", help="Also delete topics that platform.yaml does not declare.")
]


def _print_plans(plans: list[ClusterPlan]) -> None:
    table = Table(title="topics: platform.yaml against the live clusters")
    for column in ("cluster", "topic", "change", "detail"):
        table.add_column(column)
    for plan in plans:
        if plan.in_sync:
            table.add_row(plan.cluster, "", "[green]in sync[/]", "")
        for change in plan.changes:
            colour = "red" if change.kind == ChangeKind.delete else "yellow"
            table.add_row(plan.cluster, change.topic, f"[{colour}]{change.kind.value}[/]", change.detail)
        for refusal in plan.refusals:
            table.add_row(plan.cluster, refusal.topic, "[bold red]cannot apply[/]", refusal.reason)
    console.print(table)


@app.command()
def plan(
    platform: PlatformOption = DEFAULT_PLATFORM,
    cluster: ClusterOption = None,
    prune: PruneOption = False,
) -> None:
    """Show what `apply` would change: missing topics, fewer partitions than declared, config
    drift, and what Kafka cannot change. Exit status, as Terraform's -detailed-exitcode: 0 when
    every cluster matches platform.yaml, 2 when `apply` would change something, 1 on an error or
    when the plan holds something Kafka cannot apply."""
    plans = provisioner.plan(platform_from(platform), cluster, prune)
    _print_plans(plans)
    raise typer.Exit(plan_exit_code(plans))


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
) -> None:
    """Create missing topics, add partitions and fix config drift on every cluster. Deletes only
    with --prune, after a typed confirmation (or --yes). Changes nothing if any part cannot apply."""
    platform_model = platform_from(platform)
    plans = provisioner.plan(platform_model, cluster, prune)
    _print_plans(plans)
    deletions = [(p.cluster, c.topic) for p in plans for c in p.changes if c.kind == ChangeKind.delete]
    if deletions and not any(p.refusals for p in plans):
        confirm(platform_model.name, f"delete {len(deletions)} topic(s)", yes)
    done = provisioner.apply(platform_model, plans)
    console.print(f"applied {len(done)} change(s)" if done else "nothing to change")
