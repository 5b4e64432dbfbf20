"""The ``conveyor`` package for executors on other hosts: the lake's pandas UDF and the real-time
job's ``mapInArrow`` run in the executors' Python workers, which unpickle functions of
``conveyor.pipeline`` and so import it.

A session on a cluster master ships the installed package as a zip (``SparkContext.addPyFile``:
Spark serves it to every executor, which puts it on its Python workers' path). The zip holds the
package's Python modules and is cached under ``runtime.home`` by their content, so a session builds
it once per version of the code. An executor host then needs Java, Spark and a Python of the
driver's minor version with :data:`EXECUTOR_REQUIREMENTS` (and what they require); neither
``conveyor`` nor PySpark (its worker comes from the Spark installation) needs to be installed there.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: What executor-side code imports (Spark's Arrow transfer: pandas, pyarrow; the record parser and
#: the views' plans: pydantic, PyYAML through conveyor.config, orjson, jsonschema-rs; the event id
#: claims: redis), as distribution names for pip. The standalone-cluster test builds its executor
#: Python from exactly these and what they require.
EXECUTOR_REQUIREMENTS = ("pandas", "pyarrow", "pydantic", "PyYAML", "orjson", "jsonschema-rs", "redis")


def _modules() -> tuple[Path, list[Path]]:
    import conveyor

    root = Path(conveyor.__file__).parent
    return root, sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def package_zip(folder: Path) -> Path:
    """The installed ``conveyor`` package's modules as ``folder/conveyor-<content hash>.zip``,
    built when no zip of this content is there yet."""
    root, modules = _modules()
    digest = hashlib.sha256()
    for path in modules:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    target = folder / f"conveyor-{digest.hexdigest()[:16]}.zip"
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.tmp")  # two sessions may build it at once
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in modules:
            archive.write(path, f"{root.name}/{path.relative_to(root).as_posix()}")
        # zipimport finds no namespace packages (folders without __init__.py, like conveyor/runtime).
        for folder_ in sorted({p.parent for p in modules} - {p.parent for p in modules if p.name == "__init__.py"}):
            archive.writestr(f"{root.name}/{folder_.relative_to(root).as_posix()}/__init__.py", "")
    os.replace(partial, target)
    return target


def ship_package(session: SparkSession, folder: Path) -> Path:
    """Add the package's zip to the session's Python files; returns the zip."""
    archive = package_zip(folder)
    session.sparkContext.addPyFile(str(archive))
    return archive
