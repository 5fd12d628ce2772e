"""Which distributed launcher started this process, and this process's place in the job.

``detect`` is the single source of that truth: records, locks and ``fsguard status`` all use its result.
"""

from __future__ import annotations

import os

from ._values import Frozen

TYPE_CHECKING = False  # not typing's: only what startup needs is imported (see bench/startup.py)
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence


class Launch(Frozen):
    """This process's place in a distributed job."""

    _fields = ("launcher", "rank", "local_rank", "world_size", "host")
    __slots__ = _fields
    launcher: str
    rank: int
    local_rank: int
    world_size: int | None  # None where the launcher does not say
    host: str

    def __init__(self, launcher: str, rank: int, local_rank: int, world_size: int | None, host: str) -> None:
        super().__init__(launcher, rank, local_rank, world_size, host)

    @property
    def distributed(self) -> bool:
        """More than one process, or an unknown count from a launcher setting only a rank."""
        return self.world_size is None or self.world_size > 1 or self.rank > 0


# Prefixes of the variables that make a process part of a job (launchers' own, and fsguard's settings): what
# code starting a clean, job-less process (the demo, the tests, the benchmarks) must leave out.
JOB_VARIABLE_PREFIXES = (
    "FSGUARD",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_",
    "ROLE_",
    "TORCHELASTIC",
    "MASTER_",
    "SLURM",
    "OMPI_",
    "PMI_",
    "PMIX",
    "HOROVOD",
    "ACCELERATE_",
    "DEEPSPEED",
    "CROSS_RANK",
    "MPI_LOCALRANKID",
)


def _int(env: Mapping[str, str], *names: str) -> int | None:
    for name in names:
        raw = env.get(name)
        if raw is not None and raw.strip() != "":
            try:
                return int(raw.strip())
            except ValueError:
                continue
    return None


def _slurm_size(env: Mapping[str, str]) -> int | None:
    # The step's own count first: ``srun -n 1`` inside an allocation of many is one task.
    return _int(env, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS")


def hostname(env: Mapping[str, str]) -> str:
    """The node name a launcher reports, else the kernel's (no socket import)."""
    for name in ("SLURMD_NODENAME", "HOROVOD_HOSTNAME", "FSGUARD_HOST"):
        if env.get(name):
            return env[name]
    return os.uname().nodename


def _torch_launcher(env: Mapping[str, str]) -> str:
    if any(k.startswith("ACCELERATE_") for k in env):
        return "accelerate"
    if any(k.startswith("DEEPSPEED") or k.startswith("DS_") for k in env) or "CROSS_RANK" in env:
        return "deepspeed"
    if "TORCHELASTIC_RUN_ID" in env or any(k.startswith("TORCHELASTIC_") for k in env):
        return "torchrun"
    return "torch.distributed"


def detect(env: Mapping[str, str]) -> Launch | None:
    """The launcher environment of this process, or None when none is recognised."""
    host = hostname(env)
    rank = _int(env, "RANK")
    if rank is not None and (_int(env, "WORLD_SIZE") is not None or _int(env, "LOCAL_RANK") is not None):
        return Launch(_torch_launcher(env), rank, _int(env, "LOCAL_RANK") or 0, _int(env, "WORLD_SIZE"), host)
    rank = _int(env, "OMPI_COMM_WORLD_RANK")
    if rank is not None:
        return Launch(
            "openmpi", rank, _int(env, "OMPI_COMM_WORLD_LOCAL_RANK") or 0, _int(env, "OMPI_COMM_WORLD_SIZE"), host
        )
    rank = _int(env, "HOROVOD_RANK")
    if rank is not None:
        return Launch("horovod", rank, _int(env, "HOROVOD_LOCAL_RANK") or 0, _int(env, "HOROVOD_SIZE"), host)
    rank = _int(env, "PMI_RANK")
    if rank is not None:
        return Launch("mpich", rank, _int(env, "MPI_LOCALRANKID", "PMI_LOCAL_RANK") or 0, _int(env, "PMI_SIZE"), host)
    rank = _int(env, "PMIX_RANK")
    if rank is not None:
        return Launch("pmix", rank, _int(env, "PMIX_LOCAL_RANK") or 0, _int(env, "PMIX_SIZE", "PMI_SIZE"), host)
    rank = _int(env, "SLURM_PROCID")
    if rank is not None:
        if "SLURM_STEP_ID" not in env and "SLURM_STEPID" not in env:
            return None  # a batch script or salloc's shell (SLURM_PROCID=0, SLURM_NTASKS of the allocation)
        return Launch("slurm", rank, _int(env, "SLURM_LOCALID") or 0, _slurm_size(env), host)
    return None


# What a launcher tells every rank of one job alike, on every node: together, the job's identity. Not
# MASTER_ADDR: nodes of one job may spell its master differently (a name on one, an address on another), and a
# rank that took its peers for another job would re-raise their duplicates. torchrun's default run id is
# "none": two such jobs on one port look alike; on one node, fsguard's journal of what each job made
# (``fsguard.journal``) and the job's start tell them apart.
_JOB_VARIABLES = (
    "TORCHELASTIC_RUN_ID",
    "MASTER_PORT",
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "SLURM_STEPID",
    "OMPI_MCA_ess_base_jobid",
    "PMIX_NAMESPACE",
)
# Which attempt of the job this is: a restarted attempt is another job as far as its files go.
_ATTEMPT_VARIABLES = ("TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT")
# Counted by each node's agent alone: when one node's workers fail, that node's agent counts a restart, and the
# other nodes' agents restart theirs (the rendezvous changed) without counting. Ranks of one attempt on two nodes
# may carry different values, so a tag differing only here is this job's, its attempt told by time.
NODE_ATTEMPT = "TORCHELASTIC_RESTART_COUNT"
# The part of a single-node job's tag that names its node: two such jobs on two nodes are two jobs.
HOST_PART = "host="
_LOOPBACK = ("localhost", "ip6-localhost", "ip6-loopback", "::1", "0:0:0:0:0:0:0:1")
# (a job's size, its size on this node): equal, every rank is on this node
_LOCAL_SIZES = (
    ("WORLD_SIZE", "LOCAL_WORLD_SIZE"),
    ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("PMI_SIZE", "MPI_LOCALNRANKS"),
)


def same_job(tag: str, other: str) -> bool:
    """Whether two job tags name one job, whatever each node's own restart count (``NODE_ATTEMPT``)."""
    prefix = NODE_ATTEMPT + "="
    return [p for p in tag.split(";") if not p.startswith(prefix)] == [
        p for p in other.split(";") if not p.startswith(prefix)
    ]


def single_node(env: Mapping[str, str]) -> bool:
    """Whether the launcher states that every rank of this job is on this node. Its counts first: a job's size
    and its size here (torchrun's ``WORLD_SIZE`` and ``LOCAL_WORLD_SIZE``, Open MPI's, MPICH's) equal; one node
    in the SLURM step (``SLURM_STEP_NUM_NODES``, else the job's). Where it states none, a loopback
    ``MASTER_ADDR``: no other node could reach it (simulated nodes sharing one loopback state their counts)."""
    for size, local in _LOCAL_SIZES:
        total, here = _int(env, size), _int(env, local)
        if total is not None and here is not None:
            return total == here
    if "SLURM_PROCID" in env:
        nodes = _int(env, "SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES")
        if nodes is not None:
            return nodes == 1
    master = env.get("MASTER_ADDR", "").strip().lower().strip("[]")
    return master.startswith("127.") or master in _LOOPBACK


def is_single_node(tag: str | None) -> bool:
    """Whether a job tag is a single-node job's (it names its host: ``HOST_PART``)."""
    return tag is not None and any(part.startswith(HOST_PART) for part in tag.split(";"))


def job_tag(env: Mapping[str, str]) -> str | None:
    """This job's and this attempt's identity, as its launcher states it. Its launcher states it to every rank alike:
    ``TORCHELASTIC_RUN_ID=3f2a...;MASTER_PORT=29500;TORCHELASTIC_RESTART_COUNT=0``. In a single-node job its host is
    added (``;host=node7``). None where nothing names the job; then "made by this job" is told by time alone. Kept in
    fsguard's own journal (``fsguard.journal``), never on users' files."""
    job = [f"{name}={env[name]}" for name in _JOB_VARIABLES if env.get(name)]
    host = [HOST_PART + hostname(env)] if single_node(env) else []
    if not job and not host:
        return None
    return ";".join(job + [f"{name}={env[name]}" for name in _ATTEMPT_VARIABLES if env.get(name)] + host)


def restart_count(env: Mapping[str, str]) -> int:
    """Which attempt of a torchrun job this is (``TORCHELASTIC_RESTART_COUNT``; 0: the first, or not torchrun)."""
    return _int(env, "TORCHELASTIC_RESTART_COUNT") or 0


_LAUNCHER_SCRIPTS = ("torchrun", "deepspeed", "accelerate", "mpirun", "mpiexec", "srun", "horovodrun")
_LAUNCHER_MODULES = (
    "torch.distributed.run",
    "torch.distributed.launch",
    "deepspeed.launcher.runner",
    "deepspeed.launcher.launch",
    "accelerate.commands.launch",
    "accelerate.commands.accelerate_cli",
)


_OPTIONS_WITH_VALUE = ("-W", "-X", "--check-hash-based-pycs")


def is_launcher_process(argv: Sequence[str]) -> bool:
    """True for the launcher's own agent (e.g. torchrun under ``srun``), which must not be patched.

    Only the program itself counts: ``argv[0]`` (a ``torchrun`` entry point), or the script or ``-m`` module the
    interpreter runs. Never the program's own arguments: ``train.py --out runs/torchrun`` is a rank.
    """
    args = list(argv)
    if not args:
        return False
    if os.path.basename(args[0]) in _LAUNCHER_SCRIPTS:
        return True
    i = 1
    while i < len(args):
        arg = args[i]
        if arg == "-m":
            return i + 1 < len(args) and args[i + 1] in _LAUNCHER_MODULES
        if arg.startswith("-m") and len(arg) > 2:
            return arg[2:] in _LAUNCHER_MODULES
        if arg in ("-c", "-"):
            return False
        if not arg.startswith("-"):
            return os.path.basename(arg) in _LAUNCHER_SCRIPTS  # the script the interpreter runs
        i += 2 if arg in _OPTIONS_WITH_VALUE else 1
    return False


def activation(mode: str, launch: Launch | None, argv: Sequence[str] | None) -> tuple[bool, str]:
    """Whether fsguard patches a process (``mode`` from ``FSGUARD``, ``argv``: its command line), and why.

    The one rule, used by startup and by ``fsguard status``. ``argv`` None means a command line that is not a launcher's
    agent (a rank's). ``status`` runs in a process of its own, so its own command line says nothing.
    """
    if mode == "off":
        return False, "FSGUARD is not set to 1 or force"
    if mode == "force":
        return True, "FSGUARD=force"
    if launch is None:
        return False, "no distributed launcher detected"
    if not launch.distributed:
        return False, f"{launch.launcher} reports a single process"
    if argv is not None and is_launcher_process(argv):
        return False, f"the launcher's own agent ({' '.join(argv[:3])}) is never patched, only its ranks"
    return True, f"{launch.launcher} rank {launch.rank} of {launch.world_size}"
