"""Plan and apply platform.yaml's ACLs and SCRAM users on every secured cluster.

The I/O edge of :mod:`conveyor.acls.plan`: the live ALLOW bindings and SCRAM users come from the
admin client (as the platform's super user), the pure planner gives the difference, and apply
creates what is missing and, with prune, deletes what is not declared. SCRAM users are made only
where the cluster's ``users`` names them with their passwords (`conveyor up` does for the secured
clusters it starts); elsewhere the cluster's owner manages users, and the plan lists only ACLs.
"""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from conveyor import kafka
from conveyor.acls.grants import Grant, Pattern, Resource, is_secured, principal
from conveyor.acls.parts import wanted
from conveyor.acls.plan import AclPlan, plan_acls
from conveyor.config import Platform
from conveyor.errors import ConveyorError

_TIMEOUT = 15.0
#: Seconds reads are asked again while a broker restarts (kafka.settled): a cluster that is down
#: entirely is reported after two timeouts.
_SETTLE = 30.0
#: Iterations of SCRAM's key derivation; Kafka's minimum is 4096.
_SCRAM_ITERATIONS = 8192


class AclError(ConveyorError):
    """A cluster's ACLs or users could not be read or changed."""


def _failed(cluster: str, what: str, exc: KafkaException) -> AclError:
    return AclError(f"cluster {cluster}: {what} failed ({exc.args[0].str() if exc.args else exc}); "
                    "is it running, and is the platform's admin its super user? (`conveyor status`)")


def live_grants(admin: AdminClient) -> set[Grant]:
    """Every ALLOW binding for any host on the resource kinds Conveyor manages."""
    allowed = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                               AclOperation.ANY, AclPermissionType.ALLOW)
    grants = set()
    for binding in admin.describe_acls(allowed, request_timeout=_TIMEOUT).result():
        if binding.host != "*":
            continue
        try:
            resource, pattern = Resource(binding.restype.name), Pattern(binding.resource_pattern_type.name)
        except ValueError:  # a kind platform.yaml cannot declare (MATCH filters, delegation tokens)
            continue
        grants.add(Grant(binding.principal, resource, binding.name, pattern, binding.operation.name))
    return grants


def live_users(admin: AdminClient) -> set[str]:
    try:
        described = admin.describe_user_scram_credentials(request_timeout=_TIMEOUT).result()
    except KafkaException as exc:
        if exc.args and exc.args[0].code() == KafkaError.RESOURCE_NOT_FOUND:
            return set()
        raise
    return set(described)


def plan(platform: Platform, clusters: Iterable[str] | None = None, prune: bool = False,
         reset_passwords: bool = False) -> list[AclPlan]:
    """``reset_passwords``: set every user the clusters' ``users`` name to its password there, even
    one the cluster has: what brings parts back in after the local principals file was lost."""
    plans = []
    for name in clusters or platform.clusters:
        cluster = platform.cluster(name)
        if not is_secured(cluster):
            plans.append(AclPlan(name, secured=False))
            continue
        admin = kafka.admin(platform, name)
        try:
            # Read again while a broker restarts under it: a rolling restart is when ACLs get applied.
            grants, users = kafka.settled(lambda: (live_grants(admin), live_users(admin)), timeout=_SETTLE)
        except KafkaException as exc:
            raise _failed(name, "reading ACLs and users", exc) from None
        want_grants, _ = wanted(platform, name)
        admin_user = cluster.client.get("sasl.username")
        keep = frozenset({principal(admin_user.get_secret_value())} if admin_user is not None else ())
        plans.append(plan_acls(name, want_grants, grants, set(cluster.users), set() if reset_passwords else users,
                               prune, keep=keep))
    return plans


def apply(platform: Platform, plans: list[AclPlan]) -> int:
    """Carry out ``plans``; returns how many changes were made."""
    done = 0
    for cluster_plan in plans:
        if cluster_plan.in_sync:
            continue
        admin = kafka.admin(platform, cluster_plan.cluster)
        try:
            if cluster_plan.users:
                passwords = platform.cluster(cluster_plan.cluster).users
                upserts = [UserScramCredentialUpsertion(
                    user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, _SCRAM_ITERATIONS),
                    passwords[user].get_secret_value().encode()) for user in cluster_plan.users]
                for future in admin.alter_user_scram_credentials(upserts, request_timeout=_TIMEOUT).values():
                    future.result()
            if cluster_plan.add:
                for future in admin.create_acls([_binding(g) for g in cluster_plan.add],
                                                request_timeout=_TIMEOUT).values():
                    future.result()
            if cluster_plan.remove:
                filters = [_binding_filter(g) for g in cluster_plan.remove]
                for future in admin.delete_acls(filters, request_timeout=_TIMEOUT).values():
                    future.result()
        except KafkaException as exc:
            raise _failed(cluster_plan.cluster, f"changing ACLs (done before: {done})", exc) from None
        done += len(cluster_plan.users) + len(cluster_plan.add) + len(cluster_plan.remove)
    return done


def _binding(grant: Grant) -> AclBinding:
    return AclBinding(ResourceType[grant.resource.value], grant.name, ResourcePatternType[grant.pattern.value],
                      grant.principal, "*", AclOperation[grant.operation], AclPermissionType.ALLOW)


def _binding_filter(grant: Grant) -> AclBindingFilter:
    return AclBindingFilter(ResourceType[grant.resource.value], grant.name, ResourcePatternType[grant.pattern.value],
                            grant.principal, "*", AclOperation[grant.operation], AclPermissionType.ALLOW)


def apply_secured(platform: Platform, clusters: Iterable[str] | None = None) -> tuple[list[str], int]:
    """Bring every secured cluster among ``clusters`` (default: all) to platform.yaml's users and
    ACLs, pruning nothing: what ``topics apply`` does after the topics, so that new topics and
    routes are usable at once. (the secured clusters, how many changes were made)."""
    secured = [name for name in clusters or platform.clusters if is_secured(platform.cluster(name))]
    return secured, apply(platform, plan(platform, secured)) if secured else 0
