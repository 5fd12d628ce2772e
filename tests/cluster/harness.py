"""K simulated nodes of one cluster on one machine, with real namespaces, real mounts and real launchers.

Why this shape: the races fsguard absorbs only show up between *nodes* of a job on a *shared* filesystem,
where each node has its own process ids and its own (stale) lookup cache. So every node of a run is:

* its own mount, pid and UTS namespace (``unshare -m -p -u --fork --mount-proc``): pids repeat across
  nodes as on a real cluster, and each node has its own host name (``node0``, ``node1``, ...);
* a node-local tmpfs at ``<root>/local`` (the same path on every node, private to each), and a private
  ``/dev/shm`` (as every real node has its own: fsguard's node-local file locks there serialize one node only);
* the shared data seen at ``<root>/shared`` through the node's own client of the cluster's *backend*:
  - ``bindfs`` (default): the backing directory ``<root>/backing`` through the node's own ``bindfs`` FUSE
    mount, whose ``entry_timeout``/``attr_timeout``/``negative_timeout`` make lookups stale between nodes for
    that long, like NFS's attribute and lookup caches;
  - ``juicefs``: one JuiceFS volume (SQLite metadata, a local-directory bucket), one ``juicefs mount`` per
    node (its own 1 s entry and attribute caches);
  - ``glusterfs``: one GlusterFS volume of this machine's ``glusterd``, one ``mount -t glusterfs`` per node;
  - ``moosefs``: a MooseFS master and chunkserver of this machine, one ``mfsmount`` per node.
  For the last three, ``<root>/backing`` is the test's own client of the volume, without caches (what the "file
  server" holds). A fresh ``os.listdir`` of a directory is never cached on any of them, which is the evidence
  fsguard relies on (``tests/cluster/backends.py``).

Nodes live for one ``Cluster.run``: a run boots K nodes, runs one command on each at once and tears them
down; the backing directory (the "file server") persists across runs of one ``cluster()``. Teardown never
depends on the command behaving: each node's init is ``unshare --kill-child``'s child, so ending that one
``unshare`` process (by pid) ends every process of the node, its FUSE daemon included, and its mount
namespace (tmpfs and bindfs mounts) goes with the last of them.

No pytest here: benchmarks use this module too.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.cluster import backends
from tests.support.net import free_port as free_port

Command = Sequence[str] | Callable[[int], Sequence[str]]

REQUIRED_TOOLS = ("unshare", "bindfs", "fusermount3", "mount", "hostname")

# The init of every node: name the node, mount its private tmpfs and its view of the shared directory,
# run the command as a child (so the mounts are undone even when it fails), and exit with its status.
_NODE_INIT = r"""
set -u
hostname "$FSG_NODE_NAME"
mount -t tmpfs -o size="$FSG_LOCAL_SIZE",mode=1777 fsguard-local "$FSG_LOCAL" || exit 90
mount -t tmpfs -o size="$FSG_LOCAL_SIZE",mode=1777 fsguard-shm /dev/shm || exit 92
eval "$FSG_MOUNT_SHARED" || exit 91
echo "$FSG_NODE_NAME up" > "$FSG_READY"
cd "$FSG_CWD"
"$@"
rc=$?
fusermount3 -u "$FSG_SHARED" 2>/dev/null || umount -l "$FSG_SHARED"
exit $rc
"""


def missing_tools() -> list[str]:
    """Programs the harness needs that are not installed (empty when it can run)."""
    missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
    if not os.path.exists("/dev/fuse"):
        missing.append("/dev/fuse")
    return missing


def unavailable_reason() -> str | None:
    """Why simulated nodes cannot run here (missing tools, no root, no namespaces), or None."""
    missing = missing_tools()
    if missing:
        return f"missing: {', '.join(missing)}"
    if os.geteuid() != 0:
        return "needs root for mount and pid namespaces"
    probe = subprocess.run(
        ["unshare", "-m", "-p", "-u", "--fork", "--mount-proc", "true"], check=False, capture_output=True, text=True
    )
    if probe.returncode != 0:
        return f"unshare failed: {probe.stderr.strip()}"
    return None


@dataclass
class NodeResult:
    """What one node's command did."""

    node: int
    returncode: int | None  # None: killed at the run's timeout
    stdout_path: Path
    stderr_path: Path

    @property
    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")


@dataclass
class RunResult:
    """One command run on every node at once."""

    name: str
    nodes: list[NodeResult]
    seconds: float
    timed_out: bool

    @property
    def ok(self) -> bool:
        return not self.timed_out and all(n.returncode == 0 for n in self.nodes)

    @property
    def returncodes(self) -> list[int | None]:
        return [n.returncode for n in self.nodes]

    def output(self) -> str:
        """Every node's stdout and stderr, labelled: for assertion messages and kept logs."""
        parts = []
        for n in self.nodes:
            parts.append(f"===== node{n.node} rc={n.returncode} stdout =====\n{n.stdout}")
            parts.append(f"===== node{n.node} stderr =====\n{n.stderr}")
        return "\n".join(parts)

    def tails(self, chars: int = 6000) -> str:
        """Each node's last ``chars`` / nodes characters of output: every node's error shows, not the last node's only."""
        share = max(chars // max(len(self.nodes), 1), 500)
        parts = []
        for n in self.nodes:
            text = f"{n.stdout}\n{n.stderr}"
            parts.append(f"===== node{n.node} rc={n.returncode} (last {share} characters) =====\n{text[-share:]}")
        return "\n".join(parts)


@dataclass
class Cluster:
    """K simulated nodes sharing one backing directory. Make one with ``cluster()``."""

    nodes: int
    root: Path
    bindfs_options: str
    local_size: str = "256m"
    backend: str = "bindfs"
    mount_shared: str = ""  # the shell command a node runs to mount its client at $FSG_SHARED (bindfs: empty)
    runs: int = 0
    _live: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def backing(self) -> Path:
        """The shared data as the "file server" holds it: read this from the test, never through a node."""
        return self.root / "backing"

    @property
    def shared(self) -> Path:
        """Where every node sees the shared data (through its own caching bindfs mount)."""
        return self.root / "shared"

    @property
    def local(self) -> Path:
        """Every node's private tmpfs (same path on all nodes; empty outside them)."""
        return self.root / "local"

    @property
    def logs(self) -> Path:
        """Per-run, per-node stdout/stderr files."""
        return self.root / "logs"

    def run(
        self,
        command: Command,
        *,
        env: Mapping[str, str] | None = None,
        timeout: float = 120,
        name: str | None = None,
        cwd: Path | None = None,
    ) -> RunResult:
        """Boot the nodes, run ``command`` (a list, or ``node -> list``) on all of them at once, tear down.

        ``env`` is the complete environment of the commands (the harness adds nothing but ``FSG_*``
        variables its node init needs). The run is killed at ``timeout`` seconds and reported as timed out.
        """
        self.runs += 1
        name = name or f"run{self.runs}"
        run_dir = self.logs / name
        run_dir.mkdir(parents=True, exist_ok=False)
        base_env = dict(os.environ if env is None else env)
        started = time.monotonic()
        results: list[NodeResult] = []
        procs: list[subprocess.Popen[bytes]] = []
        try:
            for node in range(self.nodes):
                argv = list(command(node) if callable(command) else command)
                node_env = dict(base_env)
                node_env.update(
                    FSG_NODE_NAME=f"node{node}",
                    FSG_LOCAL=str(self.local),
                    FSG_SHARED=str(self.shared),
                    FSG_BACKING=str(self.backing),
                    FSG_BINDFS_OPTS=self.bindfs_options,
                    FSG_MOUNT_SHARED=self.mount_shared or _BINDFS_MOUNT,
                    FSG_NODE_INDEX=str(node),
                    FSG_PID_SLOT=str(_pid_slot(node)),
                    FSG_LOCAL_SIZE=self.local_size,
                    FSG_READY=str(run_dir / f"node{node}.ready"),
                    FSG_CWD=str(cwd or self.root),
                )
                stdout = run_dir / f"node{node}.stdout"
                stderr = run_dir / f"node{node}.stderr"
                results.append(NodeResult(node, None, stdout, stderr))
                with open(stdout, "wb") as out, open(stderr, "wb") as err:
                    proc = subprocess.Popen(
                        [
                            "unshare",
                            "--mount",
                            "--pid",
                            "--uts",
                            "--fork",
                            "--mount-proc",
                            "--kill-child",
                            "bash",
                            "-c",
                            _NODE_INIT,
                            "fsguard-node",
                            *argv,
                        ],
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=err,
                        env=node_env,
                    )
                procs.append(proc)
                self._live.append(proc)
            deadline = started + timeout
            timed_out = False
            for result, proc in zip(results, procs, strict=True):
                try:
                    result.returncode = proc.wait(timeout=max(deadline - time.monotonic(), 0.01))
                except subprocess.TimeoutExpired:
                    timed_out = True
                    break
            return RunResult(name, results, time.monotonic() - started, timed_out)
        finally:
            for proc in procs:
                _end(proc)
                if proc in self._live:
                    self._live.remove(proc)
            for result, proc in zip(results, procs, strict=True):
                if result.returncode is None and proc.returncode is not None and proc.returncode >= 0:
                    result.returncode = proc.returncode

    def torchrun(
        self,
        python: str | Path,
        script: str | Path,
        args: Sequence[str] = (),
        *,
        nproc_per_node: int = 2,
        env: Mapping[str, str] | None = None,
        timeout: float = 120,
        name: str | None = None,
    ) -> RunResult:
        """One torchrun job over all nodes: ``torch.distributed.run --nnodes K --node-rank i ...`` per node."""
        port = free_port()

        def command(node: int) -> list[str]:
            return [
                str(python),
                "-m",
                "torch.distributed.run",
                "--nnodes",
                str(self.nodes),
                "--node-rank",
                str(node),
                "--nproc-per-node",
                str(nproc_per_node),
                "--master-addr",
                "127.0.0.1",
                "--master-port",
                str(port),
                str(script),
                *args,
            ]

        return self.run(command, env=env, timeout=timeout, name=name)

    def close(self) -> None:
        """End anything still running (normally nothing: ``run`` cleans up after itself)."""
        for proc in list(self._live):
            _end(proc)
        self._live.clear()


def _end(proc: subprocess.Popen[bytes]) -> None:
    """End one node: SIGKILL to its ``unshare`` (our own child) and to the node's init (``unshare``'s child,
    pid 1 of the node) makes the kernel kill every process of the node's pid namespace; its mounts go with
    the namespace. Returns once the init is dead, which the kernel allows only after all of them are."""
    init = _children(proc.pid)
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
    for pid in init:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while init and time.monotonic() < deadline:
        init = [pid for pid in init if _alive(pid)]
        time.sleep(0.01)


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie): a zombie init means its namespace is empty."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


_BINDFS_MOUNT = 'bindfs -o "$FSG_BINDFS_OPTS" "$FSG_BACKING" "$FSG_SHARED"'


def _retried_mount(command: Sequence[str]) -> str:
    """A node's mount command, staggered by node (0.4 s apart) and tried 3 times (20 s each): two JuiceFS clients
    mounting one SQLite volume at the same instant sometimes hang in the FUSE handshake.

    Its processes get pids of the node's own (``FSG_PID_SLOT``), set in the node's pid namespace before the mount
    and put back after it, so the ranks still get the same pids on every node. A JuiceFS client keeps a socket at
    ``/tmp/fuse_fd_comm.<pid>`` (its binary's own path), and ``/tmp`` is the machine's: with the same small pid in
    every node, two nodes' clients (of one cluster, or of two at once) could find each other's socket."""
    line = " ".join(shlex.quote(a) for a in command)
    return (
        "last=$(cat /proc/sys/kernel/ns_last_pid 2>/dev/null); "
        'echo "$FSG_PID_SLOT" >/proc/sys/kernel/ns_last_pid 2>/dev/null; '
        'sleep "$(( FSG_NODE_INDEX * 4 / 10 )).$(( FSG_NODE_INDEX * 4 % 10 ))"; '
        f'for try in 1 2 3; do timeout 20 {line} >>"$FSG_READY.mount.log" 2>&1 && mountpoint -q "$FSG_SHARED" && break; '
        'umount -l "$FSG_SHARED" 2>/dev/null; sleep 0.5; done; mountpoint -q "$FSG_SHARED"; up=$?; '
        '[ -n "$last" ] && echo "$last" >/proc/sys/kernel/ns_last_pid 2>/dev/null; [ "$up" = 0 ]'
    )


_node_slots = itertools.count()


def _pid_slot(node: int) -> int:
    """Where a node's mount processes start counting pids (``_retried_mount``): 30 apart, different for the nodes
    of one cluster and, but for one chance in a thousand, for nodes of clusters started at once by other
    processes. Below the machine's ``pid_max`` (at least 32768)."""
    return 2000 + ((os.getpid() * 37 + next(_node_slots) * 2 + node) % 1000) * 30


def bindfs_options(
    cache_s: float = 0.0,
    *,
    entry_timeout: float | None = None,
    attr_timeout: float | None = None,
    negative_timeout: float | None = None,
) -> str:
    """bindfs ``-o`` options: each timeout defaults to ``cache_s`` (0: every lookup goes to the backing)."""

    def num(value: float | None) -> str:
        return f"{cache_s if value is None else value:g}"

    return (
        f"entry_timeout={num(entry_timeout)},attr_timeout={num(attr_timeout)},negative_timeout={num(negative_timeout)}"
    )


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below ``path`` in *this* mount namespace (a leak check: should be empty)."""
    prefix = str(path)
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8") as info:
        for line in info:
            point = line.split()[4].encode().decode("unicode_escape")
            if point == prefix or point.startswith(prefix + os.sep):
                found.append(point)
    return found


@contextlib.contextmanager
def cluster(
    nodes: int = 2,
    cache_s: float | None = None,
    *,
    root: Path | None = None,
    entry_timeout: float | None = None,
    attr_timeout: float | None = None,
    negative_timeout: float | None = None,
    local_size: str = "256m",
    backend: str = "bindfs",
) -> Iterator[Cluster]:
    """A cluster of ``nodes`` simulated nodes sharing one filesystem of ``backend`` (``bindfs``, ``juicefs``,
    ``glusterfs``, ``moosefs``) whose clients cache lookups for ``cache_s`` seconds (None: bindfs 0, the others their
    own defaults, 1 s).

    ``root`` (default: a new temporary directory, removed afterwards) holds ``backing/``, the mount points
    and ``logs/``. A given ``root`` is kept, so its logs can be read after a failure.
    """
    reason = unavailable_reason() or backends.unavailable(backend)
    if reason is not None:
        raise RuntimeError(f"simulated cluster unavailable: {reason}")
    owned = root is None
    base = Path(tempfile.mkdtemp(prefix="fsguard-cluster-")) if root is None else Path(root)
    base.mkdir(parents=True, exist_ok=True)
    options = bindfs_options(
        cache_s or 0.0, entry_timeout=entry_timeout, attr_timeout=attr_timeout, negative_timeout=negative_timeout
    )
    made = Cluster(nodes=nodes, root=base, bindfs_options=options, local_size=local_size, backend=backend)
    for sub in (made.backing, made.shared, made.local, made.logs):
        sub.mkdir(exist_ok=True)
    try:
        with contextlib.ExitStack() as stack:
            if backend == "juicefs":
                volume = stack.enter_context(backends.juicefs_volume(base / "juicefs"))
                stack.enter_context(backends.juicefs_mount(volume, made.backing, cache_s=0, hide_internal=True))
                command = volume.mount_command("$FSG_SHARED", cache_s, daemon=True)
                made.mount_shared = _retried_mount(command).replace("'$FSG_SHARED'", '"$FSG_SHARED"')
            elif backend == "moosefs":
                mvolume = stack.enter_context(backends.moosefs_volume(base / "moosefs"))
                stack.enter_context(backends.moosefs_mount(mvolume, made.backing, cache_s=0))
                command = mvolume.mount_command("$FSG_SHARED", cache_s)
                made.mount_shared = _retried_mount(command).replace("'$FSG_SHARED'", '"$FSG_SHARED"')
            elif backend == "glusterfs":
                gvolume = stack.enter_context(backends.gluster_volume(base / "gluster"))
                stack.enter_context(backends.gluster_mount(gvolume, made.backing, cache_s=0))
                command = gvolume.mount_command("$FSG_SHARED", cache_s)
                made.mount_shared = _retried_mount(command).replace("'$FSG_SHARED'", '"$FSG_SHARED"')
            os.chmod(made.backing, 0o777)
            try:
                yield made
            finally:
                made.close()
    finally:
        leaked = mounts_under(base)
        for point in reversed(leaked):  # never expected: the namespaces were private
            subprocess.run(["umount", "-l", point], check=False)
        if owned:
            shutil.rmtree(base, ignore_errors=True)


def quote(argv: Sequence[str]) -> str:
    """A command line for logs and messages."""
    return " ".join(shlex.quote(a) for a in argv)
