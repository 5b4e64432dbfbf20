"""The resolved view of a local platform: where `conveyor up` put each cluster, Redis, the lake
catalog's database and the edges' certificate, and how each of Conveyor's parts logs in, written as
platform.yaml would say it of an existing deployment (conveyor.config.resolved)."""

from __future__ import annotations

from pydantic import SecretStr

from conveyor.acls.parts import wanted
from conveyor.config import MetricsPage, Part, Platform, Security
from conveyor.config.resolved import ResolvedCatalog, ResolvedCluster, ResolvedView
from conveyor.config.tls import Tls
from conveyor.runtime.layout import ClusterLayout, RedisLayout
from conveyor.runtime.postgres import PostgresLayout
from conveyor.runtime.redis_access import READER, WRITER, passwords, redis_url
from conveyor.runtime.security import LocalSecurity, admin_settings


def resolved_view(platform: Platform, layouts: list[ClusterLayout], redis: RedisLayout | None,
                  postgres: PostgresLayout | None, material: LocalSecurity) -> ResolvedView:
    """The view of ``platform`` started as the layouts say; ``material`` must exist (LocalSecurity.ensure)."""
    cert, key = material.server_certificate()
    # The local server trusts connections from 127.0.0.1: the catalog needs only its user.
    catalog = ResolvedCatalog(uri=postgres.url, options={"jdbc.user": postgres.user}) if postgres else None
    writer = reader = platform.runtime.redis.url
    if writer is None and redis is not None:
        held = passwords(material)
        writer, reader = (redis_url(redis.port, user, held[user]) for user in (WRITER, READER))
    return ResolvedView(
        clusters={layout.name: _cluster(platform, layout, material) for layout in layouts},
        redis=writer, redis_reader=reader,
        tls=Tls(cert=str(cert), key=str(key), ca=str(material.ca_cert)), catalog=catalog,
        alertmanager=f"http://127.0.0.1:{manager.port}" if (manager := platform.runtime.alertmanager) else None)


def _cluster(platform: Platform, layout: ClusterLayout, material: LocalSecurity) -> ResolvedCluster:
    metrics = [MetricsPage(url=n.metrics_url, node=n.name, broker=n.node_id if n.is_broker else None,
                           controller=not n.is_broker) for n in layout.nodes]
    disks = {n.node_id: str(n.data_dir) for n in layout.brokers}
    if layout.cluster.security != Security.sasl_ssl:
        return ResolvedCluster(bootstrap=layout.bootstrap, metrics=metrics, disks=disks)
    return ResolvedCluster(bootstrap=layout.bootstrap, client=_secrets(admin_settings(material)), metrics=metrics,
                           disks=disks, users=_users(platform, layout.name, material),
                           credentials={part: _secrets({"sasl.username": part.user,
                                                        "sasl.password": material.service_password(part.user)})
                                        for part in Part})


def _secrets(settings: dict[str, str]) -> dict[str, SecretStr]:
    return {key: SecretStr(value) for key, value in settings.items()}


def _users(platform: Platform, cluster: str, material: LocalSecurity) -> dict[str, SecretStr]:
    # Every part gets a user, whether platform.yaml gives it work yet or not: a part started right
    # after `up` (a benchmark's, a test's, one an edit of platform.yaml asks for) connects as itself.
    names = wanted(platform, cluster)[1] | {part.user for part in Part}
    return _secrets({user: material.service_password(user) for user in sorted(names)})


def with_current_users(platform: Platform, view: ResolvedView, material: LocalSecurity) -> ResolvedView:
    """``view`` with each secured cluster's users as platform.yaml asks for them now: a service
    added to platform.yaml after `conveyor up` gets its SCRAM user from the next `acl apply` or
    `topics apply`. The rest of the view is what up started, and stays."""
    clusters = {name: started.model_copy(update={"users": _users(platform, name, material)})
                if started.users and name in platform.clusters else started
                for name, started in view.clusters.items()}
    return view.model_copy(update={"clusters": clusters})
