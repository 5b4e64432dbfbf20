"""The conveyor package as the zip executors import it from."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import conveyor
from conveyor.pipeline.shipping import package_zip

PACKAGE = Path(conveyor.__file__).parent


def test_the_zip_holds_every_module_and_is_built_once_per_content(tmp_path):
    archive = package_zip(tmp_path)
    names = set(zipfile.ZipFile(archive).namelist())
    modules = {f"conveyor/{p.relative_to(PACKAGE).as_posix()}" for p in PACKAGE.rglob("*.py")
               if "__pycache__" not in p.parts}
    assert modules <= names
    assert "conveyor/runtime/__init__.py" in names  # a namespace folder, which zipimport cannot find
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
