"""Keeps one local service running, as systemd's ``Restart=on-failure`` would:
``python -m conveyor.runtime.supervise <argv...>`` runs ``argv`` as its child and starts it again
when it ends on its own with a failure (a non-zero status, or a signal such as librdkafka's abort
under a broker restart), after a pause doubling from ``FIRST_DELAY`` to ``MAX_DELAY`` seconds, back to
the first once the child has run ``STEADY`` seconds. Status 2 is a usage or platform-file error:
starting again would fail the same way, so it ends the supervisor too. SIGTERM and SIGINT are passed
to the child, and the supervisor exits with the child's status.

The local runtime starts every service under it (conveyor.runtime.services); in production the
service manager (systemd, Kubernetes) plays this part.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from types import FrameType

FIRST_DELAY = 1.0
MAX_DELAY = 60.0
STEADY = 60.0
#: Exit statuses that starting again cannot mend.
FINAL = frozenset({0, 2})


def supervise(argv: list[str], first_delay: float = FIRST_DELAY) -> int:
    stopping = threading.Event()
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, _frame: FrameType | None) -> None:
        stopping.set()
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    delay = first_delay
    while True:
        started = time.monotonic()
        child = subprocess.Popen(argv)
        status = child.wait()
        if stopping.is_set() or status in FINAL:
            return status if status >= 0 else 128 - status
        if time.monotonic() - started >= STEADY:
            delay = first_delay
        how = f"signal {-status}" if status < 0 else f"status {status}"
        print(f"supervise: {' '.join(argv)} ended with {how}; starting it again in {delay:g} s",
              file=sys.stderr, flush=True)
        if stopping.wait(delay):
            return 128 + signal.SIGTERM
        delay = min(delay * 2, MAX_DELAY)


if __name__ == "__main__":
    sys.exit(supervise(sys.argv[1:]))
