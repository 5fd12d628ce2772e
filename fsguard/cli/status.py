"""``fsguard status``: is fsguard installed here, would it be active, with which launcher and settings."""

from __future__ import annotations

import argparse
import json
import os
import sys
import sysconfig
from typing import Any

from .. import config, launcher
from .._version import __version__


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object")


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


def gather(env: Any = None) -> dict[str, Any]:
    env = os.environ if env is None else env
    settings = config.load(env)
    launch = launcher.detect(env)
    argv = getattr(sys, "orig_argv", sys.argv)
    problems = list(settings.problems)
    problems += [f"{name} is not a known fsguard setting" for name in config.unknown_variables(env)]
    if settings.mode == "off":
        active, why = False, "FSGUARD is not set to 1 or force"
    elif settings.mode == "force":
        active, why = True, "FSGUARD=force"
    elif launch is None:
        active, why = False, "no distributed launcher detected"
    elif not launch.distributed:
        active, why = False, f"{launch.launcher} reports a single process"
    else:
        active, why = True, f"{launch.launcher} rank {launch.rank} of {launch.world_size}"
    try:
        from .. import patching

        patched_here = patching.installed()
    except Exception:  # noqa: BLE001
        patched_here = []
    return {
        "version": __version__,
        "python": sys.executable,
        "pth": _pth_locations(),
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
        "launcher_process": launcher.is_launcher_process(argv),
        "settings": [
            {"name": v.name, "value": env.get(v.name), "default": v.default, "help": v.help} for v in config.VARIABLES
        ],
        "problems": problems,
    }


def run(args: argparse.Namespace) -> int:
    info = gather()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    pth = ", ".join(info["pth"]) or "NOT FOUND in this interpreter's site-packages"
    print(f"fsguard {info['version']}  ({info['python']})")
    print(f"  .pth:        {pth}")
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
        print(f"    {item['name']:<22} {value:<14} default {item['default']!r}")
    if info["problems"]:
        print("  problems:")
        for problem in info["problems"]:
            print(f"    - {problem}")
    return 0
