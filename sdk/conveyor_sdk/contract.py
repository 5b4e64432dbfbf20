"""The contract header: which version of its topic's contract the gateway checked an event against.

The gateway writes it on every record it accepts and the replicator copies it, so a reader anywhere
can parse a record by the version it was checked against: the version's schema is served by the
gateways' Schema Registry API (``GET /schemas/ids/{id}``, or confluent-kafka's
``SchemaRegistryClient.get_schema(id)``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

#: The header's name; its value is ``<schema id>:<version number>``.
CONTRACT_HEADER = "conveyor-contract"
#: Beside the contract header on an event that has top-level fields its version does not declare
#: (value ``1``), and on no other: a reader that trusts the gateway knows, without parsing the
#: event, whether it says more than the version's fields (the lake keeps only those events' bytes).
EXTRA_FIELDS_HEADER = "conveyor-extra-fields"
EXTRA_FIELDS = (EXTRA_FIELDS_HEADER, b"1")


class ContractVersion(NamedTuple):
    #: The schema's id, as the Schema Registry API names it.
    id: int
    #: The version's number within its topic's subject (``<topic>-value``).
    version: int

    def header(self) -> tuple[str, bytes]:
        return CONTRACT_HEADER, f"{self.id}:{self.version}".encode()


def read_contract(value: bytes | None) -> ContractVersion | None:
    """The version a contract header's value names; None for anything else."""
    try:
        schema_id, _, number = (value or b"").decode().partition(":")
        return ContractVersion(int(schema_id), int(number))
    except ValueError:
        return None


def contract_of(headers: Iterable[tuple[str, bytes | None]] | None) -> ContractVersion | None:
    """The version a record's headers name (None: the record carries no contract header)."""
    for name, value in headers or ():
        if name == CONTRACT_HEADER:
            return read_contract(value)
    return None
