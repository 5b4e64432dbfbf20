"""Jars resolved from Maven Central through a pom: Kafka's (conveyor/pom.xml: the broker the local
runtime starts, and the tools ops and the dispatcher run) and the pipelines' (conveyor/pipeline/pom.xml).

Maven keeps the jars in its local repository (~/.m2); we keep only the classpath it printed, in a
file named after the pom's hash, so that after the first run no network and no Maven start-up is
needed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from conveyor.errors import ConveyorError

POM = Path(__file__).with_name("pom.xml")
_AGENT = "jmx_prometheus_javaagent"


class SetupError(ConveyorError):
    """Java or Maven is missing, or Maven could not resolve the jars."""


@dataclass(frozen=True)
class Jars:
    #: Everything the broker and Kafka's tools need.
    classpath: str
    #: The Prometheus JMX exporter, loaded as a java agent rather than put on the classpath.
    jmx_agent: Path


def cache_dir() -> Path:
    return Path(os.environ.get("CONVEYOR_CACHE", Path.home() / ".cache" / "conveyor"))


def _cached_classpath_file(pom: Path, maven_repo: Path | None) -> Path:
    digest = hashlib.sha256(pom.read_bytes() + str(maven_repo).encode()).hexdigest()[:16]
    return cache_dir() / f"classpath-{digest}.txt"


def _split(entries: list[str]) -> Jars:
    agents = [e for e in entries if _AGENT in Path(e).name]
    if len(agents) != 1:
        raise SetupError(f"expected one {_AGENT} jar among the resolved jars, found {len(agents)}")
    return Jars(classpath=os.pathsep.join(e for e in entries if e not in agents), jmx_agent=Path(agents[0]))


def maven_classpath(pom: Path, what: str, maven_repo: Path | None = None) -> list[str]:
    """The jar files ``pom`` depends on at run time (test scope left out); runs Maven only when the
    cached list is missing or names a file that is gone. ``what`` names the jars in errors."""
    cached = _cached_classpath_file(pom, maven_repo)
    if cached.is_file():
        entries = cached.read_text().strip().split(os.pathsep)
        if entries and all(Path(e).is_file() for e in entries):
            return entries

    mvn = shutil.which("mvn")
    if mvn is None:
        raise SetupError(f"Maven (mvn) is not installed: it resolves {what} from Maven Central")
    cached.parent.mkdir(parents=True, exist_ok=True)
    out = cached.with_suffix(".tmp")
    argv = [mvn, "-q", "-B", "-f", str(pom), "dependency:build-classpath",
            "-Dmdep.includeScope=runtime", f"-Dmdep.outputFile={out}"]
    if maven_repo is not None:
        argv.append(f"-Dmaven.repo.local={maven_repo}")
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
        raise SetupError(f"Maven could not resolve {what} from {pom}:\n{tail}")
    out.replace(cached)
    return cached.read_text().strip().split(os.pathsep)


def resolve_jars(maven_repo: Path | None = None) -> Jars:
    """The jars named by pom.xml.

    ``maven_repo`` overrides Maven's local repository (the cold-start benchmark uses an empty one).
    """
    return _split(maven_classpath(POM, "Kafka's jars", maven_repo))


def java_binary() -> str:
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).exists():
        raise SetupError("java is not installed (Kafka 4 needs Java 17 or later)")
    return java
