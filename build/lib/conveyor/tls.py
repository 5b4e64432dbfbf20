"""TLS of the edges (the gateway, the dashboard, the dispatcher): what a server presents and what
Conveyor's own clients trust, from the ``tls:`` sections of platform.yaml."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

from conveyor.config import NotSetError, Platform
from conveyor.config.tls import Tls


@dataclass(frozen=True)
class ServerTls:
    cert: Path
    key: Path


def server_tls(platform: Platform, tls: Tls | None) -> ServerTls | None:
    """The certificate and key a server presents (None: plain HTTP): its section's, else the
    platform's (the top-level ``tls:``)."""
    if tls is None:
        return None
    chosen = tls if tls.cert is not None else platform.tls
    if chosen is None or chosen.cert is None or chosen.key is None:
        raise NotSetError("tls.cert", "an edge serves TLS with no cert and key of its own: give them in its tls: "
                                      "or platform.yaml's top-level tls:, or run `conveyor up` to have its local "
                                      "authority issue them")
    return ServerTls(platform.resolve(chosen.cert), platform.resolve(chosen.key))


def base_url(tls: Tls | None, port: int, host: str = "127.0.0.1") -> str:
    return f"{'https' if tls is not None else 'http'}://{host}:{port}"


def _authorities(platform: Platform) -> list[Path]:
    """The private authorities platform.yaml names: the top-level tls: section's and each edge's."""
    sections = (platform.tls, platform.gateway.tls, platform.ops.tls, platform.dispatch.tls)
    return list(dict.fromkeys(platform.resolve(s.ca) for s in sections if s is not None and s.ca is not None))


def trusted(platform: Platform) -> ssl.SSLContext:
    """What Conveyor's own HTTPS clients trust: the system's authorities and the platform's own."""
    context = ssl.create_default_context()
    for ca in _authorities(platform):
        context.load_verify_locations(cafile=str(ca))
    return context


def trusted_pem(platform: Platform) -> bytes | None:
    """The platform's authorities for gRPC clients (None: the system's)."""
    return b"".join(ca.read_bytes() for ca in _authorities(platform)) or None


def uvicorn_tls(served: ServerTls | None) -> dict[str, str]:
    """uvicorn.run's certificate settings."""
    return {} if served is None else {"ssl_certfile": str(served.cert), "ssl_keyfile": str(served.key)}
