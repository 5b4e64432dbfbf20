"""Fixtures shared by the integration and chaos tests.

One session fixture brings up the demo platform (same platform.yaml, same contracts) in a
temporary folder on its own ports, so a demo running on this machine is left alone, and takes it
down at the end. Set CONVEYOR_TEST_PLATFORM to a platform file to run the same tests against
clusters that already run (the tests that kill brokers are then skipped: they need local ones).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka.admin import NewTopic

from conveyor import kafka
from conveyor.config import Platform, load_platform
from conveyor.runtime.local import LocalPlatform

ROOT = Path(__file__).resolve().parents[1]
EXTERNAL = os.environ.get("CONVEYOR_TEST_PLATFORM")


@pytest.fixture(scope="session")
def platform_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The demo platform file's content, pointed at a private folder and ports."""
    data = yaml.safe_load((Path(EXTERNAL) if EXTERNAL else ROOT / "platform.yaml").read_text())
    if not EXTERNAL:
        home = tmp_path_factory.mktemp("conveyor")
        data["runtime"]["home"] = str(home / "home")
        data["runtime"]["base_port"] = int(os.environ.get("CONVEYOR_TEST_BASE_PORT", "29092"))
    return data


@pytest.fixture(scope="session")
def platform_file(platform_data: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    if EXTERNAL:
        return Path(EXTERNAL)
    folder = tmp_path_factory.mktemp("platform")
    shutil.copytree(ROOT / "contracts", folder / "contracts")
    path = folder / "platform.yaml"
    path.write_text(yaml.safe_dump(platform_data, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def platform(platform_file: Path) -> Platform:
    return load_platform(platform_file)


@pytest.fixture(scope="session")
def local_platform(platform: Platform) -> Iterator[LocalPlatform | None]:
    """The running platform (None when the tests use existing clusters)."""
    if EXTERNAL:
        yield None
        return
    local = LocalPlatform(platform)
    try:
        local.up()
        yield local
    finally:
        local.down()


@pytest.fixture
def local(local_platform: LocalPlatform | None) -> LocalPlatform:
    """For tests that stop and start brokers: they need clusters of their own."""
    if local_platform is None:
        pytest.skip("kills brokers: needs the local platform, not CONVEYOR_TEST_PLATFORM")
    return local_platform


@pytest.fixture
def topic_factory(platform: Platform, local_platform: LocalPlatform | None) -> Iterator[Callable[..., str]]:
    """Creates uniquely named topics (replication from the cluster's defaults) and deletes them after."""
    created: list[tuple[str, str]] = []

    def create(cluster: str, partitions: int = 3, config: dict[str, str] | None = None) -> str:
        name = f"test-{uuid.uuid4().hex[:10]}"
        spec = platform.cluster(cluster)
        configs = {"min.insync.replicas": str(spec.default_min_insync), **(config or {})}
        topic = NewTopic(name, partitions, spec.default_replication_factor, config=configs)
        admin = kafka.admin(platform, cluster)  # kept referenced until the future resolves
        admin.create_topics([topic])[name].result()
        created.append((cluster, name))
        return name

    yield create
    for cluster, name in created:
        admin = kafka.admin(platform, cluster)
        admin.delete_topics([name])[name].result()
