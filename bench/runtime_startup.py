"""Time from `conveyor up` to every broker ready, cold and warm, and resident memory per node.

Cold: an empty Maven local repository, so every jar comes from Maven Central, and fresh storage.
Warm: jars cached, fresh storage (format + start). Restart: jars cached, storage already formatted
(what `conveyor up` does after `conveyor down`). Runs the demo platform on its own ports and folder.

    python -m bench.runtime_startup [--warm-runs 3] [--skip-cold]
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path


from bench.common import arguments, demo_data, write_results
from conveyor.config import parse_platform
from conveyor.runtime.local import LocalPlatform
from conveyor.runtime.smoke import smoke

ROOT = Path(__file__).resolve().parents[1]


def _platform(home: Path, base_port: int):
    data = demo_data()
    data["runtime"]["home"] = str(home)
    data["runtime"]["base_port"] = base_port
    return parse_platform(data, root=ROOT)


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _timed_up(local: LocalPlatform) -> float:
    started = time.monotonic()
    local.up()
    return time.monotonic() - started


def run(warm_runs: int, skip_cold: bool, base_port: int) -> dict:
    result: dict = {"brokers": 5, "jvms": 6, "warm_seconds": [], "restart_seconds": []}
    with tempfile.TemporaryDirectory(prefix="conveyor-bench-") as tmp:
        tmp_path = Path(tmp)
        if not skip_cold:
            local = LocalPlatform(_platform(tmp_path / "cold", base_port), maven_repo=tmp_path / "m2")
            try:
                result["cold_seconds"] = round(_timed_up(local), 2)
            finally:
                local.down()
        for run_index in range(warm_runs):
            local = LocalPlatform(_platform(tmp_path / f"warm{run_index}", base_port))
            try:
                result["warm_seconds"].append(round(_timed_up(local), 2))
                if run_index == 0:
                    for cluster in local.platform.clusters:
                        smoke(local.clients, cluster, messages=1000)
                    state = local.state()
                    result["rss_mib"] = {
                        s.node.name: round(_rss_mib(s.pid), 1) for c in state.clusters for s in c.nodes if s.pid
                    }
                    if state.redis and state.redis.pid:
                        result["rss_mib"]["redis"] = round(_rss_mib(state.redis.pid), 1)
            finally:
                local.down()
            local = LocalPlatform(_platform(tmp_path / f"warm{run_index}", base_port))
            try:
                result["restart_seconds"].append(round(_timed_up(local), 2))
            finally:
                local.down()
    result["warm_median_seconds"] = statistics.median(result["warm_seconds"])
    result["restart_median_seconds"] = statistics.median(result["restart_seconds"])
    brokers = [v for k, v in result["rss_mib"].items() if "-broker-" in k]
    result["broker_rss_mib_mean"] = round(statistics.mean(brokers), 1)
    return result


def main() -> None:
    parser = arguments(__doc__, 12092)
    parser.add_argument("--warm-runs", type=int, default=3)
    parser.add_argument("--skip-cold", action="store_true", help="skip the run with an empty Maven repository")
    args = parser.parse_args()
    result = run(args.warm_runs, args.skip_cold, args.base_port)
    write_results("runtime_startup", result, show=True)


if __name__ == "__main__":
    main()
