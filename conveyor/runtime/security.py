"""The local runtime's TLS and SASL material for clusters with ``security: sasl_ssl``.

``conveyor up`` makes, once per runtime home, a certificate authority and one certificate for the
local nodes (127.0.0.1 and localhost), signed by it, plus the password of the platform's one super
user (``admin``, SCRAM-SHA-512), which it writes into every secured cluster's metadata at format
time. Brokers read their key from a PKCS#12 store (the JVM reads it natively); clients trust the
CA from its PEM file (librdkafka's ``ssl.ca.location``, a PEM trust store for Java clients).

Secrets live in files readable only by their owner and are never printed; `conveyor up` hands them
to the platform's clients in the resolved view (conveyor.runtime.endpoints).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import secrets
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from conveyor.files import exclusive, replace_atomically

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey
    from cryptography.x509 import Certificate

#: The platform's own principal for admin work; a super user on every secured local cluster.
ADMIN_USER = "admin"
#: The subject of the nodes' certificate; brokers reach controllers over mutual TLS with it, so
#: ``User:CN=conveyor-node`` is the other super user.
NODE_SUBJECT = "CN=conveyor-node"
SCRAM_MECHANISM = "SCRAM-SHA-512"
_VALIDITY = dt.timedelta(days=825)


@dataclass(frozen=True)
class LocalSecurity:
    """Where the material lives under the runtime home (``<home>/security``)."""

    dir: Path

    @property
    def ca_cert(self) -> Path:
        return self.dir / "ca.pem"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca-key.pem"

    @property
    def node_keystore(self) -> Path:
        return self.dir / "node.p12"

    @property
    def secrets_file(self) -> Path:
        return self.dir / "secrets.json"

    def secrets(self) -> dict[str, str]:
        return json.loads(self.secrets_file.read_text())

    @property
    def admin_password(self) -> str:
        return self.secrets()["admin_password"]

    @property
    def keystore_password(self) -> str:
        return self.secrets()["keystore_password"]

    @property
    def server_cert(self) -> Path:
        return self.dir / "server.pem"

    @property
    def server_key(self) -> Path:
        return self.dir / "server-key.pem"

    def server_certificate(self) -> tuple[Path, Path]:
        """A certificate for the HTTP and gRPC edges on 127.0.0.1 and localhost (PEM: what
        uvicorn and gRPC read), issued by the local CA the first time it is asked for."""
        self.ensure()
        if not (self.server_cert.exists() and self.server_key.exists()):
            from cryptography.hazmat.primitives.serialization import load_pem_private_key
            from cryptography.x509 import load_pem_x509_certificate

            ca_key = load_pem_private_key(self.ca_key.read_bytes(), password=None)
            ca_cert = load_pem_x509_certificate(self.ca_cert.read_bytes())
            key, cert = _local_certificate(ca_key, ca_cert, "conveyor-edge")  # type: ignore[arg-type]
            write_private(self.server_key, _pem_key(key))
            self.server_cert.write_bytes(_pem_cert(cert))
        return self.server_cert, self.server_key

    def edge_certificate_for(self, hosts: Sequence[str], cert: Path, key: Path) -> None:
        """A certificate for edges at ``hosts`` (names or IP addresses) besides 127.0.0.1 and
        localhost, issued by the local CA, written to ``cert`` and ``key`` (PEM): for edges on
        addresses of their own, as the hosts of a deployment tried on one machine."""
        from cryptography.hazmat.primitives.serialization import load_pem_private_key
        from cryptography.x509 import load_pem_x509_certificate

        self.ensure()
        ca_key = load_pem_private_key(self.ca_key.read_bytes(), password=None)
        ca_cert = load_pem_x509_certificate(self.ca_cert.read_bytes())
        made_key, made = _local_certificate(ca_key, ca_cert, "conveyor-edge", hosts)  # type: ignore[arg-type]
        write_private(key, _pem_key(made_key))
        cert.write_bytes(_pem_cert(made))

    @property
    def principals_file(self) -> Path:
        return self.dir / "principals.json"

    def service_password(self, service: str) -> str:
        """The SCRAM password of a service's principal on the local secured clusters, made the
        first time it is asked for."""
        # Several processes (a gateway, a lake run, `acl apply`) may ask at once: one at a time.
        with exclusive(self.dir / ".principals.lock"):
            known = json.loads(self.principals_file.read_text()) if self.principals_file.exists() else {}
            if service not in known:
                known[service] = secrets.token_urlsafe(24)
                write_private(self.principals_file, json.dumps(known).encode())
            return known[service]

    def ensure(self) -> None:
        """Make the CA, the nodes' key store and the passwords unless they exist already."""
        if self.secrets_file.exists() and self.node_keystore.exists() and self.ca_cert.exists():
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)
        passwords = {"admin_password": secrets.token_urlsafe(24), "keystore_password": secrets.token_urlsafe(24)}
        ca_key, ca_cert = _certificate_authority()
        node_key, node_cert = _local_certificate(ca_key, ca_cert, NODE_SUBJECT.removeprefix("CN="))
        write_private(self.ca_key, _pem_key(ca_key))
        self.ca_cert.write_bytes(_pem_cert(ca_cert))
        write_private(self.node_keystore, _pkcs12(node_key, node_cert, ca_cert, passwords["keystore_password"]))
        # Written last: its presence says the rest is complete.
        write_private(self.secrets_file, json.dumps(passwords).encode())


def local_security(home: Path) -> LocalSecurity:
    return LocalSecurity(home / "security")


def admin_settings(material: LocalSecurity) -> dict[str, str]:
    """librdkafka settings of the platform's admin on a secured local cluster; a part or a service
    replaces the user and password with its own."""
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": SCRAM_MECHANISM,
        "sasl.username": ADMIN_USER,
        "sasl.password": material.admin_password,
        "ssl.ca.location": str(material.ca_cert),
    }


def write_private(path: Path, content: bytes) -> None:
    """``content`` as ``path``, readable by its owner only, whole or not at all: a crash mid-write
    leaves the old file (a lost principals.json would lock every part out of the clusters)."""
    replace_atomically(path, content, mode=0o600)


@contextmanager
def owner_only_file(path: Path, content: str) -> Iterator[Path]:
    """``content`` in an owner-only file for as long as a command needs it, then removed."""
    write_private(path, content.encode())
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def argument_file(arguments: list[str]) -> str:
    """A java launcher argument file (``java @file``) that gives ``arguments`` as they are."""
    return "".join('"' + a.replace("\\", "\\\\").replace('"', '\\"') + '"\n' for a in arguments)


def _certificate_authority() -> tuple[EllipticCurvePrivateKey, Certificate]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "conveyor-local-ca")])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return key, cert


def _local_certificate(ca_key: EllipticCurvePrivateKey, ca_cert: Certificate, common_name: str,
                       hosts: Sequence[str] = ()) -> tuple[EllipticCurvePrivateKey, Certificate]:
    """A certificate for 127.0.0.1, localhost and ``hosts``, for serving and for mutual TLS."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    names: list[x509.GeneralName] = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            # Server for clients, client towards the controllers (mutual TLS).
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    return key, cert


def _pem_key(key: EllipticCurvePrivateKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _pem_cert(cert: Certificate) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)


def _pkcs12(key: EllipticCurvePrivateKey, cert: Certificate, ca_cert: Certificate, password: str) -> bytes:
    from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, pkcs12

    return pkcs12.serialize_key_and_certificates(b"node", key, cert, [ca_cert],
                                                 BestAvailableEncryption(password.encode()))
