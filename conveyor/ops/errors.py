"""Errors of the operations watcher (sampling, scraping, its HTTP API).

Callers branch on the class and its fields (``cluster``, ``url``), never on the message text.
"""

from __future__ import annotations

from conveyor.errors import ConveyorError


class OpsError(ConveyorError):
    """The root of every operations error."""


class SampleError(OpsError):
    """A cluster could not be sampled at all (metadata or group listing failed)."""

    def __init__(self, cluster: str, what: str) -> None:
        self.cluster = cluster
        super().__init__(f"sampling cluster {cluster} failed: {what}")


class WatchUnreachableError(OpsError):
    """The watch service named by --url did not answer."""

    def __init__(self, url: str, what: str) -> None:
        self.url = url
        super().__init__(f"the ops watch service at {url} did not answer ({what}); start it with "
                         "`conveyor ops start`, or leave out --url to sample here")


class WatchRefusedError(OpsError):
    """The watch service named by --url asks for the ops token it was not given, or refused it."""

    def __init__(self, url: str) -> None:
        self.url = url
        super().__init__(f"the ops watch service at {url} refused the request without a valid ops token: give "
                         "--token or set CONVEYOR_OPS_TOKEN (the token whose hash is ops.token in platform.yaml)")
