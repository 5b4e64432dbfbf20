"""What executors on other hosts need to run the jobs' Python: the lake's Arrow UDF and the real-time
job's ``mapInArrow`` run in the executors' Python workers, which unpickle functions of
``conveyor.pipeline`` and so import it, and what it imports.

A session on a cluster master ships two things, each built once per content and cached under
``runtime.home/spark``:

- the ``conveyor`` package's modules as a zip (``SparkContext.addPyFile``: every executor puts it
  on its Python workers' path);
- the installed distributions the executor side imports, :data:`EXECUTOR_REQUIREMENTS` and what
  they require, as a tar of their site-packages files (``SparkContext.addArchive``: every executor
  unpacks it into its working folder as ``conveyor-deps``, and ``spark.executorEnv.PYTHONPATH``
  puts that folder first on its Python workers' path).

An executor host then needs Java, Spark and a Python of the driver's minor version and platform
(the tar carries compiled extensions), with nothing installed by hand. The versions are the
driver's own, so driver and executors never disagree on a parser or a schema.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import tarfile
import zipfile
from collections.abc import Callable
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from packaging.requirements import Requirement

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: What executor-side code imports (Spark's Arrow transfer: pandas, pyarrow; the record parser and
#: the views' plans: pydantic, PyYAML through conveyor.config, orjson, jsonschema-rs; the event id
#: claims: redis), as distribution names.
EXECUTOR_REQUIREMENTS = ("pandas", "pyarrow", "pydantic", "PyYAML", "orjson", "jsonschema-rs", "redis")
#: The folder the executors unpack the dependencies into, relative to their working folder.
DEPENDENCIES_DIR = "conveyor-deps"
#: Files of the distributions no executor imports: compiled caches, C headers and sources, tests.
_LEFT_OUT = re.compile(r"(^|/)(__pycache__|tests?|include)/|\.(pyc|pyx|pxd|pxi|h|hpp|cpp)$")


def closure(names: tuple[str, ...]) -> list[metadata.Distribution]:
    """The installed distributions ``names`` need, with their requirements (extras' left out),
    recursively."""
    found: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        dist = metadata.distribution(todo.pop())
        key = re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower()
        if key in found:
            continue
        found[key] = dist
        for line in dist.requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return list(found.values())


def _cached(target: Path, build: Callable[[Path], None]) -> Path:
    """``target`` built by ``build`` unless it exists; two sessions may build it at once."""
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    build(partial)
    os.replace(partial, target)
    return target


def _modules() -> list[tuple[Path, Path]]:
    """Every module of ``conveyor`` and of the SDK it imports: (its package's folder, the module)."""
    import conveyor
    import conveyor_sdk

    roots = [Path(package.__file__).parent for package in (conveyor, conveyor_sdk)]
    return [(root, p) for root in roots for p in sorted(root.rglob("*.py")) if "__pycache__" not in p.parts]


def package_zip(folder: Path) -> Path:
    """The installed ``conveyor`` and ``conveyor_sdk`` packages' modules as
    ``folder/conveyor-<content hash>.zip``."""
    modules = _modules()
    digest = hashlib.sha256()
    for root, path in modules:
        digest.update(f"{root.name}/{path.relative_to(root).as_posix()}".encode() + b"\0" + path.read_bytes() + b"\0")

    def build(partial: Path) -> None:
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            for root, path in modules:
                archive.write(path, f"{root.name}/{path.relative_to(root).as_posix()}")
            # zipimport finds no namespace packages (folders without __init__.py).
            folders = {(root, p.parent) for root, p in modules}
            packages = {(root, p.parent) for root, p in modules if p.name == "__init__.py"}
            for root, plain in sorted(folders - packages):
                archive.writestr(f"{root.name}/{plain.relative_to(root).as_posix()}/__init__.py", "")

    return _cached(folder / f"conveyor-{digest.hexdigest()[:16]}.zip", build)


def _files(dist: metadata.Distribution) -> list[tuple[Path, str]]:
    """A distribution's installed files under site-packages: (where it is, its name in the tar)."""
    found = []
    for file in dist.files or ():
        name = PurePosixPath(str(file))
        if name.parts[0] == ".." or _LEFT_OUT.search(name.as_posix()):
            continue
        path = Path(str(dist.locate_file(file)))
        if path.is_file():
            found.append((path, name.as_posix()))
    return found


def dependencies_tar(folder: Path) -> Path:
    """:data:`EXECUTOR_REQUIREMENTS`, as installed here, as ``folder/conveyor-deps-<hash>.tar``
    (named by the Python version and each distribution's name and version). Uncompressed: most of
    it is compiled code, and executors unpack it once per application."""
    dists = sorted(closure(EXECUTOR_REQUIREMENTS), key=lambda d: d.metadata["Name"].lower())
    digest = hashlib.sha256(f"{sys.implementation.cache_tag} {sys.platform}".encode())
    for dist in dists:
        digest.update(f"{dist.metadata['Name']}=={dist.version}\0".encode())

    def build(partial: Path) -> None:
        with tarfile.open(partial, "w") as archive:
            for dist in dists:
                for path, name in _files(dist):
                    archive.add(path, name, recursive=False)

    return _cached(folder / f"conveyor-deps-{digest.hexdigest()[:16]}.tar", build)


def executor_env() -> dict[str, str]:
    """The session settings that put the unpacked dependencies on the executors' Python path (set
    before the executors start; the archive itself is added to the running session)."""
    return {"spark.executorEnv.PYTHONPATH": DEPENDENCIES_DIR}


def ship(session: SparkSession, folder: Path) -> None:
    """Add the package's zip and the dependencies' tar to the session."""
    context = session.sparkContext
    context.addArchive(f"{dependencies_tar(folder)}#{DEPENDENCIES_DIR}")
    context.addPyFile(str(package_zip(folder)))
