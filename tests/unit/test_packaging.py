"""What a wheel of conveyor holds: setuptools packages only folders with an ``__init__.py`` and
data files that pyproject.toml's package-data names; a folder or file left out works from this
checkout and fails in an installed wheel."""

from __future__ import annotations

import tomllib
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "conveyor"


def _folders() -> list[Path]:
    return [d for d in [PACKAGE, *PACKAGE.rglob("*")] if d.is_dir() and d.name != "__pycache__"
            and any(f.suffix == ".py" for f in d.iterdir())]


def test_every_folder_of_code_is_a_package() -> None:
    assert [str(d.relative_to(ROOT)) for d in _folders() if not (d / "__init__.py").exists()] == []


def test_every_data_file_is_declared_package_data() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    undeclared = []
    for folder in _folders():
        package = ".".join(folder.relative_to(ROOT).parts)
        for file in folder.iterdir():
            if file.is_file() and file.suffix not in (".py", ".pyc") and not any(
                    fnmatch(file.name, pattern) for pattern in declared.get(package, [])):
                undeclared.append(str(file.relative_to(ROOT)))
    assert undeclared == []
