"""What it takes to make one cluster's ACLs and SCRAM users match platform.yaml. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from conveyor.acls.grants import Grant


@dataclass(frozen=True)
class AclPlan:
    cluster: str
    #: False for a cluster that does not authenticate clients: nothing to plan there.
    secured: bool
    add: tuple[Grant, ...] = ()
    remove: tuple[Grant, ...] = ()
    #: Services without a SCRAM credential on the cluster yet.
    users: tuple[str, ...] = ()

    @property
    def in_sync(self) -> bool:
        return not (self.add or self.remove or self.users)


def plan_acls(cluster: str, wanted: set[Grant], live: set[Grant], wanted_users: set[str], live_users: set[str],
              prune: bool = False, keep: frozenset[str] = frozenset()) -> AclPlan:
    """``live`` holds the cluster's ALLOW bindings; with ``prune``, those platform.yaml does not
    ask for are removed, except the principals in ``keep`` (the platform's own super user)."""
    remove = sorted(g for g in live - wanted if g.principal not in keep) if prune else []
    return AclPlan(cluster, True, tuple(sorted(wanted - live)), tuple(remove), tuple(sorted(wanted_users - live_users)))
