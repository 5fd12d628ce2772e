"""A client of c10d's TCPStore server, in Python: the five requests fsguard's store backend makes.

torchrun's agent (and ``torch.distributed``'s rendezvous) serve a TCPStore. A rank that has not imported
``torch.distributed`` would pay seconds of CPU and hundreds of MB to import it only for fsguard's store requests
(measured here: 3.3 s of CPU for ``import torch.distributed``). This client speaks the server's wire protocol with a
socket instead: the request byte, then strings and byte vectors as a native ``uint64`` length and their bytes, and
answers as ``int64``s, vectors or one byte (``torch/csrc/distributed/c10d/TCPStoreBackend.hpp``). Keys carry the
``/`` that c10d's client puts before every key, so its clients and this one meet on the same keys.

A connection is checked when it opens: ``VALIDATE`` with the server's magic number, then a ``PING`` whose nonce the
server must send back. A server that answers otherwise raises ``WireMismatch`` (``connection.Requests`` then opens
c10d's own client). A request that fails or times out closes the socket; the next request opens a new one.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import TypeVar

T = TypeVar("T")

MAGIC = 0x3C85F7CE  # c10d::detail::validationMagicNumber
KEY_PREFIX = "/"  # c10d's TCPStore client puts it before every key
HANDSHAKE_S = 10.0  # the longest wait for the ping's echo: a server of another protocol may never answer

# c10d::detail::QueryType (its order is the wire's byte values)
VALIDATE, SET, COMPARE_SET, GET, ADD, CHECK, WAIT, GETNUMKEYS, DELETE_KEY = range(9)
PING = 13
STOP_WAITING = 0  # c10d::detail::WaitResponseType

_U8 = struct.Struct("=B")
_U32 = struct.Struct("=I")
_U64 = struct.Struct("=Q")
_I64 = struct.Struct("=q")


class WireMismatch(ConnectionError):
    """The server did not answer the handshake as c10d's TCPStore server does."""


class WireTimeout(TimeoutError):
    """A request got no answer in time (its text says "timeout", as c10d's does)."""


def _string(text: str | bytes) -> bytes:
    data = text.encode("utf-8") if isinstance(text, str) else text
    return _U64.pack(len(data)) + data


def _key(key: str) -> bytes:
    return _string(KEY_PREFIX + key)


class StoreClient:
    """One connection to a TCPStore server, with the methods of ``torch.distributed.TCPStore`` that fsguard calls.

    Thread-safe: one request at a time. ``timeout`` bounds connecting and each request (a ``wait``: its own)."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.host = host
        self.port = port
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._bound = 0.0  # the open socket's SO_RCVTIMEO/SO_SNDTIMEO, seconds
        with self._lock:
            self._connected()

    # --- the requests ------------------------------------------------------------------------------------

    def set(self, key: str, value: bytes | str) -> None:
        self._ask(_U8.pack(SET) + _key(key) + _string(value), _nothing)

    def compare_set(self, key: str, expected: bytes | str, desired: bytes | str) -> bytes:
        request = _U8.pack(COMPARE_SET) + _key(key) + _string(expected) + _string(desired)
        return self._ask(request, self._vector)

    def add(self, key: str, amount: int) -> int:
        return self._ask(_U8.pack(ADD) + _key(key) + _I64.pack(amount), self._int64)

    def delete_key(self, key: str) -> bool:
        return self._ask(_U8.pack(DELETE_KEY) + _key(key), self._int64) > 0

    def wait(self, keys: list[str], timeout: timedelta | float | None = None) -> None:
        """Block until every key exists. A wait that runs out raises ``WireTimeout`` and closes the connection (the
        server forgets a closed connection's waits)."""
        bound = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
        request = _U8.pack(WAIT) + _U64.pack(len(keys)) + b"".join(_key(k) for k in keys)
        if self._ask(request, self._byte, self.timeout if bound is None else bound) != STOP_WAITING:
            raise ConnectionError("the store's answer to a wait was not STOP_WAITING")

    def close(self) -> None:
        with self._lock:
            self._drop()

    # --- the connection ----------------------------------------------------------------------------------

    def _ask(self, request: bytes, answer: Callable[[socket.socket], T], bound: float | None = None) -> T:
        with self._lock:
            sock = self._connected()
            bound = self.timeout if bound is None else bound
            try:
                if bound != self._bound:
                    self._bound = _bounded(sock, bound)
                sock.sendall(request)
                return answer(sock)
            except (TimeoutError, BlockingIOError) as error:  # SO_RCVTIMEO ran out: EAGAIN
                self._drop()
                raise WireTimeout(f"the store's answer: timeout after {bound} s") from error
            except BaseException:
                self._drop()  # a half-read answer would be misread by the next request
                raise

    def _connected(self) -> socket.socket:
        if self._sock is not None and self._pid == os.getpid():
            return self._sock
        self._sock, self._pid = None, os.getpid()  # a forked child's copy of the socket is its parent's
        sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(min(self.timeout, HANDSHAKE_S))
            nonce = int.from_bytes(os.urandom(4), "little")
            sock.sendall(_U8.pack(VALIDATE) + _U32.pack(MAGIC) + _U8.pack(PING) + _U32.pack(nonce))
            try:
                echoed = _U32.unpack(_exactly(sock, _U32.size))[0]
            except (ConnectionError, TimeoutError) as error:
                raise WireMismatch(f"{self.host}:{self.port} closed or did not answer a TCPStore ping") from error
            if echoed != nonce:
                raise WireMismatch(f"{self.host}:{self.port} answered a TCPStore ping with another number")
            # Blocking, bounded by the kernel (SO_RCVTIMEO): a socket timeout of Python's own would poll before
            # every send and receive, two more system calls a request.
            sock.settimeout(None)
            self._bound = _bounded(sock, self.timeout)
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        return sock

    def _drop(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None and self._pid == os.getpid():
            sock.close()

    @staticmethod
    def _int64(sock: socket.socket) -> int:
        return int(_I64.unpack(_exactly(sock, _I64.size))[0])

    @staticmethod
    def _byte(sock: socket.socket) -> int:
        return int(_exactly(sock, 1)[0])

    @staticmethod
    def _vector(sock: socket.socket) -> bytes:
        return _exactly(sock, _U64.unpack(_exactly(sock, _U64.size))[0])


def _bounded(sock: socket.socket, seconds: float) -> float:
    """Bound each receive and send on blocking ``sock`` to ``seconds``; return them. Kept within 1 ms to 11 days."""
    whole = min(max(seconds, 0.001), 1e6)
    timeval = struct.pack("@ll", int(whole), int((whole % 1) * 1_000_000))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)
    return seconds


def _nothing(sock: socket.socket) -> None:
    """A ``SET``'s answer: none."""


def _exactly(sock: socket.socket, size: int) -> bytes:
    """``size`` bytes from ``sock``; ``ConnectionError`` when it closes first."""
    chunks, left = [], size
    while left:
        chunk = sock.recv(left)
        if not chunk:
            raise ConnectionError("the store closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
