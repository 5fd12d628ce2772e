"""``fsguard status``: is fsguard installed here, would it be active, with which launcher and settings."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import sysconfig
from typing import Any

from .. import config, launcher
from .._version import __version__


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--command",
        metavar="CMDLINE",
        help="judge a process started with this command line (e.g. 'torchrun --nproc-per-node 4 train.py'): "
        "a launcher's own agent is never patched. Default: a rank's command line",
    )


def _pth_locations() -> list[str]:
    found = []
    candidates = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    try:
        import site

        candidates.update(site.getsitepackages())
        candidates.add(site.getusersitepackages())
    except Exception:  # noqa: BLE001
        pass
    for directory in sorted(c for c in candidates if c):
        path = os.path.join(directory, "fsguard.pth")
        if os.path.isfile(path):
            found.append(path)
    return found


# PEP 829: from 3.15 a ``fsguard.start`` beside ``fsguard.pth`` runs instead of the ``.pth``'s import line;
# from 3.18 import lines of ``.pth`` files are ignored.
START_FROM = (3, 15)
PTH_IMPORTS_UNTIL = (3, 18)


def startup_file(pth: list[str], version: tuple[int, ...] = tuple(sys.version_info[:2])) -> dict[str, Any]:
    """Which start-up file runs fsguard here, and which one ran. ``file``: the start-up file this interpreter runs for
    fsguard; None where none would (a ``.pth`` alone on 3.18+). ``ran``: the one that ran in this process; None where
    FSGUARD was off at its start."""
    from .. import _boot

    runs: str | None = None
    for path in pth:
        start = path[: -len(".pth")] + ".start"
        if version >= START_FROM and os.path.isfile(start):
            runs = start
        elif version < PTH_IMPORTS_UNTIL:
            runs = path
        if runs:
            break
    return {"file": runs, "ran": _boot.started_by()}


def gather(env: Any = None, command: str | None = None) -> dict[str, Any]:
    """What startup would decide in a process of this environment. The process is a rank's, or one started as
    ``command``.

    Not this process's own command line: ``fsguard status`` is never a launcher's agent. Judging its own ``argv`` would
    always say "not the launcher", whatever the job looks like.
    """
    env = os.environ if env is None else env
    settings = config.load(env)
    launch = launcher.detect(env)
    argv = shlex.split(command) if command is not None else None
    problems = list(settings.problems)
    problems += [f"{name} is not a known fsguard setting" for name in config.unknown_variables(env)]
    active, why = launcher.activation(settings.mode, launch, argv)
    try:
        from .. import patching

        patched_here = patching.installed()
    except Exception:  # noqa: BLE001
        patched_here = []
    pth = _pth_locations()
    return {
        "version": __version__,
        "python": sys.executable,
        "pth": pth,
        "startup": startup_file(pth),
        "enabled": settings.mode,
        "would_patch": active,
        "reason": why,
        "launch": None
        if launch is None
        else {
            "launcher": launch.launcher,
            "rank": launch.rank,
            "local_rank": launch.local_rank,
            "world_size": launch.world_size,
            "host": launch.host,
        },
        "operations": list(settings.ops) if active else [],
        "patched_in_this_process": patched_here,
        "command": command,
        "launcher_process": None if argv is None else launcher.is_launcher_process(argv),
        "settings": [
            {
                "name": v.name,
                "value": env.get(v.name),
                "default": v.default,
                "effective": _shown(getattr(settings, v.field)),
                "help": v.help,
            }
            for v in config.VARIABLES
        ],
        "problems": problems,
        "filesystem": filesystem(os.getcwd(), settings.settle_s),
        "identity": identity(env, launch, os.getcwd()),
    }


def _shown(value: object) -> Any:
    """A setting's effective value as JSON shows it (operations as their comma-separated text)."""
    return ",".join(value) if isinstance(value, tuple) else value


def identity(env: Any, launch: launcher.Launch | None, path: str) -> dict[str, Any]:
    """How a rank tells "made by a peer of this job" here. By this node's journal of what each job's guarded
    mkdir/makedirs created, and by time. The journal (``fsguard.journal``) is in fsguard's own node-local directory:
    nothing on users' files. It is complete for a single-node job."""
    from .. import journal

    tag = launcher.job_tag(env) if launch is not None and launch.distributed else None
    where = journal.directory() if tag is not None else None
    if tag is None:
        how = "time only: no launcher variable names the job (FSGUARD_FRESH_S)"
    elif where is None:
        how = "time only: no private node-local directory for the journal (/dev/shm, /tmp) (FSGUARD_FRESH_S)"
    elif launcher.is_single_node(tag):
        how = f"this node's journal of what each job made ({where}), complete for this single-node job, then time"
    else:
        how = f"this node's journal of what each job made ({where}); peers on other nodes by time (FSGUARD_FRESH_S)"
    return {"job_tag": tag, "journal": where, "single_node": launcher.is_single_node(tag), "how": how}


def filesystem(path: str, settle_s: float) -> dict[str, Any]:
    """What the rules decide from on ``path``'s mount: the probe and the waits."""
    from .. import mounts

    found = mounts.mount_of(path)
    return {
        "path": path,
        "mount_point": found.point or None,
        "type": found.fstype or "unknown",
        "lookups_may_be_stale": found.stale,
        "shared": found.shared,
        "cache_s": found.cache_s,
        "wait_s": mounts.wait_budget_for(found, settle_s),
        "probe": found.probe(),
        "waits": found.waits(settle_s),
    }


def run(args: argparse.Namespace) -> int:
    info = gather(command=args.command)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    pth = ", ".join(info["pth"]) or "NOT FOUND in this interpreter's site-packages"
    print(f"fsguard {info['version']}  ({info['python']})")
    print(f"  .pth:        {pth}")
    startup = info["startup"]
    ran = f"ran in this process: {startup['ran']}" if startup["ran"] else "did not start fsguard in this process"
    if startup["file"]:
        print(f"  startup:     {os.path.basename(startup['file'])} ({ran})")
    else:
        print(f"  startup:     NONE: this Python runs no fsguard start-up file (a .pth alone on 3.18+) ({ran})")
    print(f"  enabled:     {info['enabled']}")
    print(f"  would patch: {'yes' if info['would_patch'] else 'no'} ({info['reason']})")
    launch = info["launch"]
    if launch:
        print(
            f"  launcher:    {launch['launcher']}  rank {launch['rank']}  local rank {launch['local_rank']}  "
            f"world size {launch['world_size']}  host {launch['host']}"
        )
    else:
        print("  launcher:    none detected")
    print(f"  operations:  {', '.join(info['operations']) or '-'}")
    print("  settings:")
    for item in info["settings"]:
        value = "(unset)" if item["value"] is None else repr(item["value"])
        effect = "" if item["value"] is None else f" (in effect: {item['effective']!r})"
        print(f"    {item['name']:<22} {value:<14} default {item['default']!r}{effect}")
    fs = info["filesystem"]
    print(f"  filesystem:  {fs['type']} at {fs['mount_point'] or '?'} (for {fs['path']})")
    print(f"    probe:     {fs['probe']}")
    print(f"    waits:     {fs['waits']}")
    ident = info["identity"]
    print(f"  identity:    {ident['how']}")
    if ident["job_tag"]:
        print(f"    job tag:   {ident['job_tag']}")
    if info["problems"]:
        print("  problems:")
        for problem in info["problems"]:
            print(f"    - {problem}")
    return 0
