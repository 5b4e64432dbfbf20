"""A connection flood for the edges' tests: processes that each open thousands of TCP connections
from a loopback address of their own (127.0.0.2, 127.0.0.3...) and hold them idle, never starting
TLS or sending a byte, as the clients that shut the demo's gateway did.

Processes are spawned, not forked: the test's process runs gRPC and librdkafka threads, which a
fork would copy mid-call. Each raises its soft descriptor limit to the hard one, opens its
connections only once every process is ready (so the flood lands at once, within the edge's
handshake deadline), and answers the test over a pipe; every loop is bounded in count and time.
Imports only the standard library, so a process starts in a fraction of a second.
"""

from __future__ import annotations

import errno
import multiprocessing
import resource
import socket
import struct
import time
from collections import Counter
from dataclasses import dataclass
from multiprocessing.connection import Connection

#: IP_BIND_ADDRESS_NO_PORT (Linux): a socket bound to an address takes its port at connect, from
#: the ports that address has not used towards this destination, not from every port it holds.
_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)
#: SO_LINGER on with 0 s: closing resets, so the test leaves no TIME_WAIT behind.
_RESET = struct.pack("ii", 1, 0)


@dataclass(frozen=True)
class Held:
    """One process's flood: connections tried, connected, and how many the server has closed."""

    attempted: int
    connected: int
    closed_by_server: int
    #: Why the connects that failed did, by error name.
    errors: tuple[tuple[str, int], ...] = ()


def _hold(conn: Connection, source: str, host: str, port: int, count: int, seconds: float) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    socks: list[socket.socket] = []
    try:
        conn.send("ready")
        if conn.recv() != "go":
            return
        deadline = time.monotonic() + seconds
        attempted = 0
        errors: Counter[str] = Counter()
        while attempted < count and time.monotonic() < deadline:
            attempted += 1
            sock = socket.socket()
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
                sock.setsockopt(socket.IPPROTO_IP, _NO_PORT, 1)
                sock.bind((source, 0))
                sock.settimeout(max(0.1, min(5.0, deadline - time.monotonic())))
                sock.connect((host, port))
            except OSError as err:
                sock.close()  # a connect the server's accept queue never took: an attempt, not held
                errors[errno.errorcode.get(err.errno or 0, type(err).__name__)] += 1
                continue
            sock.setblocking(False)
            socks.append(sock)
        failed = tuple(sorted(errors.items()))
        conn.send(Held(attempted, len(socks), _closed(socks), failed))
        while conn.recv() == "count":  # the test waits with a bound of its own
            conn.send(Held(attempted, len(socks), _closed(socks), failed))
    finally:
        for sock in socks:
            sock.close()
        conn.close()


def _closed(socks: list[socket.socket]) -> int:
    """Connections the server has closed (end of stream, or a reset)."""
    return sum(1 for sock in socks if _is_closed(sock))


def _is_closed(sock: socket.socket) -> bool:
    for _ in range(16):  # what a server sends before it closes (an HTTP/2 GOAWAY) is read and dropped
        try:
            if sock.recv(65536) == b"":
                return True
        except BlockingIOError:
            return False
        except OSError as err:
            return err.errno in (errno.ECONNRESET, errno.EPIPE, errno.ETIMEDOUT)
    return False


class Flood:
    """``processes`` processes of ``per_process`` connections each to host:port, the first from
    127.0.0.2, the next from 127.0.0.3 and so on. Use as a context manager: every process and
    socket is gone when it ends."""

    def __init__(self, host: str, port: int, processes: int = 4, per_process: int = 5_000,
                 seconds: float = 30.0) -> None:
        self.sources = [f"127.0.0.{2 + i}" for i in range(processes)]
        context = multiprocessing.get_context("spawn")
        self._pipes: list[Connection] = []
        self._processes = []
        for source in self.sources:
            ours, theirs = context.Pipe()
            process = context.Process(target=_hold, args=(theirs, source, host, port, per_process, seconds),
                                      name=f"flood-{source}", daemon=True)
            self._pipes.append(ours)
            self._processes.append(process)
        self._seconds = seconds

    def __enter__(self) -> Flood:
        """Start the processes and wait until each is ready to connect."""
        for process in self._processes:
            process.start()
        try:
            for pipe in self._pipes:
                assert pipe.poll(60), "a flood process did not start within 60 s"
                assert pipe.recv() == "ready"
        except BaseException:
            self.__exit__()
            raise
        return self

    def start(self) -> list[Held]:
        """Let every process connect at once, and wait for what each holds."""
        for pipe in self._pipes:
            pipe.send("go")
        return self._answers(self._seconds + 30)

    def held(self) -> list[Held]:
        for pipe in self._pipes:
            pipe.send("count")
        return self._answers(30)

    def _answers(self, timeout: float) -> list[Held]:
        answers = []
        for pipe in self._pipes:
            assert pipe.poll(timeout), "a flood process did not answer"
            answers.append(pipe.recv())
        return answers

    def __exit__(self, *_: object) -> None:
        for pipe in self._pipes:
            try:
                pipe.send("stop")
            except OSError:
                pass
        for process in self._processes:
            if process.pid is not None:
                process.join(30)
                if process.is_alive():
                    process.kill()
                    process.join(10)
        for pipe in self._pipes:
            pipe.close()


def total(held: list[Held]) -> Held:
    errors: Counter[str] = Counter()
    for h in held:
        errors.update(dict(h.errors))
    return Held(sum(h.attempted for h in held), sum(h.connected for h in held),
                sum(h.closed_by_server for h in held), tuple(sorted(errors.items())))
