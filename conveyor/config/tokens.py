"""A token stored only as its hash: the services' (``services:``) and the dashboard's (``ops.token``)."""

from __future__ import annotations

from pydantic import Field, model_validator

from conveyor.config.units import Model


class TokenHash(Model):
    """A SHA-256 hex digest, or a salted scrypt hash (``conveyor config hash-token [--scrypt]`` makes
    either from the token on standard input)."""

    token_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    #: ``scrypt$<log2 N>$<r>$<p>$<salt hex>$<hash hex>``: slow to guess from a leaked file.
    token_scrypt: str | None = Field(default=None, pattern=r"^scrypt\$\d{1,2}\$\d{1,2}\$\d{1,2}\$[0-9a-f]{16,}\$[0-9a-f]{32,}$")

    @model_validator(mode="after")
    def _one_token_hash(self) -> TokenHash:
        if (self.token_sha256 is None) == (self.token_scrypt is None):
            raise ValueError("give the token's hash as token_sha256 or token_scrypt (one of them)")
        return self
