"""What `conveyor up` says when brokers do not come up: a home whose brokers refuse the platform's
own credentials is named as such, with what to do."""

from __future__ import annotations

from pathlib import Path

from conveyor.runtime.local import refuses_credentials

REFUSED = ("[2026-11-27 13:40:03,072] INFO [SocketServer listenerType=BROKER, nodeId=1] Failed authentication with "
           "/127.0.0.1 (channelId=127.0.0.1:19092-127.0.0.1:44380-0-46) (Authentication failed during "
           "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512) "
           "(org.apache.kafka.common.network.Selector)\n")


def test_a_broker_refusing_scram_credentials_is_recognised_in_its_log(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("[2026-11-27] INFO Kafka Server started\n" * 10_000 + REFUSED)
    assert refuses_credentials(log)
    log.write_text(REFUSED + "[2026-11-27] INFO Kafka Server started\n" * 10_000)  # long before the tail
    assert not refuses_credentials(log)
    assert not refuses_credentials(tmp_path / "absent.log")
