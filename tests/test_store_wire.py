"""fsguard's own TCPStore client (fsguard.locks.wire) against real c10d TCPStore servers, both of torch's backends.

Ground truth is c10d's own client on the same server: each request's answer and the keys it leaves must be the
ones c10d's client gives and sees. Then the client in use: a serialized rank of a venv without torch goes through
the job's store, and a server that does not answer the handshake gets c10d's client instead.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from fsguard.locks.wire import StoreClient, WireMismatch
from tests.conftest import run_python

dist = pytest.importorskip("torch.distributed")


def _server(libuv: bool) -> Any:
    return getattr(dist, "TCPStore")(  # noqa: B009 - not re-exported for type checkers
        "127.0.0.1", 0, is_master=True, wait_for_workers=False, use_libuv=libuv, timeout=timedelta(seconds=30)
    )


def _c10d(port: int) -> Any:
    return getattr(dist, "TCPStore")(  # noqa: B009
        "127.0.0.1", port, is_master=False, wait_for_workers=False, timeout=timedelta(seconds=10)
    )


@pytest.fixture(params=[True, False], ids=["libuv", "classic"])
def server(request: pytest.FixtureRequest) -> Iterator[Any]:
    made = _server(request.param)
    assert made.libuvBackend is request.param
    yield made
    del made


def test_each_request_answers_as_c10ds_client_does(server: Any) -> None:
    ours, theirs = StoreClient("127.0.0.1", server.port, 10.0), _c10d(server.port)
    # compare_set: the same sequence through each client, on keys of its own, gives the same answers
    steps = [(b"", b"v1"), (b"x", b"v2"), (b"v1", b"v3"), (b"v3", b""), (b"", b"v4")]
    answers = {}
    for name, client in (("ours", ours), ("theirs", theirs)):
        answers[name] = [bytes(client.compare_set(f"cas-{name}", old, new)) for old, new in steps]
        answers[name].append(bytes(client.compare_set(f"missing-{name}", b"expected", b"new")))
    assert answers["ours"] == answers["theirs"], answers
    # each key a request of ours leaves is the key c10d's client reads, and the other way round
    ours.set("a", b"from ours")
    assert theirs.get("a") == b"from ours"
    theirs.set("b", b"from c10d")
    assert ours.compare_set("b", b"from c10d", b"swapped") == b"swapped" and theirs.get("b") == b"swapped"
    assert [ours.add("n", 3), theirs.add("n", 2), ours.add("n", -1), ours.add("n", 0)] == [3, 5, 4, 4]
    assert theirs.get("n") == b"4"
    assert ours.delete_key("n") is True and ours.delete_key("n") is False and not theirs.check(["n"])
    assert theirs.num_keys() == server.num_keys()


def test_a_wait_wakes_when_a_peer_sets_the_key_and_times_out_otherwise(server: Any) -> None:
    ours, theirs = StoreClient("127.0.0.1", server.port, 10.0), _c10d(server.port)
    threading.Timer(0.3, lambda: theirs.set("later", b"1")).start()
    started = time.monotonic()
    ours.wait(["later"], timedelta(seconds=10))
    assert 0.25 < time.monotonic() - started < 5
    ours.wait(["later", "a"] if theirs.add("a", 1) else [], 1.0)  # every key there: at once
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="timeout"):  # connection.Wakes tells a timeout by this word
        ours.wait(["never"], 0.3)
    assert time.monotonic() - started < 5
    # the connection a timed-out wait closed is opened again by the next request, and the server forgot the wait
    assert ours.add("after", 1) == 1
    theirs.set("never", b"1")
    assert ours.add("after", 1) == 2


class _Listener:
    """A TCP server on a free port: each connection is handed to ``serve`` in a thread."""

    def __init__(self, serve: Any) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._serve = serve
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._serve, args=(conn, self.accepted), daemon=True).start()


def _closes(conn: socket.socket, _: int) -> None:
    conn.recv(64)
    conn.close()


def _answers_another_number(conn: socket.socket, _: int) -> None:
    conn.recv(64)
    conn.sendall(b"\x00\x00\x00\x00")
    time.sleep(1)
    conn.close()


def _never_answers(conn: socket.socket, _: int) -> None:
    conn.recv(64)
    time.sleep(5)
    conn.close()


@pytest.mark.parametrize("serve", [_closes, _answers_another_number, _never_answers])
def test_a_server_that_is_no_tcpstore_fails_the_handshake(serve: Any) -> None:
    listener = _Listener(serve)
    started = time.monotonic()
    with pytest.raises(WireMismatch):
        StoreClient("127.0.0.1", listener.port, 1.0)
    assert time.monotonic() - started < 4  # bounded by the client's timeout


def test_a_server_that_refuses_the_handshake_gets_c10ds_client(server: Any) -> None:
    """The first connection that sends anything is closed at once (as by a server of another protocol); later ones
    reach the real server. fsguard's connection is then c10d's own client, which works, and its address says so."""
    from fsguard.locks.connection import Requests

    talked: list[int] = []

    def proxy(conn: socket.socket, number: int) -> None:
        first = conn.recv(65536)
        if not first:  # the plain connect that checks something listens
            conn.close()
            return
        talked.append(number)
        if len(talked) == 1:
            conn.close()
            return
        upstream = socket.create_connection(("127.0.0.1", server.port))
        upstream.sendall(first)
        for source, sink in ((conn, upstream), (upstream, conn)):
            threading.Thread(target=_pipe, args=(source, sink), daemon=True).start()

    listener = _Listener(proxy)
    requests = Requests(10.0, {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(listener.port)}, lambda: None)
    client = requests.connect()
    assert isinstance(client, getattr(dist, "TCPStore")), type(client)  # noqa: B009
    assert (
        requests.address == f"127.0.0.1:{listener.port} (c10d's client: the server did not answer fsguard's handshake)"
    )
    client.set("through the proxy", b"1")
    assert _c10d(server.port).get("through the proxy") == b"1"
    assert len(talked) >= 2


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    while data := source.recv(65536):
        sink.sendall(data)
    sink.close()


TORCHLESS_RANK = r"""
import importlib.util, json, os, sys
os.makedirs(os.path.join(os.environ["FSG_BASE"], "results"))
print(json.dumps({"torch installed": importlib.util.find_spec("torch") is not None,
                  "imported": sorted(m for m in sys.modules if m.split(".")[0] == "torch")}))
"""


def test_a_rank_without_torch_serializes_through_the_jobs_store(bare_python: Path, tmp_path: Path) -> None:
    """A rank of a venv without torch (fsguard and wrapt only), serialized with ``FSGUARD_LOCK=store``: its
    makedirs takes its lock in the job's store (the store holds fsguard's keys afterwards)."""
    server = _server(True)
    before = server.num_keys()
    env = dict(
        RANK="1",
        LOCAL_RANK="1",
        WORLD_SIZE="2",
        TORCHELASTIC_RUN_ID="test",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(server.port),
        FSGUARD="1",
        FSGUARD_SERIALIZE="1",
        FSGUARD_LOCK="store",
        FSGUARD_LOG=str(tmp_path / "logs"),
        FSG_BASE=str(tmp_path),
    )
    result = run_python(bare_python, TORCHLESS_RANK, env)
    assert result.returncode == 0 and not result.stderr, result.stderr
    assert json.loads(result.stdout) == {"torch installed": False, "imported": []}
    assert (tmp_path / "results").is_dir()
    assert server.num_keys() > before  # the lock's ticket counters: the store was used
