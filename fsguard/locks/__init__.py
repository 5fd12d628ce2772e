"""Serialization (``FSGUARD_SERIALIZE=1``): guarded operations on one path run one rank at a time.

``serializer`` picks a backend once, at the first serialized call. (Not at startup: torch may only become importable
once every ``.pth`` file has run.) It imports no torch and connects to nothing:

* ``FSGUARD_LOCK=file``: ``flock`` in a private node-local directory (``locks.file``). Serializes the ranks
  of one node only: file locks on a shared (NFS) filesystem are not to be trusted.
* ``FSGUARD_LOCK=store``: a lease lock in the job's ``torch.distributed`` store (``locks.store``). Job-wide.
* ``FSGUARD_LOCK=auto`` (default): ``file`` when the launcher says every rank is on this node (it is
  cheaper, and as good there), when torch is not importable, or when there is no job store to find (no
  ``MASTER_ADDR``/``MASTER_PORT``, ``torch.distributed`` not imported); otherwise ``store``, falling back to
  ``file`` (with a record for each call that was serialized on this node only) while the store is out of
  reach, e.g. before the job's store exists.
* ``FSGUARD_LOCK=off``: no serialization.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping

from .. import config, launcher
from .base import Backend, Held, LockTimeout, Unreachable
from .serializer import Serializer

__all__ = ["Backend", "Held", "LockTimeout", "Serializer", "Unreachable", "choose", "serializer", "single_node"]

_SAME = (
    ("LOCAL_WORLD_SIZE", "WORLD_SIZE"),
    ("OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_SIZE"),
    ("MPI_LOCALNRANKS", "PMI_SIZE"),
    ("HOROVOD_LOCAL_SIZE", "HOROVOD_SIZE"),
)
_ONE = ("GROUP_WORLD_SIZE", "SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES")


def single_node(env: Mapping[str, str], launch: launcher.Launch | None) -> bool:
    """True when the launcher says every rank of the job runs on this node."""
    if launch is not None and launch.world_size == 1:
        return True
    for local, world in _SAME:
        if env.get(local, "").strip() and env.get(local, "").strip() == env.get(world, "").strip():
            return True
    return any(env.get(name, "").strip() == "1" for name in _ONE)


def _torch_importable() -> bool:
    try:
        return importlib.util.find_spec("torch") is not None  # finds, does not import
    except (ImportError, ValueError):
        return False


def choose(
    lock: str, lock_timeout: float, launch: launcher.Launch | None, env: Mapping[str, str]
) -> tuple[Backend | None, Backend | None, str | None]:
    """(backend, fallback, a note for stderr) for a ``FSGUARD_LOCK`` value; (None, None, None) for off."""
    from .file import FileBackend
    from .store import StoreBackend

    host = launch.host if launch else launcher.hostname(env)
    if lock == "off":
        return None, None, None
    if lock == "file" or (lock == "auto" and single_node(env, launch)):
        return FileBackend(host), None, None
    if lock == "store":
        return StoreBackend(lock_timeout, env), None, None
    # The job's store is torch's (its launcher's agent, or a process group's), so it needs torch here, and somewhere
    # to find it: the launcher's address, or a process group (torch.distributed in use). fsguard's own connection
    # imports no torch (``wire``), but without torch in this venv no store of this job is likely to be there.
    why = None
    if not _torch_importable():
        why = "torch is not importable"
    elif not (env.get("MASTER_ADDR") and env.get("MASTER_PORT")) and "torch.distributed" not in sys.modules:
        why = "no MASTER_ADDR/MASTER_PORT and torch.distributed not in use"
    if why is not None:
        note = None
        if launch is not None and launch.distributed:
            note = f"FSGUARD_SERIALIZE: {why}, so ranks are serialized per node only (file locks)"
        return FileBackend(host), None, note
    return StoreBackend(lock_timeout, env), FileBackend(host), None


def serializer(settings: config.Settings, launch: launcher.Launch | None) -> Serializer | None:
    """The serializer for these settings, or None for ``FSGUARD_LOCK=off``. Never raises.

    The backend itself is chosen at the first serialized call (see ``Serializer.backend``)."""
    if settings.lock == "off":
        return None
    env = dict(os.environ)

    def chosen() -> tuple[Backend, Backend | None, str | None]:
        try:
            backend, fallback, note = choose(settings.lock, settings.lock_timeout, launch, env)
        except Exception as error:  # noqa: BLE001 - node-local locks are better than none
            from .file import FileBackend

            return FileBackend(host), None, f"FSGUARD_SERIALIZE: {type(error).__name__}: {error}; using file locks"
        assert backend is not None
        return backend, fallback, note

    host = launch.host if launch else launcher.hostname(env)
    made = Serializer(chosen, settings.lock_timeout, launch.rank if launch else None, host)
    if settings.lock == "store" or (
        settings.lock == "auto" and not single_node(env, launch) and env.get("MASTER_ADDR") and env.get("MASTER_PORT")
    ):
        made.prepare_in_background()  # the job's store: connected once the program has imported torch.distributed
    return made
