"""The whole platform file: every section, and the questions asked across them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field, PrivateAttr

from conveyor.config.clusters import Cluster, ClusterRole, Part, Purpose
from conveyor.config.contracts import Contracts
from conveyor.config.dispatch import Dispatch
from conveyor.config.gateway import Gateway
from conveyor.config.ops import Ops
from conveyor.config.pipeline import Pipeline
from conveyor.config.problems import ConfigError, NotSetError, Problem
from conveyor.config.runtime import Runtime
from conveyor.config.tls import Tls
from conveyor.config.topics import Delivery, ReplicationMode, Route, Service, Topic, TopicRequests
from conveyor.config.units import TOPIC_NAME, Model, Name


class Platform(Model):
    version: int = Field(default=1, ge=1, le=1)
    name: Name = "conveyor"
    runtime: Runtime = Field(default_factory=Runtime)
    clusters: dict[Name, Cluster] = Field(min_length=1)
    topics: dict[Annotated[str, Field(pattern=TOPIC_NAME)], Topic] = Field(default_factory=dict)
    services: dict[Name, Service] = Field(default_factory=dict)
    routes: dict[Name, Route] = Field(default_factory=dict)
    topic_requests: TopicRequests = Field(default_factory=TopicRequests)
    contracts: Contracts = Field(default_factory=Contracts)
    gateway: Gateway = Field(default_factory=Gateway)
    pipeline: Pipeline = Field(default_factory=Pipeline)
    dispatch: Dispatch = Field(default_factory=Dispatch)
    ops: Ops = Field(default_factory=Ops)
    #: The certificate and key of every edge whose ``tls:`` gives none, and the authority Conveyor's
    #: own clients trust (``ca``).
    tls: Tls | None = None

    #: Folder of the platform file; relative paths inside the file are relative to it.
    root: Path = Field(default=Path("."), exclude=True)
    #: The part of Conveyor this copy serves (:meth:`acting_as`); None for the platform's admin work.
    _part: Part | None = PrivateAttr(default=None)

    def acting_as(self, part: Part | None) -> Platform:
        """The platform as ``part`` uses it: every Kafka client made from the copy connects with the
        part's own credentials (conveyor.kafka), so a secured cluster's ACLs bound what it can do.
        None: the platform's admin work, with the clusters' ``client`` settings."""
        if self._part == part:
            return self
        copy = self.model_copy()
        copy._part = part
        return copy

    @property
    def part(self) -> Part | None:
        return self._part

    def cluster(self, name: str) -> Cluster:
        try:
            return self.clusters[name]
        except KeyError:
            known = ", ".join(sorted(self.clusters))
            raise ConfigError([Problem(f"clusters.{name}", f"no such cluster (known: {known})")]) from None

    def writable_clusters(self) -> list[str]:
        """The writable clusters, in platform.yaml's order: one data centre's gateways each."""
        return [name for name, c in self.clusters.items() if c.role == ClusterRole.writable]

    def gateway_port(self, dc: str) -> int:
        """The port of data centre ``dc``'s gateway: gateway.port plus its position among the writable clusters."""
        return self.gateway.port + self.writable_clusters().index(dc)

    def bootstrap(self, cluster_name: str) -> str:
        """The cluster's bootstrap servers, which a cluster `conveyor up` starts has only once it ran."""
        bootstrap = self.cluster(cluster_name).bootstrap
        if bootstrap is None:
            raise NotSetError(f"clusters.{cluster_name}.bootstrap",
                              "give the cluster's bootstrap servers in platform.yaml, or run `conveyor up` "
                              "to start it on this machine")
        return bootstrap

    def topics_on(self, cluster_name: str) -> dict[str, Topic]:
        """The topics that ``cluster_name`` carries."""
        return {
            name: topic
            for name, topic in self.topics.items()
            if topic.clusters is None or cluster_name in topic.clusters
        }

    def clusters_of(self, topic: str) -> list[str]:
        """The clusters that carry ``topic``."""
        chosen = self.topics[topic].clusters
        return [name for name in self.clusters if chosen is None or name in chosen]

    def with_requested(self, requested: dict[str, Topic]) -> Platform:
        """The platform with ``requested`` as its requested topics (those the contract registry granted), in
        place of those it had; the declared ones stay."""
        declared = {name: topic for name, topic in self.topics.items() if topic.requested_by is None}
        return self.model_copy(update={"topics": {**requested, **declared}})

    def route_topics(self, route_name: str) -> set[str]:
        """The topics a route names, and the requested topics on both its clusters when it takes them."""
        route = self.routes[route_name]
        return set(route.topics) | {name for name in self.topics if self._takes_requested(route, name)}

    def copies(self, route_name: str, topic: str) -> bool:
        """Whether the route copies ``topic``: named, requested, or matched by its pattern. Asked
        for every source topic at each discovery, so it looks at this one topic only."""
        route = self.routes[route_name]
        return route.selects(topic) or self._takes_requested(route, topic)

    def copy_mode(self, route_name: str, topic: str) -> ReplicationMode:
        """How the route copies ``topic``: as its delivery promises when the platform declares it
        (requested topics included), in the route's own mode when only its pattern names it."""
        declared = self.topics.get(topic)
        if declared is None:
            return self.routes[route_name].mode
        return ReplicationMode.exactly_once if declared.delivery is Delivery.exact else ReplicationMode.at_least_once

    def _takes_requested(self, route: Route, name: str) -> bool:
        topic = self.topics.get(name)
        return (route.requested and topic is not None and topic.requested_by is not None
                and all(topic.clusters is None or end in topic.clusters for end in (route.source, route.destination)))

    def relaxed_topics(self) -> list[str]:
        """The topics delivered at least once: a loss there warns instead of paging, copies are kept."""
        return sorted(name for name, topic in self.topics.items() if topic.delivery is not Delivery.exact)

    def resolve(self, relative: str) -> Path:
        path = Path(relative)
        return path if path.is_absolute() else (self.root / path)

    @property
    def home(self) -> Path:
        return self.resolve(self.runtime.home)

    @property
    def registry_cluster(self) -> str:
        """The cluster that holds the contract registry: contracts.cluster, else the one cluster its
        topic is declared on, else the read cluster."""
        chosen = self.contracts.cluster
        declared = self.topics.get(self.contracts.topic)
        if chosen is None and declared is not None and declared.clusters is not None and len(declared.clusters) == 1:
            chosen = declared.clusters[0]
        return self.read_cluster(chosen, "contracts.cluster")

    def read_cluster(self, chosen: str | None = None, setting: str = "--cluster") -> str:
        """The one rule for the cluster a reader reads when nothing names it: ``chosen`` (an option
        or a section's own setting), else pipeline.source, else the only cluster of role read, or
        the only one of purpose offline among several."""
        if chosen is not None:
            self.cluster(chosen)  # an unknown name fails here, naming the known ones
            return chosen
        if self.pipeline.source is not None:
            return self.pipeline.source
        read = sorted(name for name, c in self.clusters.items() if c.role == ClusterRole.read)
        offline = [name for name in read if self.clusters[name].purpose is Purpose.offline]
        if len(read) > 1 and len(offline) == 1:  # batch readers' cluster among several
            return offline[0]
        if len(read) != 1:
            raise ConfigError([Problem("pipeline.source", f"set it, or give {setting}: there are {len(read)} read "
                                                          f"clusters ({', '.join(read) or 'none'})")])
        return read[0]

