"""``conveyor config check``: validate platform.yaml and summarise it."""

from __future__ import annotations

from typing import Any

import typer

from conveyor.cli.common import (DEFAULT_PLATFORM, Column, OutputFormat, OutputOption, PlatformOption, Section,
                                 StrictOption, durability_section, render)
from conveyor.config import Platform, load_platform
from conveyor.topics.lint import durability_findings

app = typer.Typer(rich_markup_mode="markdown", help="The platform file.", no_args_is_help=True)


def _clusters(model: Platform) -> list[dict[str, Any]]:
    rows = []
    for name, cluster in model.clusters.items():
        topics = []
        for topic_name, topic in model.topics_on(name).items():
            replication, min_isr = topic.replication_on(cluster)
            topics.append({"topic": topic_name, "partitions": topic.partitions, "replication_factor": replication,
                           "min_insync_replicas": min_isr})
        rows.append({"cluster": name, "role": cluster.role.value,
                     "brokers": cluster.brokers if cluster.bootstrap is None else None,
                     "bootstrap": cluster.bootstrap,
                     "racks": list(cluster.racks), "topics": topics})
    return rows


def _lake_reading(model: Platform) -> list[Section]:
    """How the lake reads each topic it lands: the gateway's verdict kept (parsed in the JVM), or
    every record checked in full; and why, from the ACLs the file asks for and the topic's contract
    file (a topic granted through the bus has its contract in the registry, read at each run)."""
    from conveyor.pipeline.errors import LakeConfigError
    from conveyor.pipeline.fast_parse import jvm_blocker
    from conveyor.pipeline.schema import contract_columns, read_schema
    from conveyor.pipeline.tables import lake_topics
    from conveyor.pipeline.trust import as_read, planned_trust

    try:
        topics = lake_topics(model)
    except LakeConfigError:  # no lake here
        return []
    rows = []
    for topic in topics:
        contract = model.topics[topic].contract is not None
        blocker = jvm_blocker(contract_columns(topic, read_schema(model, topic))) if contract else None
        trust = as_read(planned_trust(model, topic), blocker)
        rows.append({"topic": topic, "records": "verdict kept, parsed in the JVM" if trust.trusted else "checked in full",
                     "trusted": trust.trusted, "why": trust.why})
    columns = (Column("topic"), Column("records", cell=lambda r: r["records"]), Column("why", overflow="fold"))
    return [Section("lake_reading", "how the lake reads each topic it lands", columns, rows)]


def _brokers(row: dict[str, Any]) -> str:
    return str(row["brokers"]) if row["bootstrap"] is None else f"existing: {row['bootstrap']}"


def _topics(row: dict[str, Any]) -> str:
    return ", ".join(f"{t['topic']} ({t['partitions']} x {t['replication_factor']}, {t['min_insync_replicas']})"
                     for t in row["topics"])


@app.command()
def check(platform: PlatformOption = DEFAULT_PLATFORM, output: OutputOption = OutputFormat.table,
          strict: StrictOption = False) -> None:
    """Validate the platform file; print every problem with its path, or a summary: the clusters,
    how the lake reads each topic it lands (the gateway's verdict kept where only the bus may write
    the topic, else every record checked in full), and the durability warnings (settings that stop
    writes or lose records once a broker fails). Exit 2 on a problem, or with --strict on a warning."""
    model = load_platform(platform)  # the file as written, not what `conveyor up` resolved
    columns = (Column("cluster"), Column("role"), Column("brokers", cell=_brokers),
               Column("racks", cell=lambda r: ",".join(r["racks"])),
               Column("topics (partitions x RF, min ISR)", cell=_topics))
    findings = durability_findings(model)
    warnings = [durability_section(findings)] if findings or output is OutputFormat.json else []
    render(output, Section("clusters", f"{platform}: valid", columns, _clusters(model)), *_lake_reading(model),
           *warnings, platform=model.name)
    if strict and findings:
        raise typer.Exit(2)


@app.command("hash-token")
def hash_token(
    scrypt: bool = typer.Option(False, "--scrypt", help="A salted scrypt hash (token_scrypt), slow to guess from a "
                                                        "leaked file, instead of SHA-256 (token_sha256)."),
) -> None:
    """Read a service token on standard input (not an argument: it would show in `ps` and the shell's
    history) and print the line for the service's entry in platform.yaml."""
    from conveyor.auth import token_digest, token_scrypt

    token = typer.get_text_stream("stdin").readline().strip()
    if not token:
        raise typer.BadParameter("give the token on standard input, e.g. `conveyor config hash-token < token.txt`")
    typer.echo(f"token_scrypt: {token_scrypt(token)}" if scrypt else f"token_sha256: {token_digest(token)}")
