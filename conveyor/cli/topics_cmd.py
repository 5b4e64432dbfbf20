"""``conveyor topics plan``, ``apply``, ``request``, ``registrar`` and ``contract``: every topic in every
cluster, topics asked for through the bus and the service that grants them, and their contracts'
versions."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from conveyor.cli.common import (DEFAULT_METRICS_HOST, DEFAULT_PLATFORM, Column, MetricsHostOption, MetricsPortOption,
                                 OutputFormat, OutputOption, PlatformOption, Report, Section, StrictOption, YesOption,
                                 confirm, console, durability_section, platform_from, platform_with_granted, render)
from conveyor.acls import provisioner as acl_provisioner
from conveyor.bus.registry import register_contract_files
from conveyor.config import Delivery, Platform
from conveyor.topics import provisioner
from conveyor.topics.lint import durability_findings
from conveyor.topics.plan import ChangeKind, ClusterPlan
from conveyor.topics.quotas import QuotaPlan, apply_quotas, plan_quotas

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
    return Section("changes", "topics: platform.yaml and the granted requests against the live clusters", _COLUMNS,
                   _plan_rows(plans))


def _topics_section(platform: Platform) -> Section:
    rows = [{"topic": name, "delivery": topic.delivery.value, "partitions": topic.partitions,
             "declared_in": f"a request (by {topic.requested_by})" if topic.requested_by else "platform.yaml"}
            for name, topic in sorted(platform.topics.items())]
    return Section("topics", "topics and what each promises", (Column("topic"), Column("delivery"),
                   Column("partitions"), Column("declared in", "declared_in")), rows)


def _rate(rate: int | None) -> str:
    return "none" if rate is None else f"{rate / 1024 / 1024:g} MiB/s"


def _quota_section(plans: list[QuotaPlan]) -> Section:
    rows = [{"cluster": p.cluster, "now": _rate(p.current), "wanted": _rate(p.wanted),
             "change": IN_SYNC if p.in_sync else "set"} for p in plans]
    return Section("quotas", "producer quota per producer and broker (clients with no quota of their own)",
                   (Column("cluster"), Column("now"), Column("wanted"),
                    Column("change", cell=lambda r: f"[{_STYLE.get(r['change'], 'yellow')}]{r['change']}[/]")), rows)


def _budget_section(plans: list[ClusterPlan]) -> Section:
    rows = [{"cluster": p.cluster, "partitions": p.budget.held, "after_apply": p.budget.after,
             "budget": p.budget.limit} for p in plans if p.budget is not None]
    def over(row: dict[str, int]) -> str:
        return "bold red" if row["after_apply"] > row["budget"] else "green"

    return Section("budgets", "partitions against each cluster's partition budget",
                   (Column("cluster"), Column("partitions", cell=lambda r: f"{r['partitions']:,}"),
                    Column("after apply", cell=lambda r: f"[{over(r)}]{r['after_apply']:,}[/]"),
                    Column("budget", cell=lambda r: f"{r['budget']:,}")), rows)


@app.command()
def plan(
    platform: PlatformOption = DEFAULT_PLATFORM,
    cluster: ClusterOption = None,
    prune: PruneOption = False,
    output: OutputOption = OutputFormat.table,
    strict: StrictOption = False,
) -> None:
    """Show what `apply` would change: missing topics, fewer partitions than declared, config
    drift, a producer quota to set, and what Kafka cannot change; then the durability warnings
    (settings that stop writes or lose records once a broker fails). Exit status, as Terraform's
    -detailed-exitcode: 0 when every cluster matches platform.yaml, 2 when `apply` would change
    something, 1 on an error, when the plan holds something Kafka cannot apply, or with --strict on
    a warning."""
    model = platform_with_granted(platform, keep=False)
    plans = provisioner.plan(model, cluster, prune)
    quotas = plan_quotas(model, cluster)
    findings = [f for f in durability_findings(model) if not cluster or f.cluster in cluster]
    code = 1 if strict and findings else plan_exit_code(plans)
    if code == PLAN_IN_SYNC and not all(q.in_sync for q in quotas):
        code = PLAN_CHANGES
    warnings = [durability_section(findings)] if findings or output is OutputFormat.json else []
    quota_sections = [_quota_section(quotas)] if quotas or output is OutputFormat.json else []
    render(output, _topics_section(model), _plan_section(plans), _budget_section(plans), *quota_sections, *warnings,
           exit_code=code)
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
    """Create missing topics, add partitions, fix config drift and set producer quotas on every
    cluster. Deletes only with --prune, after a typed confirmation (or --yes). Changes nothing if
    any part cannot apply."""
    platform_model = platform_with_granted(platform, keep=True)
    plans = provisioner.plan(platform_model, cluster, prune)
    deletions = [(p.cluster, c.topic) for p in plans for c in p.changes if c.kind == ChangeKind.delete]
    report = Report(output)
    report.add(_plan_section(plans))
    report.add(_budget_section(plans))
    if deletions and not any(p.refusals for p in plans):
        confirm(platform_model.name, f"delete {len(deletions)} topic(s)", yes)
    quotas = plan_quotas(platform_model, cluster)
    if quotas:
        report.add(_quota_section(quotas))
    done = provisioner.apply(platform_model, plans)
    report.say(f"applied {len(done)} change(s)" if done else "nothing to change")
    quotas_set = apply_quotas(platform_model, quotas)
    if quotas_set:
        report.say(f"set the producer quota on {', '.join(q.cluster for q in quotas_set)}")
    # New topics need their producers' and consumers' ACLs on secured clusters before anyone can use them.
    secured, granted = acl_provisioner.apply_secured(platform_model, cluster)
    if granted:
        report.say(f"applied {granted} ACL and user change(s) on {', '.join(secured)} (`conveyor acl plan`)")
    registered = register_contract_files(platform_model)
    if registered:
        report.say("registered contract version(s): " + ", ".join(f"{v.subject} {v.version} (id {v.id})"
                                                                  for v in registered))
    report.close(applied=len(done), acl_changes=granted, quotas_set=len(quotas_set))


@app.command()
def request(
    topic: Annotated[str, typer.Argument(help="The new topic's name.")],
    contract: Annotated[Path, typer.Option(help="The topic's JSON Schema (draft 2020-12), as a contract file holds it.",
                                           exists=True, dir_okay=False)],
    rate: Annotated[float, typer.Option(help="Events per second the producers expect to send: the partitions "
                                             "follow from it (9 unless it asks for more).")],
    consumer: Annotated[list[str] | None, typer.Option(help="A service that reads the topic (repeatable).")] = None,
    producer: Annotated[list[str] | None, typer.Option(help="A service that publishes besides the one asking "
                                                            "(repeatable).")] = None,
    retention: Annotated[str, typer.Option(help="How long records are kept (7d, 12h...).")] = "7d",
    delivery: Annotated[Delivery, typer.Option(help="exact (each event once: a loss or a copy pages) or at_least_once "
                                                    "(copies kept, a loss warns).")] = Delivery.exact,
    requester: Annotated[str | None, typer.Option(
        "--as", help="Ask as the platform's admin, on behalf of this service, and grant it here at once.")] = None,
    gateway: Annotated[str | None, typer.Option(
        help="Ask the gateway at this URL instead (POST /v1/topics), as the service --token names.")] = None,
    token: Annotated[str, typer.Option(envvar="CONVEYOR_TOKEN", help="The asking service's token (with --gateway).")] = "",
    wait: Annotated[float, typer.Option(help="Seconds to wait for the registrar's decision (with --gateway).")] = 120,
    platform: PlatformOption = DEFAULT_PLATFORM,
    output: OutputOption = OutputFormat.table,
) -> None:
    """Ask for a topic through the bus. The request is recorded in the contract registry; the
    registrar (`conveyor topics registrar`, holding the admin credentials) creates the topic on
    every cluster with its configs and ACLs, registers its contract as version 1, and grants it;
    every gateway then serves it and every route that takes requested topics copies it. Refused
    with the figures when a cap of topic_requests or a cluster's partition budget would be passed.
    Asking again for the same topic changes nothing."""
    import json

    if (gateway is None) == (requester is None):
        raise typer.BadParameter("give --as SERVICE (granted here) or --gateway URL with --token (asked of the gateway)")
    try:
        schema = json.loads(contract.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise typer.BadParameter(f"{contract} is not JSON: {err}", param_hint="--contract") from None
    body = {"topic": topic, "contract": schema, "expected_rate": rate, "consumers": consumer or [],
            "producers": producer or [], "retention": retention, "delivery": delivery.value}
    model = platform_from(platform)
    granted = _ask_gateway(model, gateway, token, body, wait) if gateway is not None \
        else _grant_here(model, body, requester or "")
    rows = [{"topic": granted["topic"], "partitions": granted["partitions"], "clusters": ", ".join(granted["clusters"]),
             "routes": ", ".join(granted["routes"]) or "none", "requested_by": granted["requested_by"]}]
    render(output, Section("granted", "topic granted" if granted["new"] else "topic granted before; nothing changed",
                           (Column("topic"), Column("partitions"), Column("clusters"), Column("routes"),
                            Column("requested by", "requested_by")), rows), new=granted["new"])


def _grant_here(model: Platform, body: dict[str, Any], requester: str) -> dict[str, Any]:
    """Record the request as the platform's admin and decide it at once, as the registrar does."""
    import logging
    from datetime import datetime, timezone

    from conveyor.registrar import Registrar
    from conveyor.bus.registry_state import RequestState
    from conveyor.bus.requests import InvalidRequest, RefusedBefore, granted, new_record, read_request
    from conveyor.errors import ConveyorError

    logging.getLogger("conveyor.registrar").setLevel(logging.WARNING)  # the outcome is this command's output
    registrar = Registrar(model, "conveyor-topics-request")
    registrar.start()
    try:
        try:
            asked = new_record(read_request(body), requester, model, datetime.now(timezone.utc))
        except InvalidRequest as err:
            raise typer.BadParameter(str(err)) from None
        held, new = registrar.registry.submit(asked)
        record = held if held.state != RequestState.pending else (
            registrar.decide(held) or registrar.registry.wait_decided(held.topic, 30))
        if record is None:
            raise ConveyorError(f"topic {held.topic}: a cluster or the registry did not answer; the request stays "
                                "recorded, ask again or let `conveyor topics registrar` finish it")
        if record.refusal is not None:
            raise RefusedBefore(record.refusal)
        return granted(model, record, new).body()
    finally:
        registrar.stop()


@app.command()
def contract(
    topic: Annotated[str, typer.Argument(help="The topic whose contract to show or change.")],
    schema: Annotated[Path | None, typer.Option(help="Register this JSON Schema as the topic's next contract version "
                                                     "(held to the topic's compatibility rule and to what its sinks "
                                                     "can take). Without it: list the versions.",
                                                exists=True, dir_okay=False)] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only check --schema; register nothing.")] = False,
    gateway: Annotated[str, typer.Option(help="A gateway's URL: the registry is served by every gateway.")] = "",
    token: Annotated[str, typer.Option(envvar="CONVEYOR_TOKEN", help="A token: any service's to list, a producer's "
                                                                     "of the topic (or the admin's) to register.")] = "",
    platform: PlatformOption = DEFAULT_PLATFORM,
    output: OutputOption = OutputFormat.table,
) -> None:
    """A topic's contract versions in the registry, or its next version registered. A version
    that breaks the rule or a sink is refused, naming the field and its old and new types, and
    nothing changes anywhere (exit 1). Every gateway enforces a new version within seconds."""
    import json

    if not gateway:
        raise typer.BadParameter("give a gateway's URL (--gateway https://host:port)")
    model = platform_from(platform)
    if schema is None:
        subject = f"{topic}-value"
        numbers = _gateway_call(model, gateway, token, "GET", f"/subjects/{subject}/versions")
        rows = []
        for number in numbers:
            version = _gateway_call(model, gateway, token, "GET", f"/subjects/{subject}/versions/{number}")
            fields = json.loads(version["schema"]).get("properties") or {}
            rows.append({"version": version["version"], "id": version["id"], "fields": ", ".join(fields)})
        render(output, Section("versions", f"contract versions of {topic}",
                               (Column("version"), Column("id"), Column("fields")), rows))
        return
    try:
        body = json.loads(schema.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise typer.BadParameter(f"{schema} is not JSON: {err}", param_hint="--schema") from None
    answer = _gateway_call(model, gateway, token, "POST", f"/v1/topics/{topic}/contract" + ("?dry_run=true" if dry_run
                                                                                             else ""), body)
    if dry_run:
        title = f"compatible under rule {answer['rule']}; nothing registered"
        rows = [{"topic": topic, "version": "(not registered)", "id": ""}]
    else:
        title = "registered" if answer["created"] else "already registered; nothing changed"
        rows = [{"topic": topic, "version": answer["version"], "id": answer["id"]}]
    render(output, Section("contract", title, (Column("topic"), Column("version"), Column("id")), rows))


def _ask_gateway(model: Platform, gateway: str, token: str, body: dict[str, Any], wait: float) -> dict[str, Any]:
    """The gateway's grant; while it answers pending (202), its request's state polled until decided."""
    import time

    from conveyor.errors import ConveyorError

    answer = _gateway_call(model, gateway, token, "POST", "/v1/topics", body)
    deadline = time.monotonic() + wait
    while answer.get("state") == "pending":
        if time.monotonic() > deadline:
            raise ConveyorError(f"topic {body['topic']}: the request is recorded but not decided after {wait:g} s; is "
                                "the registrar running? (`conveyor topics registrar`)")
        time.sleep(1)
        answer = {**_gateway_call(model, gateway, token, "GET", answer["poll"]), "new": True}
    if answer.get("state") == "refused":
        raise ConveyorError(f"the gateway refused: {answer['refusal']['message']}")
    return answer


def _gateway_call(model: Platform, gateway: str, token: str, method: str, path: str, body: Any = None) -> Any:
    import httpx

    from conveyor.errors import ConveyorError
    from conveyor.tls import trusted

    if not token:
        raise typer.BadParameter("give a service's token (--token or CONVEYOR_TOKEN)")
    url = f"{gateway.rstrip('/')}{path}"
    try:
        answer = httpx.request(method, url, json=body, headers={"Authorization": f"Bearer {token}"}, timeout=120,
                               verify=trusted(model))
    except httpx.HTTPError as err:
        raise ConveyorError(f"the gateway at {url} did not answer ({err}); is it running? (`conveyor status`)") from None
    if answer.status_code not in (200, 201, 202):
        try:
            message = answer.json().get("message", answer.text)
        except ValueError:
            message = answer.text
        raise ConveyorError(f"the gateway refused: {method} {path} ({answer.status_code}): {message}")
    return answer.json()


@app.command()
def registrar(
    platform: PlatformOption = DEFAULT_PLATFORM,
    once: Annotated[bool, typer.Option("--once", help="Decide what is pending, then exit.")] = False,
    metrics_port: MetricsPortOption = None,
    metrics_host: MetricsHostOption = DEFAULT_METRICS_HOST,
) -> None:
    """Grant the topics services request through the bus (the platform's one holder of the admin
    credentials for it): each pending request in the contract registry is checked against the
    clusters' partition budgets, created on every cluster with its configs and ACLs, its contract
    registered as version 1, then granted; a registrar stopped half-way leaves it pending and the
    next one finishes it. Runs until SIGTERM; serves /metrics and /healthz with --metrics-port."""
    from conveyor.registrar import Registrar
    from conveyor.service import Endpoint, Loop, serve

    service = Registrar(platform_from(platform))
    raise typer.Exit(serve(Loop(service.metrics, lambda stop: service.run(stop, once), service.health),
                           Endpoint(metrics_host, metrics_port)))


@app.command("registrar-start")
def registrar_start(platform: PlatformOption = DEFAULT_PLATFORM, metrics_port: MetricsPortOption = None) -> None:
    """Start the registrar as a background service of the local platform (stopped by `conveyor down`)."""
    from conveyor.runtime.services import start_service

    model = platform_from(platform)
    args = ["topics", "registrar", "--platform", str(platform.resolve())]
    if metrics_port is not None:
        args += ["--metrics-port", str(metrics_port)]
    pid, started = start_service(model, "registrar", args)
    console.print(f"registrar {'started' if started else 'already running'} (pid {pid})")
