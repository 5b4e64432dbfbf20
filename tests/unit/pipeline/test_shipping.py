"""The conveyor package and its executor side's dependencies as executors on other hosts get them."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import conveyor
from conveyor.pipeline.shipping import DEPENDENCIES_DIR, dependencies_tar, package_zip

PACKAGE = Path(conveyor.__file__).parent


def test_the_zip_holds_every_module_and_is_built_once_per_content(tmp_path):
    archive = package_zip(tmp_path)
    names = set(zipfile.ZipFile(archive).namelist())
    modules = {f"conveyor/{p.relative_to(PACKAGE).as_posix()}" for p in PACKAGE.rglob("*.py")
               if "__pycache__" not in p.parts}
    assert modules <= names
    assert "conveyor/runtime/__init__.py" in names  # a namespace folder, which zipimport cannot find
    assert {"conveyor_sdk/errors.py", "conveyor_sdk/protos/dispatch_pb2.py"} <= names  # conveyor.errors imports it
    stamp = archive.stat().st_mtime_ns
    assert package_zip(tmp_path) == archive and archive.stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == [archive.name]


def test_an_interpreter_imports_the_executor_modules_from_the_zip(tmp_path):
    archive = package_zip(tmp_path)
    program = ("import sys; sys.meta_path = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]\n"
               f"sys.path.insert(0, {str(archive)!r})\n"
               "import conveyor.pipeline.records, conveyor.pipeline.realtime.deltas, conveyor.pipeline.realtime.store\n"
               "print(conveyor.__file__)")
    done = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().startswith(str(archive))


def test_a_python_with_only_the_standard_library_runs_the_executor_side_from_what_is_shipped(tmp_path):
    """What an executor host does: unpack the dependencies' tar into its working folder, put it on
    the path (spark.executorEnv.PYTHONPATH) with the package's zip, and import the executor side."""
    deps = dependencies_tar(tmp_path / "cache")
    assert dependencies_tar(tmp_path / "cache") == deps  # built once per content
    work = tmp_path / "executor"
    with tarfile.open(deps) as archive:
        archive.extractall(work / DEPENDENCIES_DIR, filter="tar")
        names = archive.getnames()
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    python = str(bare / "bin" / "python")
    alone = subprocess.run([python, "-c", "import orjson"], capture_output=True, text=True, cwd=work)
    assert "No module named 'orjson'" in alone.stderr, "the bare interpreter must not find the dependencies itself"
    program = (f"import sys; sys.path.insert(0, {str(package_zip(tmp_path / 'cache'))!r})\n"
               "import pandas, pyarrow, orjson, jsonschema_rs, redis, yaml, pydantic\n"
               "import conveyor.pipeline.records, conveyor.pipeline.realtime.deltas, conveyor.pipeline.realtime.store\n"
               "print(pyarrow.__file__)")
    done = subprocess.run([python, "-c", program], cwd=work, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": DEPENDENCIES_DIR, "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().startswith(str(work / DEPENDENCIES_DIR))
