"""One mapping from a cluster's librdkafka settings to the Java client's, for every Java client
Conveyor runs: Spark's Kafka connector (as ``kafka.``-prefixed options) and Kafka's own tools (as a
``--command-config`` file). Pure.

Most names are shared. What differs: librdkafka's plural ``sasl.mechanisms`` is the Java singular;
its SASL user and password, and its OAUTHBEARER client credentials, become a JAAS line; a PEM CA
file becomes a PEM trust store; a PEM client certificate and key become a PEM key store given as
content. A setting with no known Java equivalent is an error naming it, never dropped: a client
that silently connects without a security setting is worse than one that does not start.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from conveyor.errors import ConveyorError

_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
_OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_OAUTH_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
#: Settings both clients name and read alike.
_SAME = frozenset({
    "bootstrap.servers", "security.protocol", "client.id", "ssl.key.password",
    "sasl.kerberos.service.name", "ssl.cipher.suites", "ssl.enabled.protocols",
})


class JavaClientSettingError(ConveyorError):
    """A librdkafka setting Conveyor cannot give a Java client."""


def jaas_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def java_settings(settings: Mapping[str, str], read: Callable[[Path], str] = Path.read_text) -> dict[str, str]:
    """The Java client's properties for ``settings`` (librdkafka's names and values). ``read``
    reads a PEM file named by a setting (a key store is given to Java as content)."""
    rest = {key: str(value) for key, value in settings.items()}
    java = {key: rest.pop(key) for key in list(rest) if key in _SAME}
    mechanism = (rest.pop("sasl.mechanisms", None) or rest.pop("sasl.mechanism", None) or "").upper()
    if mechanism:
        java["sasl.mechanism"] = mechanism
    username, password = rest.pop("sasl.username", None), rest.pop("sasl.password", None)
    if username is not None:
        module = _LOGIN_MODULES.get(mechanism or "PLAIN")
        if module is None:
            raise JavaClientSettingError(f"sasl.username with SASL mechanism {mechanism}: a Java client cannot "
                                         "log in with it (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)")
        java["sasl.jaas.config"] = (f"{module} required username={jaas_quote(username)} "
                                    f"password={jaas_quote(password or '')};")
    if mechanism == "OAUTHBEARER":
        java.update(_oauthbearer(rest))
    if "ssl.ca.location" in rest:
        java["ssl.truststore.type"] = "PEM"
        java["ssl.truststore.location"] = rest.pop("ssl.ca.location")
    certificate, key = rest.pop("ssl.certificate.location", None), rest.pop("ssl.key.location", None)
    if (certificate is None) != (key is None):
        raise JavaClientSettingError("ssl.certificate.location and ssl.key.location go together (a client certificate "
                                     "and its key)")
    if certificate is not None and key is not None:
        java["ssl.keystore.type"] = "PEM"
        java["ssl.keystore.certificate.chain"] = read(Path(certificate))
        java["ssl.keystore.key"] = read(Path(key))
    if "ssl.endpoint.identification.algorithm" in rest:
        value = rest.pop("ssl.endpoint.identification.algorithm")
        java["ssl.endpoint.identification.algorithm"] = "" if value == "none" else value
    if rest:
        raise JavaClientSettingError(f"client settings {sorted(rest)} have no Java equivalent known to Conveyor; a Java "
                                     "client (Spark's Kafka source, Kafka's tools) cannot reach the cluster with them")
    return java


def _oauthbearer(rest: dict[str, str]) -> dict[str, str]:
    """librdkafka's OIDC client-credentials settings as the Java client's login callback."""
    method = rest.pop("sasl.oauthbearer.method", "default").lower()
    if method != "oidc":
        raise JavaClientSettingError("sasl.mechanisms OAUTHBEARER needs sasl.oauthbearer.method=oidc (client "
                                     "credentials from a token endpoint) for a Java client")
    try:
        endpoint = rest.pop("sasl.oauthbearer.token.endpoint.url")
        client_id = rest.pop("sasl.oauthbearer.client.id")
        secret = rest.pop("sasl.oauthbearer.client.secret")
    except KeyError as missing:
        raise JavaClientSettingError(f"OAUTHBEARER over OIDC needs {missing.args[0]}") from None
    options = f"clientId={jaas_quote(client_id)} clientSecret={jaas_quote(secret)}"
    if "sasl.oauthbearer.scope" in rest:
        options += f" scope={jaas_quote(rest.pop('sasl.oauthbearer.scope'))}"
    return {"sasl.login.callback.handler.class": _OAUTH_HANDLER,
            "sasl.oauthbearer.token.endpoint.url": endpoint,
            "sasl.jaas.config": f"{_OAUTH_MODULE} required {options};"}


def properties_text(props: Mapping[str, str]) -> str:
    """``props`` as a Java properties file, each value as java.util.Properties reads it back (PEM
    content spans lines)."""
    return "".join(f"{key}={_escaped(value)}\n" for key, value in props.items())


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n")
