"""The package as a user installs it: `python -m build` makes the SDK's and the platform's wheels
from a copy of this checkout, and a clean virtual environment takes them from there, with their
dependencies from the package index.

- The SDK alone brings only its own few libraries (no Kafka client, no pydantic) and publishes an
  event through a real gateway, which lands in Kafka.
- The platform's wheel, without extras, runs `conveyor --help`, passes `config check` on the
  existing-cluster example of docs/platform.md, and a command whose extra is missing says in one
  line which extra to install.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import orjson
import pytest

from conveyor.config import Platform
from tests.conftest import demo_event, read_topic

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
#: What the SDK may bring: its own dependencies and theirs (httpx's), and the venv's own.
SDK_DISTRIBUTIONS = {"conveyor-sdk", "httpx", "httpcore", "h11", "anyio", "idna", "certifi", "sniffio", "orjson",
                     "grpcio", "protobuf", "typing-extensions", "pip", "setuptools"}


def _run(argv: list[str], timeout: float = 600, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)


def _wheel(source: Path, out: Path) -> Path:
    built = _run([sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(source)])
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return max(out.glob("*.whl"), key=lambda p: p.stat().st_mtime)


def _example(doc: Path, heading: str) -> str:
    """The first YAML block after ``heading`` in ``doc``."""
    text = doc.read_text()
    return re.search(r"```yaml\n(.*?)```", text[text.index(heading):], re.S).group(1)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The SDK's wheel and the platform's, built from a copy (a build writes into its source tree)."""
    folder = tmp_path_factory.mktemp("wheels")
    source = folder / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".venv", ".conveyor", ".git", "tests", "bench", "docs", "__pycache__", "*.egg-info", "build", "test-artifacts",
        "spark-warehouse"))
    return _wheel(source / "sdk", folder / "dist"), _wheel(source, folder / "dist")


def test_the_sdk_installs_alone_and_publishes_then_the_platform_installs_without_extras(
        wheels, provisioned: Platform, serve_gateway, tmp_path: Path):
    sdk, core = wheels
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    pip = [str(python), "-m", "pip", "--disable-pip-version-check"]

    installed = _run([*pip, "install", "-q", str(sdk)])
    assert installed.returncode == 0, installed.stderr[-3000:]
    listed = {re.sub(r"[-_.]+", "-", d["name"]).lower() for d in orjson.loads(_run([*pip, "list", "--format", "json"]).stdout)}
    assert listed <= SDK_DISTRIBUTIONS, f"the SDK brought more than its own libraries: {listed - SDK_DISTRIBUTIONS}"

    url = serve_gateway(provisioned, "dc1")
    event = demo_event(site=f"wheel-{uuid.uuid4().hex[:8]}")
    program = ("import sys, json\nfrom conveyor_sdk.publisher import Publisher\n"
               f"with Publisher({url!r}, 'demo-adserver-token') as p:\n"
               f"    print(p.publish('ad-events', [json.loads({orjson.dumps(event).decode()!r})]))\n")
    published = _run([str(python), "-c", program], timeout=120, cwd=tmp_path)
    assert published.returncode == 0, published.stderr[-3000:]
    landed = [orjson.loads(m.value()) for m in read_topic(provisioned, "dc1", "ad-events")]
    assert [e["event_id"] for e in landed if e.get("site") == event["site"]] == [event["event_id"]]

    installed = _run([*pip, "install", "-q", str(core)])
    assert installed.returncode == 0, installed.stderr[-3000:]
    conveyor = str(venv / "bin" / "conveyor")
    helped = _run([conveyor, "--help"], timeout=120)
    assert helped.returncode == 0 and "topics" in helped.stdout, helped.stdout + helped.stderr
    own = tmp_path / "own.yaml"
    own.write_text(_example(ROOT / "docs" / "platform.md", "#### Pointing at an existing cluster"))
    checked = _run([conveyor, "config", "check", "--platform", str(own)], timeout=120)
    assert checked.returncode == 0 and "valid" in checked.stdout, checked.stdout + checked.stderr
    refused = _run([conveyor, "ops", "watch", "--platform", str(own)], timeout=120)
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode != 0 and len(lines) == 1, refused.stdout + refused.stderr
    # The watcher serves its dashboard through FastAPI, the first of the extra's libraries it imports.
    # The first of the gateway's libraries it imports is named (uvicorn, then fastapi).
    assert "pip install 'conveyor[gateway]'" in lines[0] and ("uvicorn" in lines[0] or "fastapi" in lines[0]), lines
