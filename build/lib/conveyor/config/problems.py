"""What is wrong with a platform file: each problem with its path inside the file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from conveyor.errors import ConveyorError


@dataclass(frozen=True)
class Problem:
    path: str
    message: str
    #: The entries of other sections the problem names (``clusters.dc2``), so that a problem caused
    #: only by a broken entry can be told apart without reading its message.
    refers_to: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ConfigError(ConveyorError):
    """platform.yaml is unreadable or invalid; ``problems`` lists every problem found."""

    exit_code = 2

    def __init__(self, problems: list[Problem], source: str | Path | None = None) -> None:
        self.problems = problems
        self.source = source
        where = f"{source}: " if source else ""
        lines = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"{where}{len(problems)} problem(s)\n{lines}")


class NotSetError(ConveyorError):
    """A setting a command needs is not in the platform: neither platform.yaml nor the resolved view
    of `conveyor up` gives it. ``path`` names it inside the file."""

    exit_code = 2

    def __init__(self, path: str, remedy: str) -> None:
        self.path = path
        super().__init__(f"{path} is not set: {remedy}")
