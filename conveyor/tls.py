"""TLS of the HTTP edges (the gateway, the dashboard): what a server presents and what Conveyor's
own clients trust, from a ``tls:`` section of platform.yaml."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

from conveyor.config import Platform
from conveyor.config.tls import Tls
from conveyor.runtime.security import local_security


@dataclass(frozen=True)
class ServerTls:
    cert: Path
    key: Path


def server_tls(platform: Platform, tls: Tls | None) -> ServerTls | None:
    """The certificate and key a server presents (None: plain HTTP)."""
    if tls is None:
        return None
    if tls.cert is not None and tls.key is not None:
        return ServerTls(platform.resolve(tls.cert), platform.resolve(tls.key))
    return ServerTls(*local_security(platform.home).server_certificate())


def base_url(tls: Tls | None, port: int, host: str = "127.0.0.1") -> str:
    return f"{'https' if tls is not None else 'http'}://{host}:{port}"


def trusted(platform: Platform) -> ssl.SSLContext:
    """What Conveyor's own HTTPS clients trust: the system's authorities, and the local runtime's
    CA once it exists (it issues the demo's certificates)."""
    context = ssl.create_default_context()
    ca = local_security(platform.home).ca_cert
    if ca.exists():
        context.load_verify_locations(cafile=str(ca))
    return context


def trusted_pem(platform: Platform) -> bytes | None:
    """The local CA's certificate for gRPC clients (None: the system's authorities)."""
    ca = local_security(platform.home).ca_cert
    return ca.read_bytes() if ca.exists() else None


def uvicorn_tls(served: ServerTls | None) -> dict[str, str]:
    """uvicorn.run's certificate settings."""
    return {} if served is None else {"ssl_certfile": str(served.cert), "ssl_keyfile": str(served.key)}
