"""A micro-batch views job stopped by its ``--for`` or by SIGTERM abandons the batch under way
quietly: Spark interrupts it (the checkpoint replays it at the next start), and the interrupted
foreachBatch callback's traceback, which py4j logs as an error, does not reach the console. Errors
py4j logs while the job runs still do. Without Spark: the query is a stand-in that logs as py4j
does."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from conveyor.cli.common import platform_from
from conveyor.pipeline.realtime import job
from conveyor.service import setup_logging

PLATFORM = Path(__file__).resolve().parents[3] / "platform.yaml"
#: What py4j's callback server logs when the Python side of foreachBatch raises.
PY4J_LINE = "There was an exception while executing the Python Proxy on the Python Side."


def py4j_callback_failed() -> None:
    try:
        raise RuntimeError("An error occurred while calling o301.toArrow.\n: java.lang.InterruptedException")
    except RuntimeError:
        logging.getLogger("py4j.clientserver").exception(PY4J_LINE)


class Query:
    """A query whose batch is interrupted by ``stop``, or fails while it runs with ``fail_running``."""

    isActive = True
    lastProgress = None

    def __init__(self, fail_running: bool = False) -> None:
        self.fail_running = fail_running

    def awaitTermination(self, timeout: float) -> None:  # noqa: N802 (PySpark's name)
        if self.fail_running:
            self.fail_running = False
            py4j_callback_failed()
        threading.Event().wait(min(timeout, 0.05))

    def stop(self) -> None:
        py4j_callback_failed()

    def exception(self) -> None:
        return None


@pytest.fixture
def stream(monkeypatch: pytest.MonkeyPatch):
    """``job._stream`` over a stand-in query, with the commands' logging to stderr; what it returns
    and the logging set up are undone afterwards."""
    root, py4j = logging.getLogger(), logging.getLogger("py4j.clientserver")
    saved = root.handlers[:], root.level, py4j.level, logging.getLogger("conveyor").level
    platform = platform_from(PLATFORM)
    views = platform.pipeline.realtime.views
    closable = SimpleNamespace(close=lambda: None)
    writer = SimpleNamespace(rejects=closable, contracts=closable)
    metrics = SimpleNamespace(registry=None, observe_trigger=lambda *_: None)
    feed = SimpleNamespace(publish=lambda *_: None, publish_and_wait=lambda *_: None, close=lambda: None)
    monkeypatch.setattr(job, "PositionFeed", lambda *_, **__: feed)

    def run(query: Query, stop: threading.Event, seconds: float | None) -> None:
        monkeypatch.setattr(job, "start", lambda *_: query)
        setup_logging()
        job._stream(None, platform, views, writer, metrics, stop, seconds, False)

    # A job run earlier in this process (another test's) leaves py4j's logger silenced at its stop:
    # start from the logger as a new process has it.
    py4j.setLevel(logging.NOTSET)
    yield run
    root.handlers[:], _, _, _ = saved
    root.setLevel(saved[1])
    py4j.setLevel(saved[2])
    logging.getLogger("conveyor").setLevel(saved[3])


@pytest.mark.parametrize("how", ["--for", "SIGTERM"])
def test_a_stop_inside_a_batch_prints_no_py4j_traceback(stream, capsys: pytest.CaptureFixture[str], how: str) -> None:
    stop = threading.Event()
    if how == "SIGTERM":
        threading.Timer(0.1, stop.set).start()  # conveyor.service's handler sets the loop's stop
    stream(Query(), stop, 0.1 if how == "--for" else None)
    err = capsys.readouterr().err
    assert PY4J_LINE not in err and "Traceback" not in err, err


def test_a_py4j_error_while_the_job_runs_still_shows(stream, capsys: pytest.CaptureFixture[str]) -> None:
    stream(Query(fail_running=True), threading.Event(), 0.2)
    err = capsys.readouterr().err
    assert err.count(PY4J_LINE) == 1 and "InterruptedException" in err
