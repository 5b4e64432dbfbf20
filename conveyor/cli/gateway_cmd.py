"""``conveyor gateway serve|start|generate``: the HTTP produce API and its load."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from conveyor.cli.common import (DEFAULT_PLATFORM, Column, OutputFormat, OutputOption, PlatformOption, Section, console,
                                 err_console, platform_from, render, say)
from conveyor.errors import ConveyorError
from conveyor.service import serve as serve_service
from conveyor.service import wait_healthy
from conveyor.tls import base_url, trusted

app = typer.Typer(rich_markup_mode="markdown", help="The data bus gateway: services publish events over HTTP.", no_args_is_help=True)

DcOption = Annotated[str, typer.Option("--dc", envvar="CONVEYOR_DC", help="The writable cluster of this data centre.")]
PortOption = Annotated[int | None, typer.Option(envvar="CONVEYOR_GATEWAY_PORT",
                                                help="Port on 127.0.0.1 (default: gateway.port + the data "
                                                     "centre's position among writable clusters).")]


@app.command()
def serve(dc: DcOption, platform: PlatformOption = DEFAULT_PLATFORM, port: PortOption = None,
          host: Annotated[str, typer.Option(envvar="CONVEYOR_GATEWAY_HOST", help="Address to listen on.")]
          = "127.0.0.1") -> None:
    """Serve POST /v1/topics/{topic}/events, /healthz, /readyz and /metrics in the foreground.
    Answers only after Kafka acknowledged every event; fails over to the cluster's `failover`
    list. SIGTERM stops taking requests and answers those under way (up to 30 s) before exiting."""
    from conveyor.gateway.service import gateway_service

    raise typer.Exit(serve_service(gateway_service(platform_from(platform), dc, host, port)))


@app.command()
def start(dc: DcOption, platform: PlatformOption = DEFAULT_PLATFORM, port: PortOption = None) -> None:
    """Start `gateway serve` as a background service of the local platform (stopped by
    `conveyor down`) and wait until it answers /healthz."""
    from conveyor.runtime.services import service_log_tail, start_service

    from conveyor.gateway.service import check_writable

    model = platform_from(platform)
    check_writable(model, dc)
    port = port or model.gateway_port(dc)
    name = f"gateway-{dc}"
    pid, started = start_service(model, name, ["gateway", "serve", "--dc", dc, "--port", str(port),
                                               "--platform", str(platform.resolve())])
    url = base_url(model.gateway.tls, port)
    if not wait_healthy(f"{url}/healthz", 60, verify=trusted(model)):
        raise ConveyorError(f"{name} did not answer on {url}:\n{service_log_tail(model, name)}")
    console.print(f"{name} {'started' if started else 'already running'} (pid {pid}): {url}")


def generate(
    platform: PlatformOption = DEFAULT_PLATFORM,
    rate: Annotated[float, typer.Option(min=1, help="Events per second, over all gateways.")] = 5000,
    duration: Annotated[float, typer.Option(min=1, help="Seconds to run.")] = 60,
    topic: Annotated[str, typer.Option(help="Topic to publish to.")] = "ad-events",
    batch: Annotated[int, typer.Option(min=1, help="Events per request.")] = 200,
    in_flight: Annotated[int, typer.Option("--in-flight", min=1, max=256,
                                           help="Requests awaiting their answers at once, over all gateways.")] = 16,
    url: Annotated[list[str] | None, typer.Option(help="Gateway URL (repeatable; default: every local "
                                                       "gateway's default address).")] = None,
    token: Annotated[str, typer.Option(envvar="CONVEYOR_TOKEN", help="The publishing service's token.")] = "",
    seed: Annotated[int | None, typer.Option(min=0, help="Send the events of an earlier run again (its seed "
                                                         "is printed at its start); default: a new seed.")] = None,
    field: Annotated[list[str] | None, typer.Option(help="NAME=VALUE: a string field added to every event, such as "
                                                         "one a new contract version brings (repeatable).")] = None,
    output: OutputOption = OutputFormat.table,
) -> None:
    """Publish realistic ad events (page views, impressions, clicks from many sites, keyed by user)
    through the gateways at a steady rate, and print what was accepted and how fast. Each run sends
    new event ids unless `--seed` repeats a run: the lake keeps one event per id."""
    from conveyor_sdk.publisher import Publisher
    from conveyor.gateway.generate import AdTraffic, run, shortfall

    if not token:
        raise typer.BadParameter("give the publishing service's token (--token or CONVEYOR_TOKEN)")
    model = platform_from(platform)
    urls = url or [base_url(model.gateway.tls, model.gateway_port(dc)) for dc in model.writable_clusters()]
    verify = trusted(model)
    publishers = [Publisher(u, token, batch_size=batch, verify=verify) for u in urls]
    if any(not f.partition("=")[0] or "=" not in f for f in field or []):
        raise typer.BadParameter("give each field as NAME=VALUE", param_hint="--field")
    extra = dict(f.partition("=")[::2] for f in field or [])
    traffic = AdTraffic(extra=extra) if seed is None else AdTraffic(seed=seed, extra=extra)
    say(output, f"seed {traffic.seed}; rerun with --seed {traffic.seed} to send the same events")
    with Progress(TextColumn("publishing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console if output is OutputFormat.table else err_console, transient=True) as progress:
        task = progress.add_task("events", total=int(rate * duration))
        result = run(publishers, topic, rate, duration, batch, traffic,
                     progress=lambda done, total: progress.update(task, completed=done), in_flight=in_flight)
    for publisher in publishers:
        publisher.close()
    p50, p99 = result.quantile(0.5), result.quantile(0.99)
    row = {"accepted": result.accepted, "seconds": result.seconds, "events_per_s": result.rate,
           "batch_p50_ms": p50 * 1000 if p50 is not None else None,
           "batch_p99_ms": p99 * 1000 if p99 is not None else None}
    columns = (Column("accepted"), Column("seconds", cell=lambda r: f"{r['seconds']:.1f}"),
               Column("events/s", cell=lambda r: f"{r['events_per_s']:,.0f}"),
               *(Column(f"batch {q}", cell=lambda r, q=q: "" if r[f"batch_{q}_ms"] is None else f"{r[f'batch_{q}_ms']:.1f} ms")
                 for q in ("p50", "p99")))
    why = shortfall(result)
    render(output, Section("runs", f"generated {topic} through {len(urls)} gateway(s)", columns, [row]),
           topic=topic, gateways=urls, seed=traffic.seed, asked_rate=rate, in_flight=in_flight, shortfall=why)
    if why:
        err_console.print(f"[yellow]{escape(why)}[/]", soft_wrap=True, highlight=False)
