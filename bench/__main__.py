"""Run every benchmark, print one summary table, and write the results as JSON to compare over time.

``python -m bench [--quick] [--only startup calls scale decide failures] [--out FILE]``; the default file is
``bench/results/<date>-<commit>.json``. The benchmarks share one workspace (the wheel and venvs are made
once). Each benchmark also runs alone: ``python bench/startup.py``, ``bench/calls.py``, ``bench/scale.py``,
``bench/decide.py``, ``bench/failures.py``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from bench import _common as common
from bench import calls, decide, failures, scale, startup

NAMES = ("startup", "calls", "scale", "decide", "failures")


def summary_rows(results: dict[str, Any]) -> list[list[str]]:
    """The headline figures of every benchmark that ran, with their targets."""
    rows: list[list[str]] = []
    if "startup" in results:
        s = results["startup"]["summary"]
        rows += [
            ["startup: installed+disabled / not installed", f"{s['disabled_ratio']:.3f}", "<= 1.01"],
            ["startup: enabled / disabled (FSGUARD=force)", f"{s['enabled_ratio']:.2f}", ""],
            ["startup: fsguard's own share, wall", f"{s['fsguard_own_wall_ms']:.1f} ms", "<= 5 ms"],
            ["startup: fsguard's own share, -X importtime", f"{s['fsguard_own_importtime_ms']:.1f} ms", "<= 5 ms"],
            [f"startup: import wrapt {s['wrapt_versions']['installed']}, wall", f"{s['wrapt_import_ms']:.1f} ms", ""],
        ]
        for version, v in s["by_wrapt"].items():
            rows.append(
                [
                    f"startup: import wrapt {version}, wall / importtime",
                    f"{v['wrapt_import_ms']:.1f} / {v['wrapt_importtime_ms']:.1f} ms",
                    "",
                ]
            )
    if "calls" in results:
        c = results["calls"]
        for op, arms in c["happy_path"].items():
            name = "null function" if op == "null" else op
            added = arms.get("fsguard", {}).get("added_us")
            rows.append(
                [
                    f"calls: {name} added by fsguard (bare wrapt / shim)",
                    f"{common.fmt(added, ' us', 3)} ({common.fmt(arms['wrapt']['added_us'], '', 3)} / "
                    f"{common.fmt(arms['shim']['added_us'], '', 3)})",
                    "<= 0.3 us",
                ]
            )
        for op, r in c["decisions"]["off/empty"].items():
            full = c["decisions"]["off/full"][op]["median_ms"]
            logged = c["decisions"]["jsonl/empty"][op]["median_ms"]
            rows.append(
                [
                    f"decide: {op}{'' if op.endswith('deferred') else ' absorbed'}, local (logged+jsonl / memory full)",
                    f"{r['median_ms']:.3f} ms ({logged:.3f} / {full:.3f})",
                    "<= 1 ms",
                ]
            )
        if "skipped" in c["bindfs"]:
            rows.append(["decide on bindfs", f"skipped: {c['bindfs']['skipped']}", "<< 1 s"])
        else:
            for op, r in c["bindfs"].items():
                rows.append(
                    [
                        f"decide on bindfs, 30 s caches: {op}",
                        f"{r['median_ms']:.2f} ms (max {r['max_ms']:.1f})",
                        "<< 1 s",
                    ]
                )
    if "decide" in results:
        for fs, r in results["decide"]["filesystems"].items():
            if "skipped" in r:
                rows.append([f"decide on {fs}", f"skipped: {r['skipped']}", ""])
                continue
            sizes = list(r["decision"])
            first, last = r["decision"][sizes[0]], r["decision"][sizes[-1]]
            rows.append(
                [
                    f"decide on {fs}: makedirs race, {int(sizes[0]):,} / {int(sizes[-1]):,} entries beside",
                    f"{first['median_ms']:.3f} / {last['median_ms']:.3f} ms",
                    "<= 2x" if not r["mount"]["stale"] else "",
                ]
            )
            worst = max(c["median_ms"] for cells in r["genuine"].values() for c in cells.values())
            rows.append(
                [
                    f"decide on {fs}: genuine error raised after (worst)",
                    f"{worst:.2f} ms",
                    "<= 5 ms" if not r["mount"]["stale"] else "",
                ]
            )
    if "failures" in results:
        f = results["failures"]
        for program, r in f["programs"].items():
            off, on = r["arms"]["off"], r["arms"]["fsguard"]
            errors = on.get("errors") or off.get("errors")
            rows.append(
                [
                    f"failures: {program}, fsguard / off",
                    f"{common.fmt(r['ratio'], 'x')} ({common.fmt(on['median_s'] * 1000, '', 1)} / "
                    f"{common.fmt(off['median_s'] * 1000, ' ms', 1)})" + (f" errors {errors}" if errors else ""),
                    "<= 2x",
                ]
            )
        by = f["decisions"]["by_remembered"]
        for op, ratio in f["decisions"]["ratio_last_to_first"].items():
            rows.append(
                [
                    f"failures: failing {op} decided, {' / '.join(f'{int(n):,}' for n in by)} remembered calls",
                    " / ".join(f"{cells[op]['median_ms']:.3f}" for cells in by.values()) + f" ms ({ratio:.2f}x)",
                    "<= 2x",
                ]
            )
    if "scale" in results:
        sc = results["scale"]
        top = max(sc["sizes"])
        for op in scale.OPS:
            cells = [sc["cells"].get(f"{op}/{top}/{mode}") for mode in scale.MODES]
            text = " / ".join("n/a" if c is None else f"{c['success_rate'] * 100:.0f}%" for c in cells)
            rows.append([f"scale: {op} x{top} success ({' / '.join(scale.MODES)})", text, ""])
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=NAMES, default=list(NAMES))
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks that everything runs")
    parser.add_argument("--out", type=Path, help="JSON file (default bench/results/<date>-<commit>.json)")
    args = parser.parse_args(argv)

    info = common.machine()
    print(common.machine_line(info), flush=True)
    results: dict[str, Any] = {}
    timings: dict[str, float] = {}
    with common.Workspace() as ws:
        for name in args.only:
            started = time.perf_counter()
            print(f"\n== {name} ==", flush=True)
            if name == "startup":
                results[name] = (
                    startup.run(ws, runs=2, importtime_runs=1, wrapt_specs=[]) if args.quick else startup.run(ws)
                )
                print(startup.render(results[name]))
            elif name == "calls":
                results[name] = (
                    calls.run(calls=200, rounds=2, decision_iterations=5, bindfs_iterations=2)
                    if args.quick
                    else calls.run()
                )
                print(calls.render(results[name]))
            elif name == "decide":
                results[name] = (
                    decide.run(sizes=(0, 100), filesystems=("local", "juicefs"), iterations=3, genuine_iterations=2)
                    if args.quick
                    else decide.run(filesystems=("local", "tmpfs", "bindfs", "juicefs"))
                )
            elif name == "failures":
                results[name] = failures.run(quick=args.quick)
                print(failures.render(results[name]))
            else:
                results[name] = scale.run(ws, sizes=(2, 4), trials=1) if args.quick else scale.run(ws)
                print(scale.render(results[name]))
            timings[name] = time.perf_counter() - started

    print("\n== summary ==")
    print(common.machine_line(info))
    print(common.table(["figure", "measured", "target"], summary_rows(results)))
    out = args.out or common.ROOT / "bench" / "results" / (
        time.strftime("%Y-%m-%d-%H%M") + f"-{(info.get('git') or 'unknown').replace('+', '-')}.json"
    )
    common.write_json(out, {"machine": info, "quick": args.quick, "seconds": timings, **results})
    print(f"\nresults: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
