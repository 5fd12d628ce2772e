"""Interpreter start-up with fsguard installed (issue 2): what every Python process of the environment pays.

Arms, each ``python -c pass`` (or ``import wrapt``) in a fresh venv, run interleaved in random order:

* not installed: a venv without fsguard (same wrapt), the baseline;
* installed, FSGUARD unset: the ``.pth`` line only (target: ratio <= 1.01, no fsguard import at all);
* FSGUARD=1 without a launcher: settings and launcher detection, then nothing patched;
* enabled: ``FSGUARD=force``, and ``FSGUARD=1`` with torchrun's variables;
* ``import wrapt`` alone, in the venv without fsguard (wrapt's share) and in fsguard's venv with FSGUARD
  unset (wrapt imported the same way as enabled fsguard imports it: fsguard's share).

fsguard's own share (target <= 5 ms) is measured twice:

* wall time: enabled minus disabled in the same venv, paired round by round (both arms run in every round,
  so slow drift of the machine cancels), median over the rounds: everything enabling costs, wrapt's
  extension included (since issue 37 enabled start-up imports that alone, not the whole wrapt package, which
  a program pays only when it imports wrapt itself: the ``import wrapt`` arms);
* ``-X importtime``: the self time of every module the enabled run imports that ``import wrapt`` alone
  does not (fsguard's modules and what only they pull in). Whichever of fsguard and wrapt imports a module
  both need first, it counts as wrapt's, so the figure does not depend on import order. Import time only:
  it does not see config parsing or patching.

With ``--wrapt`` specs (default 2.1.* and 2.5.*) the enabled and wrapt arms are repeated in venvs with that
wrapt from the package index; they are reported as n/a when it cannot be reached.

Paired ratios (issue 37, 40): in every round each arm runs once, so the ratio of two arms is taken round by
round and its median reported: enabled (``FSGUARD=1`` + torchrun's variables) against a bare interpreter (not
installed; target <= 2.0), disabled against not installed (target <= 1.03).

``--python PATH`` measures another interpreter (venvs made with it, wrapt from the package index). From 3.15
(PEP 829) it adds the arms of the wheel for 3.18+ (``fsguard.start`` beside the ``.pth``): disabled and
enabled, to show what any ``.start`` file costs every interpreter (``pkgutil``) against the default wheel.

Run: ``python bench/startup.py [--runs N] [--quick] [--python PATH] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "bench"

from bench import _common as common
from tests.support import venvs as _venvs


@dataclass
class Arm:
    """One way of starting an interpreter."""

    key: str
    label: str
    python: Path
    env: dict[str, str]
    code: str = "pass"
    wall_s: list[float] = field(default_factory=list)


def _run_once(arm: Arm, cwd: str, importtime: bool = False) -> tuple[float, str]:
    args = [str(arm.python), *(["-X", "importtime"] if importtime else []), "-c", arm.code]
    started = time.perf_counter()
    done = subprocess.run(
        args, env=common.clean_env(arm.env), cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{arm.label}: exit {done.returncode}: {done.stderr[-2000:]}")
    return elapsed, done.stderr


# --- -X importtime ------------------------------------------------------------------------------------


def _importtime(stderr: str) -> list[tuple[int, str, int, int]]:
    """(depth, module, self us, cumulative us) of each line of ``-X importtime`` output."""
    entries = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "imported package" in line:
            continue
        try:
            own, cumulative, name = line[len("import time:") :].split("|")
        except ValueError:
            continue
        depth = (len(name) - len(name.lstrip(" ")) - 1) // 2
        entries.append((depth, name.strip(), int(own), int(cumulative)))
    return entries


def imported_modules(stderr: str) -> set[str]:
    """The modules a run imported, from its ``-X importtime`` output."""
    return {name for _, name, _, _ in _importtime(stderr)}


def import_shares(stderr: str, wrapt_alone: set[str]) -> dict[str, Any]:
    """fsguard's and wrapt's import time (ms) from ``-X importtime`` output.

    fsguard's share is the self time of every module imported here that is not in ``wrapt_alone`` (the
    modules ``import wrapt`` imports by itself): fsguard's modules and the standard-library modules only
    fsguard pulls in. wrapt's share is the cumulative time of each outermost ``wrapt`` module. The output
    lists children before their parent, indented by two spaces per level.
    """
    timed = _importtime(stderr)
    entries = [(depth, name, cumulative) for depth, name, _, cumulative in timed]
    parent: list[int | None] = [None] * len(entries)
    stack: list[int] = []
    for index in range(len(entries) - 1, -1, -1):  # reversed: each parent comes before its children
        depth = entries[index][0]
        while stack and entries[stack[-1]][0] >= depth:
            stack.pop()
        parent[index] = stack[-1] if stack else None
        stack.append(index)

    def is_pkg(name: str, pkg: str) -> bool:
        return name == pkg or name.startswith(pkg + ".")

    def ancestors(index: int) -> list[str]:
        names = []
        p = parent[index]
        while p is not None:
            names.append(entries[p][1])
            p = parent[p]
        return names

    wrapt_us = 0
    for index, (_, name, cumulative) in enumerate(entries):
        if is_pkg(name, "wrapt") and not any(is_pkg(a, "wrapt") for a in ancestors(index)):
            wrapt_us += cumulative
    own = {name: us for _, name, us, _ in timed if name not in wrapt_alone}
    modules = sorted({name for _, name, _ in entries if is_pkg(name, "fsguard") or is_pkg(name, "wrapt")})
    return {
        "fsguard_own_ms": sum(own.values()) / 1000,
        "wrapt_ms": wrapt_us / 1000,
        "modules": modules,
        "fsguard_own_modules": sorted(own, key=lambda name: -own[name]),
    }


# --- the benchmark ------------------------------------------------------------------------------------


def _version(python: Path) -> tuple[int, int]:
    done = subprocess.run(
        [str(python), "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True, text=True, check=True
    )
    major, minor = done.stdout.split()
    return int(major), int(minor)


def _other_python(ws: common.Workspace, base: Path) -> tuple[Path, Path, Path | None]:
    """(not installed, default wheel, wheel for 3.18+ or None before 3.15) venvs made with ``base``."""
    wrapt = f"wrapt=={common.machine()['wrapt']}"
    plain = _venvs.make_venv(ws.path / "other-plain", None, wrapt=wrapt, base=base)
    guarded = _venvs.make_venv(ws.path / "other-fsguard", ws.wheel(), wrapt=wrapt, base=base)
    if _version(base) < (3, 15):
        return plain, guarded, None
    start_wheel = _venvs.build_wheel(ws.path / "wheel-start", flavour="start")
    start = _venvs.make_venv(ws.path / "other-start", start_wheel, wrapt=wrapt, base=base)
    return plain, guarded, start


def _arms(ws: common.Workspace, wrapt_specs: list[str], python: Path | None = None) -> tuple[list[Arm], dict[str, str]]:
    start: Path | None = None
    if python is None:
        plain, guarded = ws.venv("plain", fsguard=False), ws.venv("fsguard")
    else:
        plain, guarded, start = _other_python(ws, python)
        wrapt_specs = []
    if plain is None or guarded is None:
        raise RuntimeError("cannot make the benchmark venvs")
    arms = [
        Arm("absent", "not installed (baseline)", plain, {}),
        Arm("disabled", "installed, FSGUARD unset", guarded, {}),
        Arm("no_launcher", "installed, FSGUARD=1, no launcher", guarded, {"FSGUARD": "1"}),
        Arm("force", "enabled, FSGUARD=force", guarded, {"FSGUARD": "force"}),
        Arm("torchrun", "enabled, FSGUARD=1 + torchrun env", guarded, {"FSGUARD": "1", **common.TORCHRUN_ENV}),
        Arm("wrapt", "not installed, import wrapt", plain, {}, "import wrapt"),
        Arm("wrapt_here", "installed, FSGUARD unset, import wrapt", guarded, {}, "import wrapt"),
    ]
    if start is not None:
        arms.append(Arm("start_disabled", "wheel for 3.18+ (.start), FSGUARD unset", start, {}))
        torchrun = {"FSGUARD": "1", **common.TORCHRUN_ENV}
        arms.append(Arm("start_torchrun", "wheel for 3.18+ (.start), FSGUARD=1 + torchrun env", start, torchrun))
    versions = {"installed": common.machine()["wrapt"]}
    for spec in wrapt_specs:
        python = ws.venv(f"fsguard-wrapt-{spec}", wrapt=f"wrapt=={spec}")
        if python is None:
            versions[spec] = "n/a"
            continue
        version = subprocess.run(
            [str(python), "-c", "import wrapt; print(wrapt.__version__)"],
            capture_output=True,
            text=True,
            env=common.clean_env(),
        ).stdout.strip()
        versions[spec] = version
        arms.append(Arm(f"force@{spec}", f"enabled, FSGUARD=force, wrapt {version}", python, {"FSGUARD": "force"}))
        arms.append(Arm(f"disabled@{spec}", f"installed, FSGUARD unset, wrapt {version}", python, {}))
        arms.append(Arm(f"wrapt@{spec}", f"import wrapt {version}", python, {}, "import wrapt"))
    return arms, versions


def _wrapt_arm(key: str) -> str:
    """The ``import wrapt`` arm in the same venv as arm ``key``."""
    return f"wrapt@{key.split('@', 1)[1]}" if "@" in key else "wrapt_here"


def run(
    ws: common.Workspace,
    *,
    runs: int = 40,
    importtime_runs: int = 10,
    wrapt_specs: list[str] | None = None,
    python: Path | None = None,
) -> dict[str, Any]:
    specs = ["2.1.*", "2.5.*"] if wrapt_specs is None else wrapt_specs
    specs = [] if python is not None else specs
    arms, versions = _arms(ws, specs, python)
    rng = random.Random(2)
    with tempfile.TemporaryDirectory(prefix="fsguard-startup-") as cwd:
        for arm in arms:  # warm the page cache and the bytecode caches; not counted
            _run_once(arm, cwd)
            _run_once(arm, cwd)
        for _ in range(runs):
            order = arms[:]
            rng.shuffle(order)
            for arm in order:
                arm.wall_s.append(_run_once(arm, cwd)[0])
        by_key = {arm.key: arm for arm in arms}
        wrapt_alone = {
            arm.key: imported_modules(_run_once(arm, cwd, importtime=True)[1]) for arm in arms if arm.code != "pass"
        }
        shares: dict[str, dict[str, Any]] = {}
        for arm in arms:
            if arm.code != "pass":
                continue
            alone = wrapt_alone[_wrapt_arm(arm.key)]
            samples = [
                import_shares(_run_once(arm, cwd, importtime=True)[1], alone) for _ in range(max(importtime_runs, 1))
            ]
            shares[arm.key] = {
                "fsguard_own_ms": common.median(s["fsguard_own_ms"] for s in samples),
                "wrapt_ms": common.median(s["wrapt_ms"] for s in samples),
                "modules": samples[-1]["modules"],
                "fsguard_own_modules": samples[-1]["fsguard_own_modules"],
            }

    ms = {arm.key: common.median(arm.wall_s) * 1000 for arm in arms}

    def wall_share(enabled: str) -> float:
        """Median over the rounds of (enabled - disabled in the same venv), ms."""
        disabled = f"disabled@{enabled.split('@', 1)[1]}" if "@" in enabled else "disabled"
        pairs = zip(by_key[enabled].wall_s, by_key[disabled].wall_s, strict=True)
        return common.median(a - b for a, b in pairs) * 1000

    def paired(arm: str, against: str) -> float:
        """Median over the rounds of arm / against (both ran in every round)."""
        pairs = zip(by_key[arm].wall_s, by_key[against].wall_s, strict=True)
        return common.median(a / b for a, b in pairs)

    pairs = {
        "disabled_vs_absent": paired("disabled", "absent"),
        "enabled_vs_bare": paired("torchrun", "absent"),
        "force_vs_bare": paired("force", "absent"),
    }
    if "start_disabled" in by_key:
        pairs["start_disabled_vs_absent"] = paired("start_disabled", "absent")
        pairs["start_enabled_vs_bare"] = paired("start_torchrun", "absent")

    summary: dict[str, Any] = {
        "python": subprocess.run(
            [str(by_key["absent"].python), "-c", "import sys; print(sys.version.split()[0])"],
            capture_output=True,
            text=True,
        ).stdout.strip(),
        "paired": pairs,
        "disabled_ratio": ms["disabled"] / ms["absent"],
        "no_launcher_ratio": ms["no_launcher"] / ms["disabled"],
        "enabled_ratio": ms["force"] / ms["disabled"],
        "enabled_torchrun_ratio": ms["torchrun"] / ms["disabled"],
        "wrapt_import_ms": ms["wrapt"] - ms["absent"],
        "fsguard_own_wall_ms": wall_share("force"),
        "fsguard_own_wall_torchrun_ms": wall_share("torchrun"),
        "fsguard_own_importtime_ms": shares["force"]["fsguard_own_ms"],
        "fsguard_own_modules": shares["force"]["fsguard_own_modules"],
        "wrapt_importtime_ms": shares["force"]["wrapt_ms"],
        "disabled_imports": shares["disabled"]["modules"],
        "wrapt_versions": versions,
        "by_wrapt": {},
    }
    for spec in specs:
        if f"force@{spec}" in ms:
            summary["by_wrapt"][versions[spec]] = {
                "enabled_ratio": ms[f"force@{spec}"] / ms[f"disabled@{spec}"],
                "wrapt_import_ms": ms[f"wrapt@{spec}"] - ms[f"disabled@{spec}"],
                "fsguard_own_wall_ms": wall_share(f"force@{spec}"),
                "fsguard_own_importtime_ms": shares[f"force@{spec}"]["fsguard_own_ms"],
                "wrapt_importtime_ms": shares[f"force@{spec}"]["wrapt_ms"],
            }
    return {
        "runs": runs,
        "importtime_runs": importtime_runs,
        "arms": {
            arm.key: {
                "label": arm.label,
                "median_ms": ms[arm.key],
                "min_ms": min(arm.wall_s) * 1000,
                "code": arm.code,
                "env": arm.env,
            }
            for arm in arms
        },
        "importtime": shares,
        "summary": summary,
    }


def render(result: dict[str, Any]) -> str:
    arms = result["arms"]
    base = arms["absent"]["median_ms"]
    rows = [
        (
            a["label"],
            common.fmt(a["median_ms"], " ms"),
            common.fmt(a["min_ms"], " ms"),
            common.fmt(a["median_ms"] / base, "x", 3),
        )
        for a in arms.values()
    ]
    s = result["summary"]
    lines = [
        f"startup: python -c pass, median of {result['runs']} interleaved runs per arm",
        common.table(["arm", "median", "min", "vs not installed"], rows),
        "",
    ]
    p = s["paired"]
    lines.append(
        f"  paired (median of per-round ratios, Python {s['python']}): enabled (FSGUARD=1 + torchrun env) / bare "
        f"{p['enabled_vs_bare']:.3f} (target <= 2.0), FSGUARD=force / bare {p['force_vs_bare']:.3f}, "
        f"disabled / not installed {p['disabled_vs_absent']:.3f} (target <= 1.03)"
    )
    if "start_disabled_vs_absent" in p:
        lines.append(
            f"  wheel for 3.18+ (.start) on this Python: disabled / not installed {p['start_disabled_vs_absent']:.3f},"
            f" enabled / bare {p['start_enabled_vs_bare']:.3f}"
        )
    lines.append(
        f"  disabled / not installed:     {s['disabled_ratio']:.3f}  (target <= 1.01; "
        f"fsguard/wrapt modules imported when disabled: {', '.join(s['disabled_imports']) or 'none'})"
    )
    lines.append(f"  FSGUARD=1 no launcher / disabled: {s['no_launcher_ratio']:.3f}")
    lines.append(
        f"  enabled / disabled:           {s['enabled_ratio']:.3f} (force), "
        f"{s['enabled_torchrun_ratio']:.3f} (FSGUARD=1 + torchrun env)"
    )
    lines.append(
        f"  import wrapt {s['wrapt_versions']['installed']} (whole package): {s['wrapt_import_ms']:.1f} ms wall; "
        f"what enabled start-up imports of wrapt: {s['wrapt_importtime_ms']:.1f} ms -X importtime"
    )
    lines.append(
        f"  fsguard's own share (enabled - disabled, wrapt's extension included): "
        f"{s['fsguard_own_wall_ms']:.1f} ms wall "
        f"({s['fsguard_own_wall_torchrun_ms']:.1f} ms with torchrun env), "
        f"{s['fsguard_own_importtime_ms']:.1f} ms -X importtime  (target <= 5 ms)"
    )
    lines.append(f"  imported only for fsguard:    {', '.join(s['fsguard_own_modules']) or 'nothing'}")
    if s["by_wrapt"]:
        rows = [
            (
                version,
                common.fmt(v["enabled_ratio"], "x", 3),
                common.fmt(v["wrapt_import_ms"], " ms", 1),
                common.fmt(v["wrapt_importtime_ms"], " ms", 1),
                common.fmt(v["fsguard_own_wall_ms"], " ms", 1),
                common.fmt(v["fsguard_own_importtime_ms"], " ms", 1),
            )
            for version, v in s["by_wrapt"].items()
        ]
        lines += [
            "",
            common.table(
                [
                    "wrapt",
                    "enabled/disabled",
                    "wrapt wall",
                    "wrapt importtime",
                    "fsguard own wall",
                    "fsguard own importtime",
                ],
                rows,
            ),
        ]
    missing = [spec for spec, v in s["wrapt_versions"].items() if v == "n/a"]
    if missing:
        lines.append(f"  wrapt {', '.join(missing)}: n/a (could not install from the package index)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40, help="interleaved runs per arm (default 40)")
    parser.add_argument("--importtime-runs", type=int, default=10)
    parser.add_argument(
        "--wrapt",
        nargs="*",
        default=None,
        metavar="SPEC",
        help="extra wrapt versions to compare (default: 2.1.* 2.5.*; none: --wrapt)",
    )
    parser.add_argument("--quick", action="store_true", help="a few runs, no extra wrapt venvs (smoke test)")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--python", type=Path, help="measure this interpreter (e.g. /opt/python3.15/bin/python3.15)")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.importtime_runs, args.wrapt = 2, 1, args.wrapt or []
    info = common.machine()
    print(common.machine_line(info), flush=True)
    with common.Workspace() as ws:
        result = run(
            ws, runs=args.runs, importtime_runs=args.importtime_runs, wrapt_specs=args.wrapt, python=args.python
        )
    print(render(result))
    if args.json:
        common.write_json(args.json, {"machine": info, "startup": result})
    return 0


if __name__ == "__main__":
    sys.exit(main())
