"""``tls:`` of a service that others connect to (the gateway, the dashboard, the dispatcher), and
the platform's own at the top of the file."""

from __future__ import annotations

from pydantic import model_validator

from conveyor.config.units import Model


class Tls(Model):
    """Serve with this certificate and key (PEM files, relative to platform.yaml). An edge's section
    that gives neither (``tls: {}``) serves the platform's own, the top-level ``tls:`` section's,
    which `conveyor up` issues from its local certificate authority when platform.yaml gives none."""

    cert: str | None = None
    key: str | None = None
    #: The authority (PEM) that issued ``cert``, which Conveyor's own clients trust besides the
    #: system's: give it for a private authority.
    ca: str | None = None

    @model_validator(mode="after")
    def _both_or_neither(self) -> Tls:
        if (self.cert is None) != (self.key is None):
            raise ValueError("give both cert and key, or neither (the platform's top-level tls: then gives them)")
        return self
