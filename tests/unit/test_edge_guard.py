"""The edges' guard, its pure parts: places held overall and per client address, the refusals' log
line once a minute at most, the settings' rules and the gRPC options they become. No server."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from conveyor.config import parse_platform
from conveyor.config.edge import Connections, GrpcConnections
from conveyor.dispatch.server import grpc_options
from conveyor.edge_guard import CAP_PER_CLIENT, CAP_TOTAL, ConnectionBook, RefusalLog

A, B, C = "10.0.0.1", "10.0.0.2", "2001:db8::1"

#: (case, max_total, max_per_client, steps): a step admits ("+", client, the refusal expected or
#: None) or releases ("-", client); then the places held overall and per address.
BOOK_CASES = [
    ("under both caps", 3, 2, [("+", A, None), ("+", B, None)], 2, {A: 1, B: 1}),
    ("an address at its cap is refused, another is not", 5, 2,
     [("+", A, None), ("+", A, None), ("+", A, CAP_PER_CLIENT), ("+", B, None)], 3, {A: 2, B: 1}),
    ("the overall cap refuses an address under its own", 3, 2,
     [("+", A, None), ("+", A, None), ("+", B, None), ("+", C, CAP_TOTAL)], 3, {A: 2, B: 1}),
    ("an address at its cap is refused for that, with the overall cap met too", 2, 2,
     [("+", A, None), ("+", A, None), ("+", A, CAP_PER_CLIENT), ("+", B, CAP_TOTAL)], 2, {A: 2}),
    ("a refusal takes no place", 2, 1, [("+", A, None), ("+", A, CAP_PER_CLIENT), ("+", A, CAP_PER_CLIENT),
                                        ("+", B, None)], 2, {A: 1, B: 1}),
    ("a release frees a place of both caps", 2, 2,
     [("+", A, None), ("+", A, None), ("+", B, CAP_TOTAL), ("-", A), ("+", B, None), ("+", A, CAP_TOTAL)],
     2, {A: 1, B: 1}),
    ("an address that holds nothing is forgotten", 4, 2, [("+", A, None), ("+", B, None), ("-", A)], 1, {B: 1}),
    ("IPv6 addresses count as any other", 4, 1, [("+", C, None), ("+", C, CAP_PER_CLIENT)], 1, {C: 1}),
]


@pytest.mark.parametrize("max_total, max_per_client, steps, total, per_client",
                         [case[1:] for case in BOOK_CASES], ids=[case[0] for case in BOOK_CASES])
def test_the_book_admits_within_both_caps_and_says_which_refused(max_total, max_per_client, steps, total,
                                                                  per_client):
    book = ConnectionBook(max_total, max_per_client)
    for step in steps:
        if step[0] == "+":
            assert book.admit(step[1]) == step[2], step
        else:
            book.release(step[1])
    assert (book.total, dict(book.per_client)) == (total, per_client)


def test_releasing_a_place_never_taken_is_an_error_not_a_negative_count():
    book = ConnectionBook(2, 2)
    book.admit(A)
    with pytest.raises(ValueError, match=B):
        book.release(B)
    assert (book.total, dict(book.per_client)) == (1, {A: 1})


def test_the_book_counts_the_addresses_at_their_cap():
    book = ConnectionBook(10, 2)
    for client in (A, A, B, C, C):
        book.admit(client)
    assert book.at_cap() == 2


#: (case, steps, lines): a step records a refusal at a time ((t, reason)) or flushes ((t, None));
#: the lines are (t, line) of every step that gave one.
LOG_CASES = [
    ("the first refusal is logged at once", [(0, CAP_TOTAL)], [(0, "closed 1 connection: cap_total 1")]),
    ("refusals within the minute wait for it, and come in one line with their counts",
     [(0, CAP_TOTAL), (1, CAP_PER_CLIENT), (2, CAP_PER_CLIENT), (30, "handshake_deadline"), (59.9, None),
      (60, None)],
     [(0, "closed 1 connection: cap_total 1"),
      (60, "closed 3 connections in 59 s: cap_per_client 2, handshake_deadline 1")]),
    ("a refusal at the minute is logged with those before it",
     [(0, CAP_TOTAL), (10, CAP_TOTAL), (60, "request_deadline")],
     [(0, "closed 1 connection: cap_total 1"), (60, "closed 2 connections in 50 s: cap_total 1, request_deadline 1")]),
    ("nothing pending, nothing to log", [(0, CAP_TOTAL), (60, None), (600, None)],
     [(0, "closed 1 connection: cap_total 1")]),
    ("after a quiet spell the first refusal is logged at once again",
     [(0, CAP_TOTAL), (5, CAP_TOTAL), (61, None), (500, CAP_PER_CLIENT)],
     [(0, "closed 1 connection: cap_total 1"), (61, "closed 1 connection in 56 s: cap_total 1"),
      (500, "closed 1 connection: cap_per_client 1")]),
    ("a minute from the last line, not from the first refusal",
     [(0, CAP_TOTAL), (70, CAP_TOTAL), (100, CAP_TOTAL), (129, None), (130, None)],
     [(0, "closed 1 connection: cap_total 1"), (70, "closed 1 connection: cap_total 1"),
      (130, "closed 1 connection in 30 s: cap_total 1")]),
    ("thousands a second make one line a minute",
     [*((t / 1000, CAP_PER_CLIENT) for t in range(0, 60_000)), (60, None)],
     [(0, "closed 1 connection: cap_per_client 1"), (60, "closed 59,999 connections in 60 s: cap_per_client 59,999")]),
]


@pytest.mark.parametrize("steps, lines", [case[1:] for case in LOG_CASES], ids=[case[0] for case in LOG_CASES])
def test_refusals_are_logged_in_one_line_a_minute_at_most(steps, lines):
    log = RefusalLog(every=60)
    logged = []
    for at, reason in steps:
        line = log.flush(at) if reason is None else log.record(reason, at)
        if line is not None:
            logged.append((at, line))
    assert logged == lines


@pytest.mark.parametrize("last, now, due", [(None, 5, 0.0), (0, 5, 55.0), (0, 60, 0.0), (10, 200, 0.0)])
def test_the_next_line_is_due_a_minute_after_the_last(last, now, due):
    log = RefusalLog(every=60)
    if last is not None:
        log.record(CAP_TOTAL, last)
    assert log.due_in(now) == due


@pytest.mark.parametrize("settings, problem", [
    ({"max_connections": 100, "max_per_client": 101}, "max_per_client"),
    ({"handshake_timeout": "10s", "first_request_timeout": "5s"}, "first_request_timeout"),
    ({"max_connections": 0}, "max_connections"),
    ({"handshake_timeout": 0}, "handshake_timeout"),
])
def test_connection_settings_that_cannot_hold_are_refused(settings, problem):
    with pytest.raises(ValidationError, match=problem):
        Connections(**settings)


def test_every_edge_has_its_connection_bounds_in_platform_yaml():
    platform = parse_platform({"clusters": {"c": {"role": "writable"}},
                               "gateway": {"connections": {"max_per_client": 50, "handshake_timeout": "2s"}},
                               "ops": {"connections": {"first_request_timeout": "20s"}},
                               "dispatch": {"connections": {"max_connections": 500, "max_age": "1h"}}})
    assert platform.gateway.connections == Connections(max_per_client=50, handshake_timeout=2.0)
    assert (platform.ops.connections.max_connections, platform.ops.connections.max_per_client,
            platform.ops.connections.first_request_timeout) == (1_000, 100, 20.0)
    assert (platform.dispatch.connections.max_connections, platform.dispatch.connections.max_age) == (500, 3600.0)
    with pytest.raises(ValidationError, match="max_per_client"):  # no per-address cap in gRPC: not a setting
        GrpcConnections(max_per_client=10)


def test_the_dispatcher_s_bounds_become_grpc_s_own_options():
    options = dict(grpc_options(GrpcConnections(max_connections=2_000, handshake_timeout=2.5, max_age=600)))
    assert options == {"grpc.max_allowed_incoming_connections": 2_000, "grpc.server_handshake_timeout_ms": 2_500,
                       "grpc.max_connection_idle_ms": 60_000, "grpc.max_concurrent_streams": 256,
                       "grpc.keepalive_time_ms": 60_000, "grpc.keepalive_timeout_ms": 20_000,
                       "grpc.http2.max_pings_without_data": 0, "grpc.max_connection_age_ms": 600_000}
    assert "grpc.max_connection_age_ms" not in dict(grpc_options(GrpcConnections()))


def test_an_edge_runs_as_a_service_until_stopped_and_a_taken_port_is_its_exit_status() -> None:
    """The gateway's and the watch service's lifecycle (conveyor.service): run serves until stop,
    then returns 0; a port already taken ends the run at once with uvicorn's failure status."""
    import threading

    import httpx
    from fastapi import FastAPI
    from prometheus_client import CollectorRegistry

    from conveyor.config.edge import DashboardConnections
    from conveyor.edge_guard import EdgeGuard, GuardedServer, ServedEdge, guarded_config
    from tests.conftest import eventually, free_port

    app = FastAPI()
    app.get("/healthz")(lambda: {"status": "ok"})
    port = free_port()

    def edge() -> ServedEdge:
        guard = EdgeGuard("test", DashboardConnections())
        return ServedEdge(GuardedServer(guarded_config(app, "127.0.0.1", port), guard), CollectorRegistry(),
                          lambda: (True, {"port": port}))

    service, status = edge(), []
    thread = threading.Thread(target=lambda: status.append(service.run()), daemon=True)
    thread.start()
    try:
        eventually(lambda: service.server.started, 30, "the edge to serve", interval=0.05)
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).json() == {"status": "ok"}
        assert service.health() == (True, {"port": port})
        assert edge().run() != 0  # the port is this one's
    finally:
        service.stop()
        thread.join(30)
    assert status == [0] and not thread.is_alive()
