"""`conveyor deploy`: the demo platform's units pass `systemd-analyze verify` (Debian's systemd) and
its manifests pass `kubernetes-validate` against Kubernetes 1.31, both offline; a unit and a
manifest each broken on purpose fail them, so the checks can fail. Both start every service with
the same command line."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conveyor.config import duration_text, load_platform
from conveyor.deploy.kubernetes import cron
from conveyor.deploy.services import services

ROOT = Path(__file__).resolve().parents[3]
PLATFORM = ROOT / "platform.yaml"
#: The conveyor executable of this interpreter's environment: systemd-analyze checks it exists.
PROGRAM = str(Path(sys.executable).parent / "conveyor")
KUBERNETES = "1.31.0"


def _conveyor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "conveyor", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("deploy")
    units, manifests = out / "units", out / "conveyor.k8s.yaml"
    for command in (["systemd", "--out", str(units), "--program", PROGRAM],
                    ["kubernetes", "--out", str(manifests), "--image", "conveyor:test"]):
        run = _conveyor("deploy", *command, "--platform", str(PLATFORM))
        assert run.returncode == 0, run.stderr
        # The demo's clusters are the local runtime's: a deployment elsewhere needs their bootstrap.
        assert "clusters.central has no bootstrap" in run.stderr
    return units, manifests


def _verify(unit: Path) -> subprocess.CompletedProcess[str]:
    analyze = shutil.which("systemd-analyze")
    assert analyze is not None, "systemd-analyze is missing: make setup installs Debian's systemd"
    return subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60)


def _validate(path: Path) -> subprocess.CompletedProcess[str]:
    validator = Path(sys.executable).parent / "kubernetes-validate"
    return subprocess.run([str(validator), "-k", KUBERNETES, "--strict", str(path)],
                          capture_output=True, text=True, timeout=120)


def test_every_unit_passes_systemd_analyze_and_a_broken_one_does_not(written: tuple[Path, Path], tmp_path: Path):
    units, _ = written
    files = sorted(units.glob("*.service"))
    assert [f.name for f in files] == sorted(f"{s.name}.service" for s in services(load_platform(PLATFORM), "p", "h"))
    for unit in files:
        checked = _verify(unit)
        assert (checked.returncode, checked.stdout + checked.stderr) == (0, ""), unit.name
        text = unit.read_text()
        assert "Restart=on-failure" in text and f"EnvironmentFile=-/etc/conveyor/{unit.stem}.env" in text
        state = f"conveyor/{unit.stem.removeprefix('conveyor-')}"
        assert f"StateDirectory={state}\n" in text and f"Environment=CONVEYOR_HOME=%S/{state}\n" in text
    broken = tmp_path / "conveyor-broken.service"
    broken.write_text(files[0].read_text().replace(PROGRAM, str(tmp_path / "no-such-conveyor")))
    assert _verify(broken).returncode != 0


def test_the_manifests_pass_kubernetes_validate_and_a_broken_one_does_not(written: tuple[Path, Path],
                                                                          tmp_path: Path):
    _, path = written
    checked = _validate(path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    documents = list(yaml.safe_load_all(path.read_text()))
    kinds = {(d["kind"], d["metadata"]["name"]) for d in documents}
    assert {("StatefulSet", "conveyor-dispatcher"), ("CronJob", "conveyor-lake"), ("Deployment", "conveyor-gateway-dc1"),
            ("Deployment", "conveyor-gateway-dc2"), ("Deployment", "conveyor-replicator"),
            ("Deployment", "conveyor-views"), ("Service", "conveyor-gateway-dc1")} <= kinds
    gateway = next(d for d in documents if d["metadata"]["name"] == "conveyor-gateway-dc1" and d["kind"] == "Deployment")
    container = gateway["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 18080, "scheme": "HTTPS"}
    assert container["livenessProbe"]["tcpSocket"] == {"port": 18080}  # alive while its clusters are down
    assert {"name": "CONVEYOR_HOME", "value": "/var/lib/conveyor"} in container["env"]  # its working folder
    assert {"name": "tls", "mountPath": "/etc/conveyor/tls", "readOnly": True} in container["volumeMounts"]
    watcher = next(d for d in documents if d["metadata"]["name"] == "conveyor-watcher" and d["kind"] == "Deployment")
    assert watcher["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]["path"] == "/healthz"
    broken = tmp_path / "broken.yaml"
    gateway["spec"]["replicas"] = "two"
    broken.write_text(yaml.safe_dump(gateway))
    assert _validate(broken).returncode != 0


def test_a_unit_and_a_manifest_start_a_service_with_the_same_command_line(written: tuple[Path, Path]):
    units, path = written
    containers = {}
    for document in yaml.safe_load_all(path.read_text()):
        spec = document.get("spec", {})
        pod = spec.get("template") or spec.get("jobTemplate", {}).get("spec", {}).get("template")
        if pod:
            containers[document["metadata"]["name"]] = pod["spec"]["containers"][0]
    for unit in units.glob("*.service"):
        exec_start = next(line for line in unit.read_text().splitlines() if line.startswith("ExecStart="))
        words = exec_start.removeprefix("ExecStart=").split()
        container = containers[unit.stem]
        if unit.stem == "conveyor-lake":  # runs on the CronJob's schedule: one run each
            assert container["args"][-1] == "--once" and words[words.index("--every") + 1] == "10m"
            continue
        expected = [w.replace("${CONVEYOR_ADVERTISE}", "$(CONVEYOR_ADVERTISE)") for w in words[1:]]
        assert container["command"] + container["args"] == ["conveyor", *expected], unit.stem


@pytest.mark.parametrize(("every", "schedule"), [("10m", "*/10 * * * *"), ("1m", "* * * * *"), ("1h", "0 * * * *"),
                                                 ("6h", "0 */6 * * *")])
def test_a_run_every_minutes_or_hours_is_a_cron_schedule(every: str, schedule: str):
    assert cron(every) == schedule


@pytest.mark.parametrize("every", ["7m", "5h", "90s", "m", "0m"])
def test_a_period_cron_cannot_say_is_refused_with_what_it_can(every: str):
    with pytest.raises(ValueError, match="minutes|hours"):
        cron(every)


@pytest.mark.parametrize(("seconds", "text"), [(600.0, "10m"), (7200.0, "2h"), (90.0, "90s"), (3600.0, "1h")])
def test_the_lake_schedule_is_written_in_its_largest_whole_unit(seconds: float, text: str):
    assert duration_text(seconds) == text


def test_a_lake_schedule_no_cronjob_can_keep_is_refused_naming_the_setting(tmp_path: Path):
    data = yaml.safe_load(PLATFORM.read_text())
    data.setdefault("pipeline", {}).setdefault("lake", {})["every"] = "7m"
    for name, spec in data["topics"].items():  # the file moves: keep its contracts found
        if spec.get("contract"):
            spec["contract"] = str(ROOT / spec["contract"])
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    run = _conveyor("deploy", "kubernetes", "--out", str(tmp_path / "k.yaml"), "--platform", str(path))
    assert run.returncode == 2 and "pipeline.lake.every:" in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert not (tmp_path / "k.yaml").exists()
    lake = next(s for s in services(load_platform(path), "/etc/conveyor/platform.yaml", "0.0.0.0")
                if s.part == "lake")
    assert lake.args[lake.args.index("--every") + 1] == "7m"  # a unit's --every takes any period


def test_units_and_manifests_are_written_without_the_secrets_they_name(tmp_path: Path):
    shutil.copytree(ROOT / "contracts", tmp_path / "contracts")
    data = yaml.safe_load(PLATFORM.read_text())
    central = data["clusters"]["central"]
    central.pop("security", None)
    central["bootstrap"] = "kafka-central:9092"
    central["credentials"] = {"gateway": {"sasl.username": "gateway", "sasl.password": "${CONVEYOR_UNSET_PASSWORD}"}}
    data["pipeline"]["realtime"]["redis"] = "${CONVEYOR_UNSET_REDIS}"  # a URL, checked where it is resolved
    data["ops"]["notify_url"] = "file:/etc/conveyor/no-such-hook"
    (tmp_path / "platform.yaml").write_text(yaml.safe_dump(data))
    out = tmp_path / "conveyor.k8s.yaml"
    run = _conveyor("deploy", "kubernetes", "--platform", str(tmp_path / "platform.yaml"), "--out", str(out))
    assert run.returncode == 0, run.stderr
    config = next(d for d in yaml.safe_load_all(out.read_text()) if d["kind"] == "ConfigMap")
    assert "${CONVEYOR_UNSET_PASSWORD}" in config["data"]["platform.yaml"]  # each host resolves it
    run = _conveyor("deploy", "systemd", "--platform", str(tmp_path / "platform.yaml"), "--out", str(tmp_path / "u"),
                    "--program", PROGRAM)
    assert run.returncode == 0, run.stderr
