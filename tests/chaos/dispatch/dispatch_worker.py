"""A dispatcher client process for the chaos test: a Subscriber whose handler takes ``--delay``
seconds, logging each delivery (``D partition offset``) and each ack a commit confirmed
(``C partition offset``) to ``--log``, flushed line by line so a SIGKILL loses nothing written."""

from __future__ import annotations

import argparse
import signal
import threading
import time

from conveyor_sdk.subscriber import Message, Subscriber


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--delay", type=float, default=0.02)
    args = parser.parse_args()
    log = open(args.log, "a", buffering=1)
    lock = threading.Lock()

    def write(kind: str, ids: list[tuple[int, int]]) -> None:
        with lock:
            log.write("".join(f"{kind} {p} {o}\n" for p, o in ids))

    def handle(message: Message) -> None:
        write("D", [message.id])
        time.sleep(args.delay)

    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    with Subscriber(args.topic, args.group, handle, args.concurrency, nodes=args.nodes.split(","),
                    token=args.token, relocate_every=1.0, on_committed=lambda ids: write("C", ids)):
        done.wait()


if __name__ == "__main__":
    main()
