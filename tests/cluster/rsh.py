"""An ``rsh`` agent for Open MPI between simulated nodes: ``mpirun --mca plm_rsh_agent "python rsh.py"``.

mpirun on node0 starts its daemon on node1 the way it would with ssh: ``<agent> node1 <command...>``. A
node cannot enter a sibling node's pid namespace itself (``setns`` only goes down the tree), so the agent
asks the test process, which runs on the host, over an abstract Unix socket (nodes share the network
namespace): ``Server`` finds node1's init and runs the command there with ``nsenter`` (mount, UTS and pid
namespaces: node1's host name, mounts and pids), streaming its output back, then its exit status.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path


def _send(sock: socket.socket, kind: bytes, data: bytes) -> None:
    sock.sendall(kind + struct.pack("!I", len(data)) + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return out


def node_init(node: str, marker: str) -> int | None:
    """The host pid of a simulated node's init: the process whose pid is 1 in its own namespace and whose
    environment names this node and this run (``marker``: its ``FSG_READY`` file)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        nspid = next((line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")), [])
        named = f"FSG_NODE_NAME={node}".encode() in environ and marker.encode() in b"\0".join(environ)
        if named and len(nspid) == 2 and nspid[1] == "1":
            return int(entry)
    return None


class Server:
    """Runs commands on simulated nodes for agents; one thread per connection, ended by ``close``."""

    def __init__(self, name: str, marker: str) -> None:
        self.name = name
        self.marker = marker
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind("\0" + name)
        self.sock.listen(8)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.requests: list[list[str]] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            size = struct.unpack("!I", _recv_exact(conn, 4))[0]
            request = json.loads(_recv_exact(conn, size))
            self.requests.append(request["argv"])
            pid = node_init(request["host"], self.marker)
            if pid is None:
                _send(conn, b"E", f"rsh: no simulated node {request['host']!r}\n".encode())
                _send(conn, b"X", b"255")
                return
            proc = subprocess.Popen(
                ["nsenter", "-t", str(pid), "-m", "-u", "-p", "--", "/bin/sh", "-c", " ".join(request["argv"])],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=request["env"],
            )
            self.procs.append(proc)
            assert proc.stdout is not None
            for line in proc.stdout:
                try:
                    _send(conn, b"O", line)
                except OSError:
                    break
            code = proc.wait()
            try:
                _send(conn, b"X", str(code).encode())
            except OSError:
                pass

    def close(self) -> None:
        self.sock.close()
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def agent(argv: list[str]) -> int:
    """``rsh.py HOST COMMAND...`` with ``FSG_RSH_SOCKET`` naming the server."""
    host, command = argv[0], argv[1:]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect("\0" + os.environ["FSG_RSH_SOCKET"])
    request = json.dumps({"host": host, "argv": command, "env": dict(os.environ)}).encode()
    sock.sendall(struct.pack("!I", len(request)) + request)
    while True:
        try:
            kind = _recv_exact(sock, 1)
            data = _recv_exact(sock, struct.unpack("!I", _recv_exact(sock, 4))[0])
        except EOFError:
            return 255
        if kind == b"X":
            return int(data)
        sys.stdout.buffer.write(data)
        sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(agent(sys.argv[1:]))
