"""Reading platform.yaml: YAML, then the models, then the cross-checks, every problem at once."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from conveyor.config.checks import cross_checks
from conveyor.config.platform import Platform
from conveyor.config.problems import ConfigError, Problem
from conveyor.config.units import DEFAULT_PLATFORM_FILE

#: A deployed service's working folder, given by its unit or manifest: it stands for runtime.home,
#: so that services sharing one platform file each keep their logs and scratch space apart.
HOME_VARIABLE = "CONVEYOR_HOME"


def _path(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc)


def _message(error: dict[str, Any]) -> str:
    """A short message in the file's terms rather than pydantic's."""
    kind, ctx = error["type"], error.get("ctx") or {}
    bounds = {
        "greater_than_equal": ">= {ge}", "greater_than": "> {gt}",
        "less_than_equal": "<= {le}", "less_than": "< {lt}",
    }
    if kind in bounds:
        return "must be " + bounds[kind].format(**ctx)
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "is not a known setting (check the spelling)"
    if kind == "string_pattern_mismatch":
        return f"must match {ctx.get('pattern')}"
    if kind in ("too_short", "too_long") and "min_length" in ctx:
        return f"must have at least {ctx['min_length']} item(s)"
    if kind == "enum":
        return f"must be one of {ctx.get('expected')}"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    return error["msg"][0].lower() + error["msg"][1:]


_SECTIONS = ("clusters", "topics", "services", "routes")


def _without_broken_entries(data: dict[str, Any], errors: list[dict[str, Any]]) -> dict[str, Any] | None:
    """``data`` minus the entries (a cluster, a topic...) that failed validation, so the references
    between the remaining ones can still be checked; None when a failure is outside any entry."""
    broken: dict[str, set[str]] = {}
    for error in errors:
        loc = error["loc"]
        if len(loc) < 2 or loc[0] not in _SECTIONS:
            return None
        broken.setdefault(str(loc[0]), set()).add(str(loc[1]))
    trimmed = dict(data)
    for section, names in broken.items():
        trimmed[section] = {k: v for k, v in (data.get(section) or {}).items() if k not in names}
    return trimmed


def parse_platform(data: Any, root: Path = Path("."), source: str | Path | None = None,
                   resolve_secrets: bool = True) -> Platform:
    """Validate already-parsed YAML; raise :class:`ConfigError` listing every problem.
    ``resolve_secrets`` False keeps each ``${VAR}`` and ``file:PATH`` as written, for what describes
    the platform to another host (conveyor deploy) rather than connects to it."""
    if not isinstance(data, dict):
        raise ConfigError([Problem("", "the file must hold a mapping (clusters:, topics:, ...)")], source)
    context = {"root": root, "resolve_secrets": resolve_secrets}
    try:
        platform = Platform.model_validate({**data, "root": root}, context=context)
    except ValidationError as err:
        errors = err.errors()
        problems = [Problem(_path(e["loc"]), _message(e)) for e in errors]
        trimmed = _without_broken_entries(data, errors)
        if trimmed is not None:
            try:
                partial = Platform.model_validate({**trimmed, "root": root}, context=context)
            except ValidationError:
                pass  # a reference check needs a valid remainder; the shape errors stand alone
            else:
                # A reference to an entry set aside is not a second problem, only an echo of the first.
                set_aside = {f"{e['loc'][0]}.{e['loc'][1]}" for e in errors}
                problems += [p for p in cross_checks(partial) if set_aside.isdisjoint(p.refers_to)]
        raise ConfigError(problems, source) from None
    problems = list(cross_checks(platform))
    if problems:
        raise ConfigError(problems, source)
    return platform


def load_platform(path: str | Path = DEFAULT_PLATFORM_FILE, resolve_secrets: bool = True) -> Platform:
    """Read and validate a platform file; ``CONVEYOR_HOME``, when set, is its runtime.home
    (``resolve_secrets``: :func:`parse_platform`'s)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            [Problem("", f"no platform file at {path} (pass --platform or set CONVEYOR_PLATFORM)")]
        ) from None
    except IsADirectoryError:
        raise ConfigError([Problem("", "is a directory, not a platform file")], path) from None
    except NotADirectoryError:
        raise ConfigError([Problem("", "cannot be read: a part of the path before the file name is "
                                       "not a directory")], path) from None
    except UnicodeDecodeError as err:
        raise ConfigError([Problem("", f"is not UTF-8 text (byte {err.start}: {err.reason})")], path) from None
    except OSError as err:
        raise ConfigError([Problem("", f"cannot be read: {(err.strerror or str(err)).lower()}")], path) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ConfigError([Problem("", f"{where}not valid YAML ({getattr(err, 'problem', err)})")], path) from None
    home = os.environ.get(HOME_VARIABLE)
    if home and isinstance(data, dict):
        data = {**data, "runtime": {**(data.get("runtime") or {}), "home": home}}
    return parse_platform(data, root=path.resolve().parent, source=path, resolve_secrets=resolve_secrets)
