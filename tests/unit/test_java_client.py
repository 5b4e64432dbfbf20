"""librdkafka's settings as the Java client's, for Spark's Kafka source and Kafka's tools. No server."""

from __future__ import annotations

from pathlib import Path

import pytest

from conveyor.java_client import JavaClientSettingError, java_settings

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def test_scram_over_tls_becomes_a_jaas_line_and_a_pem_trust_store():
    java = java_settings({"bootstrap.servers": "k:9093", "security.protocol": "SASL_SSL",
                          "sasl.mechanisms": "scram-sha-512", "sasl.username": "lake", "sasl.password": 'p"w\\',
                          "ssl.ca.location": "/etc/ca.pem", "ssl.endpoint.identification.algorithm": "none"})
    assert java == {"bootstrap.servers": "k:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                    "sasl.jaas.config": f'{SCRAM} required username="lake" password="p\\"w\\\\";',
                    "ssl.truststore.type": "PEM", "ssl.truststore.location": "/etc/ca.pem",
                    "ssl.endpoint.identification.algorithm": ""}


def test_a_client_certificate_and_key_become_a_pem_key_store_given_as_content():
    files = {Path("/c.pem"): "-----BEGIN CERTIFICATE-----\nabc\n", Path("/k.pem"): "-----BEGIN PRIVATE KEY-----\nxyz\n"}
    java = java_settings({"security.protocol": "SSL", "ssl.certificate.location": "/c.pem",
                          "ssl.key.location": "/k.pem", "ssl.key.password": "kp"}, read=files.__getitem__)
    assert java == {"security.protocol": "SSL", "ssl.keystore.type": "PEM", "ssl.key.password": "kp",
                    "ssl.keystore.certificate.chain": files[Path("/c.pem")], "ssl.keystore.key": files[Path("/k.pem")]}
    with pytest.raises(JavaClientSettingError, match="go together"):
        java_settings({"ssl.certificate.location": "/c.pem"}, read=files.__getitem__)


def test_oauthbearer_client_credentials_become_the_java_login_callback():
    java = java_settings({"security.protocol": "SASL_SSL", "sasl.mechanisms": "OAUTHBEARER",
                          "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": "lake",
                          "sasl.oauthbearer.client.secret": "s3", "sasl.oauthbearer.scope": "kafka",
                          "sasl.oauthbearer.token.endpoint.url": "https://idp/token"})
    assert java["sasl.login.callback.handler.class"].endswith("OAuthBearerLoginCallbackHandler")
    assert java["sasl.oauthbearer.token.endpoint.url"] == "https://idp/token"
    assert java["sasl.jaas.config"] == ('org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
                                        'clientId="lake" clientSecret="s3" scope="kafka";')
    with pytest.raises(JavaClientSettingError, match="sasl.oauthbearer.client.secret"):
        java_settings({"sasl.mechanisms": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
                       "sasl.oauthbearer.client.id": "lake", "sasl.oauthbearer.token.endpoint.url": "https://idp/t"})


def test_what_has_no_java_equivalent_is_refused_by_name_never_dropped():
    with pytest.raises(JavaClientSettingError, match=r"\['ssl.engine.location'\]"):
        java_settings({"security.protocol": "SSL", "ssl.engine.location": "/engine.so"})
    with pytest.raises(JavaClientSettingError, match="GSSAPI"):
        java_settings({"sasl.mechanisms": "GSSAPI", "sasl.username": "u"})
