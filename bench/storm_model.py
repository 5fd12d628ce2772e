"""The metadata storm at 1,000 and 10,000 ranks, modelled from committed measurements (issue 47).

Nothing is run: every input is read from a committed result file under ``bench/results/`` (``INPUTS``), so the
model is the files' and ``tests/test_measured.py`` recomputes it and checks ``docs/measured.md`` against it.

* Operations per arm: ``bench/storm.py``'s medians at 2 x 4 and 2 x 8 ranks, a line ``a + b * ranks`` through
  the two (``none``: every rank's own calls; ``rank0``: the shared calls made once and each rank's own shard;
  ``serialize``; ``fsguard``).
* Metadata-server time: those operations at 0.5 and 5 ms each (Lustre, CephFS, EFS: a metadata operation's
  service time), as if one server handled them one after another: the load a job puts on it, not a wall time.
* Store-server time (serialized): each rank's collapsed calls (the storm's tree, its ``tmp-checkpoint`` makedirs
  and its rmtrees) times the store requests a rank makes per collapsed call (``bench/scale.py``, 256 warm ranks,
  one identical makedirs) times the store server's time per request (``bench/scale.py``, 32 clients): c10d's
  store serves requests on one thread. Rank 0 + barrier: two requests per rank per barrier (after the tree,
  after each ``tmp-checkpoint``).
* One collapsed call's latency (serialized): the performer's metadata operation plus four store round trips
  (claim, seal, wake, outcome), with the round trip of one client (``bench/scale.py``), before the queueing
  that the store-server time above adds at scale.

usage: python bench/storm_model.py [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
# The committed measurements the model stands on.
INPUTS = {
    "storm": {4: "2026-12-06-storm-4x2-66f4df8.json", 8: "2026-12-06-storm-8x2-66f4df8.json"},
    "scale": "2026-12-05-scale-32-256-82d6496.json",
}
RANKS = (1000, 10000)
METADATA_MS = (0.5, 5.0)
ROUND_TRIPS_PER_CALL = 4  # claim, seal, wake, outcome: a waiter's path, the performer's in parallel
BARRIER_REQUESTS = 2  # a store barrier: each rank's add, then its wait (bench/_storm_worker.py)
ARMS = ("none", "fsguard", "serialize", "rank0")


def _read(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RESULTS / name).read_text())
    return data


def inputs() -> dict[str, Any]:
    """The figures the model takes, each from its committed file."""
    scale = _read(INPUTS["scale"])["scale"]
    storms = {ranks: _read(name)["storm"] for ranks, name in INPUTS["storm"].items()}
    eight = storms[8]
    ops = {
        arm: {str(storm["world"]): storm["summary"][arm]["meta_ops"] for storm in storms.values()}
        for arm in ARMS
        if all(arm in storm["summary"] for storm in storms.values())
    }
    return {
        "files": {"storm": dict(sorted((str(k), v) for k, v in INPUTS["storm"].items())), "scale": INPUTS["scale"]},
        "meta_ops": ops,
        "collapsed_calls_per_rank": eight["dirs"] + eight["steps"] + max(0, eight["steps"] - 2),
        "barriers_per_rank": 1 + eight["steps"],  # rank 0 + barrier: after the tree, after each tmp-checkpoint
        "store_requests_per_call": scale["cells"]["makedirs/256/serialize-store"]["store_ops_per_rank"]["total"],
        "store_server_us": scale["store_requests_us"]["32_clients"]["compare_set"]["server_us_per_request"],
        "store_round_trip_us": scale["store_requests_us"]["1_clients"]["compare_set"]["per_client_us"],
        "metadata_ms": list(METADATA_MS),
    }


def measured(given: dict[str, Any]) -> dict[str, Any]:
    """The committed runs' medians per size and arm, with their ratios to none's operations and to the rank-0
    floor's (what ``docs/measured.md`` quotes of them)."""
    out: dict[str, Any] = {}
    for ranks, name in sorted(INPUTS["storm"].items()):
        rows = _read(name)["storm"]["summary"]
        none, floor = rows["none"]["meta_ops"], rows["rank0"]["meta_ops"]
        out[f"{ranks}x2"] = {
            arm: {
                "meta_ops": row["meta_ops"],
                "storm_s": round(row["storm_s"], 2),
                "vs_none": round(row["meta_ops"] / none, 3),
                "vs_floor": round(row["meta_ops"] / floor, 3),
            }
            for arm, row in rows.items()
        }
    return out


def _line(points: dict[str, float]) -> tuple[float, float]:
    """(a, b) of the line a + b * ranks through two measured sizes."""
    (x0, y0), (x1, y1) = sorted((int(k), float(v)) for k, v in points.items())
    b = (y1 - y0) / (x1 - x0)
    return y0 - b * x0, b


def model(given: dict[str, Any]) -> dict[str, Any]:
    """The modelled figures at each of ``RANKS`` (rounded: 3 significant digits at most)."""
    out: dict[str, Any] = {}
    calls = given["collapsed_calls_per_rank"]
    for ranks in RANKS:
        row: dict[str, Any] = {}
        for arm, points in given["meta_ops"].items():
            a, b = _line(points)
            ops = a + b * ranks
            row[arm] = {
                "meta_ops": _round(ops),
                "ops_per_rank": _round(ops / ranks),
                "metadata_s": [_round(ops * ms / 1000) for ms in given["metadata_ms"]],
            }
        store_s = ranks * calls * given["store_requests_per_call"] * given["store_server_us"] / 1e6
        row["serialize"]["store_server_s"] = _round(store_s)
        row["serialize"]["store_server_s_per_call"] = _round(store_s / calls)
        barriers = given["barriers_per_rank"] * BARRIER_REQUESTS  # rank 0 + barrier: the others wait in the store
        row["rank0"]["store_server_s"] = _round(ranks * barriers * given["store_server_us"] / 1e6)
        row["serialize"]["call_latency_ms"] = [
            _round(ms + ROUND_TRIPS_PER_CALL * given["store_round_trip_us"] / 1000) for ms in given["metadata_ms"]
        ]
        row["none"]["metadata_s_per_call"] = [_round(ranks * ms / 1000) for ms in given["metadata_ms"]]
        out[str(ranks)] = row
    return out


def _round(value: float) -> float:
    """Three significant digits (a model's precision), as a plain float."""
    return float(f"{value:.3g}")


def compute() -> dict[str, Any]:
    given = inputs()
    return {"inputs": given, "measured": measured(given), "model": model(given)}


FIGURES = (  # (key under model/<ranks>/, what it is), as docs/measured.md shows them
    ("none/meta_ops", "none: metadata operations"),
    ("none/metadata_s/0", "none: metadata-server s at 0.5 ms an operation"),
    ("none/metadata_s/1", "none: metadata-server s at 5 ms an operation"),
    ("serialize/meta_ops", "`FSGUARD_SERIALIZE=1`: metadata operations"),
    ("serialize/metadata_s/0", "`FSGUARD_SERIALIZE=1`: metadata-server s at 0.5 ms"),
    ("serialize/metadata_s/1", "`FSGUARD_SERIALIZE=1`: metadata-server s at 5 ms"),
    ("serialize/store_server_s", "`FSGUARD_SERIALIZE=1`: store-server s (one thread)"),
    ("serialize/store_server_s_per_call", "`FSGUARD_SERIALIZE=1`: store-server s per collapsed call"),
    ("rank0/meta_ops", "rank 0 + barrier: metadata operations"),
    ("rank0/metadata_s/1", "rank 0 + barrier: metadata-server s at 5 ms"),
    ("rank0/store_server_s", "rank 0 + barrier: store-server s (its barriers)"),
)


def render(found: dict[str, Any], file: str) -> str:
    """``docs/measured.md``'s sourced rows of the model (``tests/test_measured.py`` checks each)."""
    lines = ["| figure | value | result file | key |", "| --- | --- | --- | --- |"]
    for ranks, row in found["model"].items():
        for key, what in FIGURES:
            value: Any = row
            for part in key.split("/"):
                value = value[int(part)] if isinstance(value, list) else value[part]
            shown = f"{value:,.0f}" if value >= 100 else f"{value:g}"
            lines.append(f"| {int(ranks):,} ranks, {what} | {shown} | `bench/results/{file}` | `model/{ranks}/{key}` |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write the inputs and the model here")
    args = parser.parse_args(argv)
    found = compute()
    print(render(found, args.json.name if args.json else "<file>"))
    if args.json:
        args.json.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
