"""Units and the base model every section of platform.yaml is built on."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, SecretStr, ValidationInfo

DEFAULT_PLATFORM_FILE = "platform.yaml"

# Names become Kafka topic names, directory names and metric labels: keep them to the safe subset.
NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
TOPIC_NAME = r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,248}$"

@dataclass(frozen=True)
class _Unit:
    """A quantity written as a number and a unit ("30s", "512MiB"), or an integer of the base unit."""

    #: How the error says what was expected: "a duration such as 30s, 15m, 7d".
    expected: str
    #: What -1 means (Kafka's "forever", "no limit"), and the words that may say it.
    minus_one: str
    words: frozenset[str]
    pattern: re.Pattern[str]
    #: Base units per unit (lower case); ``default`` when no unit is written.
    scale: dict[str, int]
    default: str = ""

    def parse(self, value: Any) -> int:
        if isinstance(value, bool):
            raise ValueError(f"must be {self.expected}")
        if isinstance(value, int):
            if value < -1:
                raise ValueError(f"must be -1 ({self.minus_one}) or {self.expected}")
            return value
        if isinstance(value, str):
            if value.strip() in self.words:
                return -1
            match = self.pattern.match(value)
            if match:
                return int(match.group(1)) * self.scale[(match.group(2) or self.default).lower()]
        raise ValueError(f"must be {self.expected} (got {value!r})")


_DURATION = _Unit(
    "a duration such as 30s, 15m, 7d", "forever", frozenset({"-1", "forever"}),
    re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d|w)\s*$"),
    {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000})
_SIZE = _Unit(
    "a size such as 512MiB or 10GB", "no limit", frozenset(),
    re.compile(r"^\s*(\d+)\s*(b|kb|mb|gb|tb|kib|mib|gib|tib)?\s*$", re.IGNORECASE),
    {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30,
     "tib": 2**40},
    default="b")


def parse_duration_ms(value: Any) -> int:
    """``"7d"`` -> 604800000. Integers are taken as milliseconds; -1 means "forever" (Kafka's)."""
    return _DURATION.parse(value)


def duration_text(seconds: float) -> str:
    """Whole seconds as the duration syntax, in the largest whole unit up to hours: 2h, 10m, 90s."""
    whole = round(seconds)
    for size, unit in ((3600, "h"), (60, "m")):
        if whole and whole % size == 0:
            return f"{whole // size}{unit}"
    return f"{whole}s"


def parse_size_bytes(value: Any) -> int:
    """``"1GiB"`` -> 1073741824. Integers are taken as bytes; -1 means "no limit" (Kafka's)."""
    return _SIZE.parse(value)


def _seconds(value: Any) -> Any:
    return parse_duration_ms(value) / 1000 if isinstance(value, str) else value


_ENV_REFERENCE = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")


def resolve_secret(value: Any, info: ValidationInfo) -> Any:
    """A secret as written, or taken from where it is kept: ``${VAR}`` from the environment,
    ``file:PATH`` from a file (relative to platform.yaml; one trailing newline dropped). The value
    itself never appears in an error."""
    if isinstance(value, SecretStr):
        return value
    if not isinstance(value, str):
        raise ValueError("must be a string, ${ENV_VAR} or file:PATH")
    if not (info.context or {}).get("resolve_secrets", True):  # the file as written (conveyor deploy)
        return value
    reference = _ENV_REFERENCE.match(value)
    if reference:
        name = reference.group(1)
        if name not in os.environ:
            raise ValueError(f"environment variable {name} is not set")
        return os.environ[name]
    if value.startswith("file:"):
        root = Path((info.context or {}).get("root", "."))
        path = root / value.removeprefix("file:")
        try:
            return path.read_text(encoding="utf-8").removesuffix("\n")
        except OSError as err:
            raise ValueError(f"cannot read secret file {path}: {(err.strerror or str(err)).lower()}") from None
    return value


def is_reference(value: SecretStr) -> bool:
    """Whether a secret is still ``${VAR}`` or ``file:PATH`` (a file read without resolving them):
    its shape cannot be checked here."""
    text = value.get_secret_value()
    return bool(_ENV_REFERENCE.match(text)) or text.startswith("file:")


#: A password, token or key: written as is, or as ``${ENV_VAR}`` or ``file:PATH``; masked in every
#: repr, log line and printout.
Secret = Annotated[SecretStr, BeforeValidator(resolve_secret)]
DurationMs = Annotated[int, BeforeValidator(parse_duration_ms)]
#: Seconds, written as a number or a duration string ("5s", "250ms").
Seconds = Annotated[float, BeforeValidator(_seconds)]
SizeBytes = Annotated[int, BeforeValidator(parse_size_bytes)]
Name = Annotated[str, Field(pattern=NAME, max_length=64)]


class Model(BaseModel):
    # Frozen so that a loaded platform is a value every part can share; extra=forbid so that a
    # misspelt key is an error instead of a silently ignored setting.
    model_config = ConfigDict(frozen=True, extra="forbid")

