"""``connections:`` of an edge (the gateway, the dashboard, the dispatcher): how many connections
it holds and how long a new one may take to start working, so that connections that never speak
cannot take the process's file descriptors or its event loop from the clients that do."""

from __future__ import annotations

from pydantic import Field, model_validator

from conveyor.config.units import Model, Seconds


class Connections(Model):
    """The HTTP edges' bounds (the gateway and the dashboard; conveyor.edge_guard keeps them).

    The defaults fit a process whose descriptors are limited to 20,000 (``ulimit -n``, the
    platform's hosts): 10,000 connections leave the other half for the process's own (Kafka
    clients, log and state files, the watcher's scrapes) and for the connections being refused,
    each of which holds a descriptor from its accept to its close. One client address may hold a
    tenth of them: a service's pool is a few dozen connections, a host behind one address a few
    hundred, and a flood from one address leaves nine tenths for everyone else."""

    #: Connections held at once, handshakes included; one more is closed as soon as it is accepted.
    max_connections: int = Field(default=10_000, ge=1)
    #: Connections one client address holds at once; one more is closed as soon as it is accepted.
    max_per_client: int = Field(default=1_000, ge=1)
    #: Seconds from the accept to a finished TLS handshake (HTTPS only): a client that connects and
    #: never speaks TLS is closed after this.
    handshake_timeout: Seconds = Field(default=5.0, gt=0)
    #: Seconds from the accept (the handshake included) to the first request's complete line and
    #: headers: a connection that holds its place without asking anything is closed after this.
    first_request_timeout: Seconds = Field(default=10.0, gt=0)

    @model_validator(mode="after")
    def _consistent(self) -> Connections:
        if self.max_per_client > self.max_connections:
            raise ValueError(f"max_per_client ({self.max_per_client}) is above max_connections "
                             f"({self.max_connections})")
        if self.first_request_timeout < self.handshake_timeout:
            raise ValueError("first_request_timeout runs from the accept, the handshake included: it must not be "
                             f"below handshake_timeout ({self.handshake_timeout:g} s)")
        return self


class DashboardConnections(Connections):
    """The dashboard's bounds: a tenth of the gateway's, as its clients are a few browsers and a
    Prometheus."""

    max_connections: int = Field(default=1_000, ge=1)
    max_per_client: int = Field(default=100, ge=1)


class GrpcConnections(Model):
    """The dispatcher's bounds, each a setting of gRPC's C core (docs/dispatch.md says what they
    cover): it has an overall cap and a handshake deadline, and no cap per client address."""

    #: Connections held at once (``grpc.max_allowed_incoming_connections``); one more is closed as
    #: soon as it is accepted. Half the descriptors of a 20,000 limit, as for the HTTP edges.
    max_connections: int = Field(default=10_000, ge=1)
    #: Seconds from the accept to a finished handshake: TLS and the client's HTTP/2 preface and
    #: SETTINGS (``grpc.server_handshake_timeout_ms``, 120 s left alone).
    handshake_timeout: Seconds = Field(default=5.0, gt=0)
    #: A connection with no call open for this long is sent GOAWAY and closed
    #: (``grpc.max_connection_idle_ms``): a handshaken connection that never calls holds its place
    #: this long at most. Clients open a new one at their next call.
    idle_timeout: Seconds = Field(default=60.0, gt=0)
    #: Oldest a connection may get before it is sent GOAWAY (``grpc.max_connection_age_ms``); calls
    #: under way finish first. None: no age limit, since Read streams live for hours and an old
    #: connection serves as well as a new one.
    max_age: Seconds | None = Field(default=None, gt=0)
    #: Calls one connection carries at once (``grpc.max_concurrent_streams``); more wait at the
    #: client. Twice a service's Read streams on a node (max_streams_per_service), because gRPC
    #: clients in one process share a connection per node, so that no one connection takes all of
    #: the node's 512 calls.
    max_streams_per_connection: int = Field(default=256, ge=1)
    #: Seconds between the server's pings on a connection that sends nothing, and how long a ping
    #: may go unanswered before the connection is closed (``grpc.keepalive_time_ms``,
    #: ``grpc.keepalive_timeout_ms``, with ``grpc.http2.max_pings_without_data`` 0 so that pings go
    #: on while a stream has no messages): a client that vanished without closing its connection
    #: frees its Read streams and their places within a minute and a half.
    keepalive_interval: Seconds = Field(default=60.0, gt=0)
    keepalive_timeout: Seconds = Field(default=20.0, gt=0)
