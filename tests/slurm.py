"""A real single-machine SLURM for the tests: slurmctld and two slurmd (``fsgn0``, ``fsgn1``) on this host.

Debian's ``slurm-wlm`` 22.05 is built so that ``slurmd -N <name>`` runs several node daemons on one host
(each node its own ``Port``), and it still ships ``auth/none`` and ``cred/none``, so no munge daemon is
needed; from 23.11 on (no ``auth/none``) the fixture uses ``auth/slurm`` with a key file next to
``slurm.conf``. Everything lives in a private directory: its own ``slurm.conf`` (``SLURM_CONF``), state,
spool, logs and ports; ``/etc/slurm`` is never read or written. The daemons run in the foreground
(``-D``) as children of the test process and end with it (``stop``).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("slurmctld", "slurmd", "srun", "sbatch", "salloc", "sinfo", "scancel")
NODES = ("fsgn0", "fsgn1")
CPUS = 4  # per node, whatever the machine has (config_overrides): four tasks fit on one node


def missing() -> str | None:
    """Why SLURM cannot run here, or None."""
    absent = [tool for tool in DAEMONS if shutil.which(tool) is None]
    if absent:
        return f"slurm-wlm is not installed (missing {', '.join(absent)})"
    if os.geteuid() != 0:
        return "slurm-wlm: the test cluster's daemons need root"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _version() -> tuple[int, int]:
    out = subprocess.run(["slurmd", "-V"], capture_output=True, text=True, check=False).stdout
    match = re.search(r"(\d+)\.(\d+)", out)
    return (int(match[1]), int(match[2])) if match else (0, 0)


class Slurm:
    """The running test cluster: ``env`` is what a command needs to reach it (``SLURM_CONF``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.conf = root / "slurm.conf"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.version = _version()

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def log(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def write_config(self) -> None:
        host = socket.gethostname()
        auth = "none" if self.version < (23, 11) else "slurm"
        if auth == "slurm":
            (self.root / "slurm.key").write_bytes(os.urandom(1024))
            (self.root / "slurm.key").chmod(0o600)
        for sub in ("state", *(f"spool/{n}" for n in NODES)):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        nodes = "\n".join(
            f"NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 Port={_free_port()} CPUs={CPUS} State=UNKNOWN"
            for name in NODES
        )
        self.conf.write_text(
            f"""ClusterName=fsguardtest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/{auth}
CredType=cred/{auth}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={self.root}/state
SlurmdSpoolDir={self.root}/spool/%n
SlurmctldPidFile={self.root}/slurmctld.pid
SlurmdPidFile={self.root}/slurmd-%n.pid
SlurmctldLogFile={self.root}/slurmctld.log
SlurmdLogFile={self.root}/slurmd-%n.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
# sbatch --wait polls every 2 s while 2 < MinJobAge/2, else 8 s, then 32 s: a 11 s job took 42 s to wait for
MinJobAge=4
{nodes}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""
        )

    def start(self, timeout_s: float = 60) -> None:
        self.write_config()
        env = {**os.environ, **self.env}
        devnull = subprocess.DEVNULL
        self.procs.append(
            subprocess.Popen(["slurmctld", "-D", "-i", "-f", str(self.conf)], env=env, stdout=devnull, stderr=devnull)
        )
        for name in NODES:
            self.procs.append(
                subprocess.Popen(
                    ["slurmd", "-D", "-N", name, "-f", str(self.conf)], env=env, stdout=devnull, stderr=devnull
                )
            )
        deadline = time.monotonic() + timeout_s
        states = ""
        while time.monotonic() < deadline:
            states = subprocess.run(
                ["sinfo", "-h", "-N", "-o", "%N %t"], env=env, capture_output=True, text=True, check=False
            ).stdout
            if states.count("idle") == len(NODES):
                return
            if any(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(
            f"slurm-wlm: the test cluster did not come up (sinfo: {states.strip()!r}); "
            f"slurmctld.log: {self.log('slurmctld')[-1500:]}; slurmd-fsgn0.log: {self.log('slurmd-fsgn0')[-1500:]}"
        )

    def stop(self) -> None:
        env = {**os.environ, **self.env}
        if any(p.poll() is None for p in self.procs):
            subprocess.run(["scancel", "--full", "--user", "root"], env=env, capture_output=True, check=False)
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.procs.clear()
