"""The local PostgreSQL's layout and command line (the server itself runs in test_lake_catalog)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import yaml

from conveyor.config import parse_platform
from conveyor.runtime import postgres
from conveyor.runtime.errors import RuntimeSetupError
from conveyor.runtime.postgres import postgres_layout

ROOT = Path(__file__).resolve().parents[3]


def _platform(**runtime: object):
    data = yaml.safe_load((ROOT / "platform.yaml").read_text())
    data["runtime"].update(runtime)
    return parse_platform(data, root=ROOT)


def test_postgres_runs_only_when_platform_yaml_asks_for_it():
    assert postgres_layout(_platform()) is None
    layout = postgres_layout(_platform(postgres={"port": 27432}))
    assert layout is not None
    assert layout.dir == _platform().home / "postgres"
    assert layout.url == "jdbc:postgresql://127.0.0.1:27432/conveyor"
    # Fast shutdown: SIGTERM would wait for every client to leave.
    assert layout.daemon.stop_signal == signal.SIGINT


def test_the_server_listens_on_loopback_only_and_never_as_root():
    layout = postgres_layout(_platform(postgres={"port": 27432}))
    assert layout is not None
    argv = postgres.argv(layout)
    assert "listen_addresses=127.0.0.1" in argv and "unix_socket_directories=" in argv
    assert argv[argv.index("-p") + 1] == "27432"
    assert layout.daemon.marker in " ".join(argv)
    if os.geteuid() == 0:
        assert argv[0].endswith("setpriv") and "--reuid=postgres" in argv


def test_a_missing_package_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setattr(postgres, "_PACKAGE_BIN", tmp_path)
    with pytest.raises(RuntimeSetupError, match="apt-get install -y postgresql"):
        postgres.server_binary("initdb")
