"""Which optional extra installs a missing module, so a command whose extra is not installed says
in one line what to install instead of a traceback (the extras of pyproject.toml)."""

from __future__ import annotations

#: Top-level module -> the extras that install it.
EXTRAS: dict[str, tuple[str, ...]] = {
    "fastapi": ("gateway", "ops"),
    "starlette": ("gateway", "ops"),
    "uvicorn": ("gateway", "ops"),
    "grpc_health": ("dispatch",),
    "grpc_reflection": ("dispatch",),
    "pyspark": ("pipeline",),
    "pyarrow": ("pipeline",),
    "pandas": ("pipeline",),
}


def missing_extra(module: str | None) -> str | None:
    """The line to print for a missing ``module`` (dotted or not); None when no extra installs it."""
    extras = EXTRAS.get((module or "").partition(".")[0])
    if extras is None:
        return None
    names = " or ".join(f"'{extra}'" for extra in extras)
    return (f"this command needs {module}, which the {names} extra installs: "
            f"pip install 'conveyor[{extras[0]}]' (or 'conveyor[all]')")
