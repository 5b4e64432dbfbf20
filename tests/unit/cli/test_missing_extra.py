"""A command whose extra is not installed says in one line which extra to install, and exits 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conveyor.cli.extras import missing_extra

#: Runs the CLI with ``module`` made unimportable, as on a host without its extra.
_WITHOUT = "import sys; sys.modules[{module!r}] = None; sys.argv = ['conveyor', *{argv!r}]; " \
           "from conveyor.cli import main; main()"


@pytest.mark.parametrize(("module", "argv", "extra"), [
    ("uvicorn", ["gateway", "serve", "--dc", "dc1"], "gateway"),
    ("grpc_health", ["dispatch", "serve"], "dispatch"),
])
def test_a_command_without_its_extra_names_the_extra_in_one_line(module: str, argv: list[str], extra: str,
                                                                  tmp_path) -> None:
    done = subprocess.run([sys.executable, "-c", _WITHOUT.format(module=module, argv=argv)], capture_output=True,
                          text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"pip install 'conveyor[{extra}]'" in lines[0] and module in lines[0], done.stderr


def test_a_module_no_extra_installs_is_not_named() -> None:
    assert missing_extra("conveyor.nowhere") is None
    assert missing_extra(None) is None
    assert missing_extra("grpc") is None  # the SDK's, so the core's: a broken install, not an extra
    assert "'dispatch'" in (missing_extra("grpc_reflection.v1alpha") or "")
