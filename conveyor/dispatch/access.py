"""Who may read what through the dispatcher: the gateway's service tokens and the topics' declared
consumers (platform.yaml), plus the naming rule for groups. Pure."""

from __future__ import annotations

from conveyor.config import Platform
from conveyor.dispatch.errors import ForeignGroup, UnknownGroup, UnknownTopic
from conveyor.auth import Authorizer


class Access:
    def __init__(self, platform: Platform, cluster: str) -> None:
        self._platform = platform
        self._topics = platform.topics_on(cluster)
        self._cluster = cluster
        self._authorizer = Authorizer(platform)

    def service(self, authorization: str | None, address: str = "") -> str:
        """The service behind ``authorization``; raises Unauthenticated or TooManyAttempts (conveyor.auth)."""
        return self._authorizer.service_of(authorization, address)

    def check(self, authorization: str | None, topic: str, group: str, address: str = "") -> str:
        """The service behind ``authorization`` if it may read ``topic`` as ``group``.

        Raises Unauthenticated, TooManyAttempts or Forbidden (conveyor.auth), or UnknownTopic, UnknownGroup,
        ForeignGroup. A group is ``<service>`` or ``<service>.<name>`` for a consumer service of
        the topic, and only that service may use it, so one service cannot drain another's group.
        """
        service = self._authorizer.service_of(authorization, address)
        spec = self._topics.get(topic)
        if spec is None:
            raise UnknownTopic(f"unknown topic {topic!r}: not declared for cluster {self._cluster} in platform.yaml")
        self._authorizer.check_consumer(service, topic)
        service_of_group = owner(group)
        if service_of_group not in spec.consumers or group.endswith("."):
            raise UnknownGroup(f"unknown group {group!r} for topic {topic}: groups are named <service> or "
                               f"<service>.<name> after a consumer of the topic ({', '.join(spec.consumers)})")
        if service_of_group != service:
            raise ForeignGroup(f"group {group!r} belongs to service {service_of_group}, not {service}")
        return service


def owner(group: str) -> str:
    """The service a group is named after: ``<service>`` or ``<service>.<name>``."""
    return group.split(".", 1)[0]
