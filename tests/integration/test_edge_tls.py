"""The gateway over HTTPS with a certificate from the local runtime's CA: the SDK verifies it, a
client that does not trust that CA is refused before it sends anything, and plain HTTP gets no
answer from the TLS port."""

from __future__ import annotations

import httpx
import pytest

from conveyor.config import Platform
from conveyor.config.tls import Tls
from conveyor_sdk.publisher import Publisher
from conveyor.tls import trusted

from tests.conftest import demo_event, eventually
from tests.dispatchkit import nodes, setup  # noqa: F401 (fixtures)

pytestmark = pytest.mark.integration


def test_the_sdk_publishes_over_https_and_verifies_the_gateway(provisioned: Platform, serve_gateway):
    url = serve_gateway(provisioned, "dc1", Tls())
    assert url.startswith("https://127.0.0.1:")
    with Publisher(url, "demo-adserver-token", verify=trusted(provisioned)) as publisher:
        published = publisher.publish("ad-events", [demo_event() for _ in range(3)])
    assert published.accepted == 3

    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(f"{url}/healthz", timeout=10)  # the system's authorities do not know the local CA
    with pytest.raises(httpx.HTTPError):
        httpx.get(url.replace("https://", "http://") + "/healthz", timeout=10)


def test_a_dispatcher_over_tls_serves_a_client_that_trusts_its_ca_and_no_other(
        setup, nodes, platform_file, platform_data):
    import grpc

    from conveyor_sdk.subscriber import NodesUnreachable, Subscriber, SubscriberError, locate
    from conveyor.tls import trusted_pem
    from tests.dispatchkit import MAILER_TOKEN, produce, start_node

    platform, topic = setup(tls={})
    node = start_node(platform)
    nodes.append(node)
    sent = set(produce(platform, topic, 30))
    received: set[bytes] = set()
    credentials = grpc.ssl_channel_credentials(trusted_pem(platform))
    with Subscriber(topic, "mailer", lambda m: received.add(m.value), 2, nodes=[node.advertise],
                    token=MAILER_TOKEN, credentials=credentials):
        eventually(lambda: received == sent, 60, "every message over TLS")
    with pytest.raises((NodesUnreachable, SubscriberError)):
        locate([node.advertise], topic, "mailer", MAILER_TOKEN, timeout=5)  # plain text to a TLS port
    with pytest.raises((NodesUnreachable, SubscriberError)):
        locate([node.advertise], topic, "mailer", MAILER_TOKEN, timeout=5,
               credentials=grpc.ssl_channel_credentials())  # the system's authorities only
