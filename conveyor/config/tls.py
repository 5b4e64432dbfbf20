"""``tls:`` of a service that others connect to (the gateway, the dashboard)."""

from __future__ import annotations

from pydantic import model_validator

from conveyor.config.units import Model


class Tls(Model):
    """Serve HTTPS with this certificate and key (PEM files, relative to platform.yaml). Given
    neither, the local runtime's certificate authority issues one for 127.0.0.1 and localhost, and
    Conveyor's own clients trust that authority (the demo)."""

    cert: str | None = None
    key: str | None = None

    @model_validator(mode="after")
    def _both_or_neither(self) -> Tls:
        if (self.cert is None) != (self.key is None):
            raise ValueError("give both cert and key, or neither (the local runtime's CA then issues them)")
        return self
