"""server.properties for each local node, from its layout. Pure.

The defaults: no unclean leader election, no topic auto-creation, the cluster's replication factor
and min ISR for every internal topic, and fast failure detection (writes resumed within about 6 s
of a broker's failure is the goal; the field's figure went from 91 s to about 6 s).
"""

from __future__ import annotations

from conveyor.config import Security
from conveyor.runtime.layout import LOOPBACK, ClusterLayout, Node
from conveyor.runtime.security import ADMIN_USER, NODE_SUBJECT, SCRAM_MECHANISM, LocalSecurity


def server_properties(layout: ClusterLayout, node: Node, material: LocalSecurity | None = None) -> dict[str, str]:
    """``material`` (the CA, the nodes' key store, the admin password) is needed by a cluster with
    ``security: sasl_ssl``."""
    cluster = layout.cluster
    factor = str(cluster.default_replication_factor)
    min_insync = str(cluster.default_min_insync)

    listeners = []
    if node.is_broker:
        listeners.append(f"CLIENT://{LOOPBACK}:{node.client_port}")
    if node.is_controller:
        listeners.append(f"CONTROLLER://{LOOPBACK}:{node.controller_port}")

    props = {
        "process.roles": node.roles,
        "node.id": str(node.node_id),
        "controller.quorum.voters": layout.quorum_voters,
        "controller.listener.names": "CONTROLLER",
        "listeners": ",".join(listeners),
        "listener.security.protocol.map": "CLIENT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(node.data_dir),
        # Small machine: few threads per node, since several brokers share two cores.
        "num.network.threads": "2",
        "num.io.threads": "4",
        "num.replica.fetchers": "1",
        "background.threads": "4",
        "num.recovery.threads.per.data.dir": "1",
    }
    if node.is_broker:
        props.update(
            {
                "advertised.listeners": f"CLIENT://{LOOPBACK}:{node.client_port}",
                "inter.broker.listener.name": "CLIENT",
                "unclean.leader.election.enable": "false",
                "auto.create.topics.enable": "false",
                "default.replication.factor": factor,
                "min.insync.replicas": min_insync,
                "num.partitions": "1",
                "offsets.topic.replication.factor": factor,
                "offsets.topic.num.partitions": "12",
                "transaction.state.log.replication.factor": factor,
                "transaction.state.log.min.isr": min_insync,
                "transaction.state.log.num.partitions": "12",
                # Kafka's 50 would be half of a test broker's logs, each recovered after a SIGKILL.
                "share.coordinator.state.topic.num.partitions": "12",
                "share.coordinator.state.topic.replication.factor": factor,
                "share.coordinator.state.topic.min.isr": min_insync,
                "group.initial.rebalance.delay.ms": "0",
                # Followers that stop fetching leave the ISR after 10 s instead of 30 s.
                "replica.lag.time.max.ms": "10000",
            }
        )
        if node.rack:
            props["broker.rack"] = node.rack
    # A dead broker is fenced (its partitions get new leaders, and it leaves every ISR) after 4 s
    # without a heartbeat: acks=all writes resume within about 5 s of a SIGKILL (bench.broker_recovery;
    # the goal is 6 s). Heartbeats every 500 ms leave room for seven missed ones, as
    # Kafka's defaults (9 s, 2 s) do for four: a GC pause or a loaded machine does not fence a live broker.
    props["broker.session.timeout.ms"] = "4000"
    props["broker.heartbeat.interval.ms"] = "500"
    # The active controller appends a no-op record to the metadata log this often, and every broker
    # fetches and replays it: at Kafka's 500 ms, an idle demo platform (six JVMs) took 56 % of a core;
    # at 5 s, 16 %. Nothing waits on it: fencing follows the heartbeats, leadership its own records.
    props["metadata.max.idle.interval.ms"] = "5000"
    if cluster.security == Security.sasl_ssl:
        if material is None:
            raise ValueError(f"cluster {layout.name} is sasl_ssl: its nodes need the local TLS and SASL material")
        props.update(secured_properties(node, material))
    return props


def secured_properties(node: Node, material: LocalSecurity) -> dict[str, str]:
    """SCRAM over TLS for clients and between brokers, mutual TLS towards the controllers, and
    Kafka's authorizer with nothing allowed unless an ACL says so."""
    props = {
        "listener.security.protocol.map": "CLIENT:SASL_SSL,CONTROLLER:SSL",
        # The node's key and the CA serve every listener, and the broker's side of its
        # connections to the controllers, which ask for its certificate.
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(material.node_keystore),
        "ssl.keystore.password": material.keystore_password,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(material.ca_cert),
        "listener.name.controller.ssl.client.auth": "required",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        "super.users": f"User:{ADMIN_USER};User:{NODE_SUBJECT}",
    }
    if node.is_broker:
        props.update({
            "sasl.enabled.mechanisms": SCRAM_MECHANISM,
            "sasl.mechanism.inter.broker.protocol": SCRAM_MECHANISM,
            f"listener.name.client.{SCRAM_MECHANISM.lower()}.sasl.jaas.config":
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                f'username="{ADMIN_USER}" password="{material.admin_password}";',
        })
    return props


def render(props: dict[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in props.items())
