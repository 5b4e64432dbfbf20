"""``conveyor dispatch serve`` and ``locate``: the consumer dispatcher (docs/dispatch.md)."""

from __future__ import annotations

import threading
from typing import Annotated

import typer

from conveyor.cli.common import DEFAULT_PLATFORM, PlatformOption, console, platform_from
from conveyor.service import serve as serve_service

app = typer.Typer(help="The consumer dispatcher: many clients per partition over gRPC.", no_args_is_help=True)

TokenOption = Annotated[str, typer.Option("--token", envvar="CONVEYOR_TOKEN", help="The service token.")]
NodesOption = Annotated[list[str], typer.Option("--node", "-n", envvar="CONVEYOR_DISPATCH_NODES",
                                                help="A dispatcher address host:port (repeatable).")]


@app.command()
def serve(
    platform: PlatformOption = DEFAULT_PLATFORM,
    port: Annotated[int | None, typer.Option(envvar="CONVEYOR_DISPATCH_PORT",
                                             help="gRPC port (default: dispatch.port).")] = None,
    metrics_port: Annotated[int | None, typer.Option(envvar="CONVEYOR_DISPATCH_METRICS_PORT",
                                                     help="/metrics and /healthz (default: dispatch.metrics_port).")] = None,
    host: Annotated[str, typer.Option(envvar="CONVEYOR_DISPATCH_HOST", help="Address to listen on.")] = "127.0.0.1",
    metrics_host: Annotated[str | None, typer.Option(help="Address of /metrics and /healthz (default: --host).")] = None,
    advertise: Annotated[str | None, typer.Option(envvar="CONVEYOR_DISPATCH_ADVERTISE",
                                                  help="host:port clients reach this node at (default: host:port).")] = None,
) -> None:
    """Serve Discovery and Reader over gRPC for every (topic, group) clients ask for, with the
    standard gRPC health service and reflection. SIGTERM commits every partition's acks and leaves
    the groups before exiting."""
    from conveyor.bus.registry import with_granted
    from conveyor.dispatch.server import DispatchNode

    # Topics granted through the bus as of the start: their consumers read them here too.
    node = DispatchNode(with_granted(platform_from(platform)), host=host, port=port, metrics_port=metrics_port, advertise=advertise,
                        metrics_host=metrics_host)
    raise typer.Exit(serve_service(node))  # the node serves its own /metrics: it knows its port


@app.command()
def locate(
    topic: Annotated[str, typer.Argument(help="The topic.")],
    group: Annotated[str, typer.Argument(help="The group: <service> or <service>.<name>.")],
    nodes: NodesOption,
    token: TokenOption,
) -> None:
    """Print the dispatcher nodes that serve TOPIC for GROUP (asking one of --node)."""
    from conveyor_sdk.subscriber import locate as locate_nodes

    for address in locate_nodes(nodes, topic, group, token):
        console.print(address)


@app.command()
def demo(
    platform: PlatformOption = DEFAULT_PLATFORM,
    messages: Annotated[int, typer.Option(help="Notifications to produce first.")] = 20_000,
    workers: Annotated[int, typer.Option(help="Handler threads of the mailer.")] = 20,
    handle_ms: Annotated[float, typer.Option(help="Time the mailer takes per notification.")] = 5.0,
    seconds: Annotated[float, typer.Option(help="Give up once no notification was handled for this long.")] = 120.0,
    token: Annotated[str, typer.Option(envvar="CONVEYOR_TOKEN", help="The mailer's token.")] = "demo-mailer-token",
    port: Annotated[int | None, typer.Option(help="gRPC port (default: dispatch.port).")] = None,
    metrics_port: Annotated[int | None, typer.Option(help="Metrics port (default: dispatch.metrics_port).")] = None,
) -> None:
    """Produce notifications, serve them from a dispatcher node, and consume them as the service
    mailer with WORKERS threads on the 3-partition topic; print throughput and backlog each second.
    It ends once mailer has read everything and committed it; it fails when mailer stopped making
    progress and left notifications unread."""
    import time

    import grpc

    from conveyor_sdk.subscriber import Message, Subscriber
    from conveyor.dispatch.demo import produce_notifications, unread_records
    from conveyor.dispatch.errors import DispatchError
    from conveyor.tls import trusted_pem
    from conveyor.dispatch.server import DispatchNode

    model = platform_from(platform)
    node = DispatchNode(model, port=port, metrics_port=metrics_port)
    produce_notifications(model, node.cluster, messages)
    console.print(f"produced {messages} notifications to {node.cluster}; serving them from {node.advertise}")
    handled = [0]
    lock = threading.Lock()

    def mail(_: Message) -> None:
        time.sleep(handle_ms / 1000)
        with lock:
            handled[0] += 1

    node.start()
    started = progressed = time.monotonic()
    try:
        credentials = grpc.ssl_channel_credentials(trusted_pem(model)) if model.dispatch.tls is not None else None
        with Subscriber("notifications", "mailer", mail, workers, nodes=[node.advertise], token=token,
                        credentials=credentials) as sub:
            backlog, previous = None, 0
            # However long a busy machine takes, the mailer reads to the end: a group that stops
            # with records past its commit is STOP to the watcher (Burrow's rules), a real alert
            # for a consumer gone. So only a mailer that no longer makes progress gives up.
            while time.monotonic() - progressed < seconds and sub.error is None:
                time.sleep(1)
                backlog = node.metrics.registry.get_sample_value(
                    "conveyor_dispatch_backlog", {"topic": "notifications", "group": "mailer"})
                done = handled[0]
                console.print(f"{time.monotonic() - started:5.0f} s  handled {done:>7}  "
                              f"{done - previous:>6}/s  backlog {backlog if backlog is not None else '?'}")
                if done > previous:
                    progressed = time.monotonic()
                previous = done
                if done >= messages and backlog == 0:
                    break
            if sub.error is not None:
                raise sub.error
    finally:
        node.close(grace=2)
    elapsed = time.monotonic() - started
    console.print(f"mailer handled {handled[0]} notifications in {elapsed:.1f} s "
                  f"({handled[0] / elapsed:.0f}/s with {workers} workers at {handle_ms} ms each); "
                  f"backlog {backlog}")
    # The node's close made its last commit: ask Kafka, whose commits the watcher judges.
    left = unread_records(model, node.cluster, "notifications", "mailer")
    if left:
        per_partition = ", ".join(f"partition {p}: {n:,}" for p, n in sorted(left.items()))
        raise DispatchError(
            f"mailer stopped with {sum(left.values()):,} notification(s) past its commit ({per_partition}); the "
            "watcher judges a group that no longer commits while records wait as STOP, a critical alert. Read "
            "them with `conveyor dispatch demo --messages 0`, or see above why the mailer made no progress")
    console.print("mailer committed every partition of notifications to its end (lag 0)")
