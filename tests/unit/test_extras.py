"""Each package extra carries what its service imports: a host with only the core and one extra
installed runs that service. Checked by importing each service's modules in a fresh interpreter
where the other extras' libraries cannot be imported."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The libraries only an extra brings, by the module names they are imported under.
ONLY_IN = {
    "gateway": {"fastapi", "uvicorn"},
    "ops": {"fastapi", "uvicorn"},
    "dispatch": {"grpc_health", "grpc_reflection"},
    "pipeline": {"pyspark", "pyarrow", "pandas", "packaging"},
}
#: What each install must import; "core" is the CLI and the parts every host runs.
ENTRY = {
    "core": ["conveyor.cli", "conveyor.replicate.worker", "conveyor.topics.provisioner", "conveyor.runtime.local"],
    "gateway": ["conveyor.gateway.app"],
    "ops": ["conveyor.web.app", "conveyor.ops.watch"],
    "dispatch": ["conveyor.dispatch.server", "conveyor_sdk.subscriber"],
    "pipeline": ["conveyor.pipeline.lake", "conveyor.pipeline.realtime.job"],
}

_BLOCKER = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            raise ImportError(f"{name} is not installed on this host (blocked by the test)")
        return None
sys.meta_path.insert(0, Block())
for module in MODULES:
    __import__(module)
if "conveyor.cli" in MODULES:
    import conveyor.cli
    for argv in (["--help"], ["topics", "--help"], ["replicate", "worker", "--help"], ["gateway", "--help"],
                 ["lake", "--help"], ["views", "--help"]):
        try:
            conveyor.cli.app(argv, standalone_mode=False)
        except SystemExit as exit:
            assert not exit.code, (argv, exit.code)
"""


@pytest.mark.parametrize("extra", list(ENTRY))
def test_an_install_with_one_extra_imports_its_service(extra: str) -> None:
    blocked = set().union(*(libs for name, libs in ONLY_IN.items() if name != extra)) - ONLY_IN.get(extra, set())
    program = f"BLOCKED = {sorted(blocked)!r}\nMODULES = {ENTRY[extra]!r}\n" + _BLOCKER
    done = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_extras_declare_those_libraries() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    distributions = {"fastapi": "fastapi", "uvicorn": "uvicorn", "grpc_health": "grpcio-health-checking",
                     "grpc_reflection": "grpcio-reflection", "pyspark": "pyspark",
                     "pyarrow": "pyspark[sql]", "pandas": "pyspark[sql]", "packaging": "packaging"}
    for extra, modules in ONLY_IN.items():
        for module in modules:
            assert any(spec.startswith(distributions[module]) for spec in declared[extra]), (extra, module)
    assert declared["all"] == ["conveyor[gateway,dispatch,pipeline,ops]"]
