"""SIGKILL a dispatcher node and some client processes mid-stream, restart them.

Two dispatcher nodes (``python -m conveyor dispatch serve``) and four client processes
(``dispatch_worker.py``) share a 3-partition topic while more messages are produced. Each round
SIGKILLs one node and two clients at a moment when part of the stream is acked, then restarts
them. Every message must end acked (its ack in a Kafka commit, as confirmed to a client); no message
whose ack was confirmed before a kill is delivered after it; duplicates of unacked messages (what
at-least-once allows) are counted and reported. One round by default;
``CONVEYOR_CHAOS_DISPATCH_ROUNDS=5`` runs more, through the same code.

Both backends run it. With the share backend there is no commit to read back: the run ends when
every message was delivered and no delivery happened for longer than a record lock lasts; then,
with every process stopped, a share consumer of the same group must find nothing left to acquire
(every record acknowledged).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from conveyor.config import Platform
from conveyor.dispatch.share_reader import LOCK_MARGIN
from tests.conftest import eventually, free_port
from tests.dispatchkit import (
    MAILER_TOKEN,
    committed_offsets,
    dispatch_platform,
    end_offsets,
    produce,
    unacked_in_share_group,
)

pytestmark = pytest.mark.chaos

ROUNDS = int(os.environ.get("CONVEYOR_CHAOS_DISPATCH_ROUNDS", "1"))
WORKER = Path(__file__).with_name("dispatch_worker.py")
BATCH = 2000


@dataclass
class Logs:
    """Parses the client logs; ``mark`` remembers how far each file was read at a kill."""

    folder: Path
    marks: list[tuple[set[tuple[int, int]], dict[Path, int]]] = field(default_factory=list)

    def lines(self, since: dict[Path, int] | None = None) -> Iterator[tuple[str, tuple[int, int]]]:
        for path in sorted(self.folder.glob("client-*.log")):
            with path.open("rb") as f:
                f.seek((since or {}).get(path, 0))
                for line in f.read().decode().splitlines():
                    kind, partition, offset = line.split()
                    yield kind, (int(partition), int(offset))

    def confirmed(self) -> set[tuple[int, int]]:
        return {i for kind, i in self.lines() if kind == "C"}

    def delivered(self) -> set[tuple[int, int]]:
        return {i for kind, i in self.lines() if kind == "D"}

    def quiet_for(self, seconds: float) -> bool:
        """No client log changed for ``seconds``: no delivery, no confirmation."""
        newest = max((path.stat().st_mtime for path in self.folder.glob("client-*.log")), default=0.0)
        return time.time() - newest >= seconds

    def mark(self) -> None:
        sizes = {path: path.stat().st_size for path in self.folder.glob("client-*.log")}
        self.marks.append((self.confirmed(), sizes))


class Processes:
    def __init__(self, folder: Path, platform_path: Path, topic: str, group: str) -> None:
        self.folder, self.platform_path, self.topic, self.group = folder, platform_path, topic, group
        self.ports = [(free_port(), free_port()) for _ in range(2)]
        self.nodes: list[subprocess.Popen[bytes] | None] = [None, None]
        self.clients: list[subprocess.Popen[bytes]] = []
        self._spawned = 0

    @property
    def addresses(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port, _ in self.ports)

    def start_node(self, i: int) -> None:
        port, metrics = self.ports[i]
        with (self.folder / f"node-{i}.log").open("ab") as log:
            self.nodes[i] = subprocess.Popen(
                [sys.executable, "-m", "conveyor", "dispatch", "serve", "-p", str(self.platform_path),
                 "--port", str(port), "--metrics-port", str(metrics)], stdout=log, stderr=subprocess.STDOUT)
        eventually(lambda: _healthy(metrics), 60, f"dispatcher node {i} to answer /healthz")

    def start_client(self) -> None:
        self._spawned += 1
        log = self.folder / f"client-{self._spawned}.log"
        self.clients.append(subprocess.Popen(
            [sys.executable, str(WORKER), "--nodes", self.addresses, "--topic", self.topic, "--group", self.group,
             "--token", MAILER_TOKEN, "--log", str(log), "--concurrency", "4", "--delay", "0.02"],
            stderr=(self.folder / f"client-{self._spawned}.err").open("ab")))

    def tails(self) -> str:
        """The end of each node's and client's log, to say why a stream stalled."""
        logs = [*sorted(self.folder.glob("node-*.log")), *sorted(self.folder.glob("client-*.err"))]
        return "\n".join(f"--- {path.name}:\n{path.read_text(errors='replace')[-1500:]}" for path in logs)

    def stop_all(self) -> None:
        for process in [*self.nodes, *self.clients]:
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in [*self.nodes, *self.clients]:
            if process is not None:
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()


def _healthy(metrics_port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{metrics_port}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(params=["classic", "share"])
def chaos_topic(request: pytest.FixtureRequest, platform_file: Path, platform_data: dict[str, Any],
                provisioned: Platform, topic_factory: Callable[..., str]) -> tuple[Path, Platform, str]:
    topic = topic_factory("central", 3)
    path, platform = dispatch_platform(platform_file, platform_data, topic, commit_interval="200ms",
                                       ack_deadline="10s", backend=request.param)
    return path, platform, topic


def test_killed_nodes_and_clients_lose_nothing_and_never_redeliver_committed_acks(
        chaos_topic: tuple[Path, Platform, str], tmp_path: Path) -> None:
    path, platform, topic = chaos_topic
    share = platform.dispatch.backend == "share"
    procs = Processes(tmp_path, path, topic, f"mailer.{uuid.uuid4().hex[:6]}")
    logs = Logs(tmp_path)
    total = BATCH * (ROUNDS + 1)
    try:
        procs.start_node(0)
        procs.start_node(1)
        for _ in range(4):
            procs.start_client()
        produce(platform, topic, BATCH)
        for round_ in range(ROUNDS):
            # More messages arrive while the kills happen.
            producer = threading.Thread(target=produce, args=(platform, topic, BATCH, BATCH * (round_ + 1)))
            producer.start()
            target = BATCH * round_ + BATCH // 3
            try:
                eventually(lambda: len(logs.confirmed()) >= target, 120, f"{target} acks confirmed")
            except AssertionError as slow:
                raise AssertionError(f"{slow}: {len(logs.confirmed())} confirmed, {len(logs.delivered())} delivered; "
                                     f"{procs.tails()}") from None
            victim = round_ % 2
            os.kill(procs.nodes[victim].pid, signal.SIGKILL)  # type: ignore[union-attr]
            for client in procs.clients[-2:]:
                os.kill(client.pid, signal.SIGKILL)
            logs.mark()
            procs.nodes[victim].wait()  # type: ignore[union-attr]
            for client in procs.clients[-2:]:
                client.wait()
            procs.clients = procs.clients[:-2]
            time.sleep(1)  # the dead node's partitions move after the session timeout either way
            procs.start_node(victim)
            procs.start_client()
            procs.start_client()
            producer.join()
        ends = end_offsets(platform, topic)
        if share:
            everything = {(p, o) for p, end in ends.items() for o in range(end)}
            # A confirmation can die with a killed client or with the node that applied its ack, so
            # the logs cannot say what is acked; the share group can (below), once nothing is
            # locked any more: every record delivered, and no delivery for longer than a lock.
            eventually(lambda: everything <= logs.delivered() and logs.quiet_for(
                platform.dispatch.ack_deadline + LOCK_MARGIN + 2), 300, f"all {total} messages handled")
        else:
            # Every message acked: the group's commit reaches each partition's end. (A client killed
            # right after acking never hears its confirmation, so the logs alone cannot say it.)
            eventually(lambda: {p: c[0] for p, c in committed_offsets(platform, topic, procs.group).items()} == ends,
                       240, f"the commit to reach the end of every partition ({total} messages)")
    finally:
        procs.stop_all()
    if share:
        # One more message, which nobody handles, shows that the look would see an unacked record.
        produce(platform, topic, 1, total)
        after = end_offsets(platform, topic)
        unhandled = {(p, o) for p, end in after.items() for o in range(ends[p], end)}
        seen = unacked_in_share_group(platform, topic, procs.group, unhandled)
        assert unhandled <= seen, "the look into the share group missed the one unhandled message"
        left = seen - unhandled
        assert not left, f"{len(left)} messages were never acked, e.g. {sorted(left)[:5]}"

    assert sum(ends.values()) == total
    deliveries = Counter(i for kind, i in logs.lines() if kind == "D")
    assert set(deliveries) == {(p, o) for p, end in ends.items() for o in range(end)}
    for n, (acked_before, sizes) in enumerate(logs.marks, 1):
        after = {i for kind, i in logs.lines(sizes) if kind == "D"}
        again = acked_before & after
        assert not again, f"kill {n}: {len(again)} messages acked before it were delivered again: {sorted(again)[:5]}"
    duplicates = sum(count - 1 for count in deliveries.values())
    unconfirmed = len(set(deliveries) - logs.confirmed())
    report = (f"dispatch chaos: {total} messages, {ROUNDS} kill round(s), {sum(deliveries.values())} deliveries, "
              f"{duplicates} duplicates of unacked messages ({len([c for c in deliveries.values() if c > 1])} "
              f"messages), 0 acked messages delivered again, {unconfirmed} acks committed whose confirmation "
              "died with a killed process")
    print(report)
    (tmp_path / "report.txt").write_text(report)
