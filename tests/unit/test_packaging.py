"""What the wheels of conveyor and of its SDK hold: setuptools packages only folders with an
``__init__.py`` and data files that the pyproject.toml's package-data names; a folder or file left
out works from this checkout and fails in an installed wheel (tests/integration/test_wheel_install.py
installs both)."""

from __future__ import annotations

import tomllib
from fnmatch import fnmatch
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Each distribution's project folder and its package.
DISTRIBUTIONS = {"conveyor": (ROOT, ROOT / "conveyor"), "conveyor-sdk": (ROOT / "sdk", ROOT / "sdk" / "conveyor_sdk")}


def _folders(package: Path) -> list[Path]:
    return [d for d in [package, *package.rglob("*")] if d.is_dir() and d.name != "__pycache__"
            and any(f.suffix == ".py" for f in d.iterdir())]


@pytest.mark.parametrize("name", list(DISTRIBUTIONS))
def test_every_folder_of_code_is_a_package(name: str) -> None:
    project, package = DISTRIBUTIONS[name]
    assert [str(d.relative_to(project)) for d in _folders(package) if not (d / "__init__.py").exists()] == []


@pytest.mark.parametrize("name", list(DISTRIBUTIONS))
def test_every_data_file_is_declared_package_data(name: str) -> None:
    project, package = DISTRIBUTIONS[name]
    declared = tomllib.loads((project / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    undeclared = []
    for folder in _folders(package):
        dotted = ".".join(folder.relative_to(project).parts)
        for file in folder.iterdir():
            if file.is_file() and file.suffix not in (".py", ".pyc") and not any(
                    fnmatch(file.name, pattern) for pattern in declared.get(dotted, [])):
                undeclared.append(str(file.relative_to(project)))
    assert undeclared == []
