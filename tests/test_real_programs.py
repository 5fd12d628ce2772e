"""Real third-party training code under fsguard, as a user runs it: no change to the program.

A Hugging Face ``Trainer`` (transformers, pinned in requirements-test.txt) under torchrun, 4 ranks: its
checkpoint rotation (``save_total_limit``) removes old checkpoints that every rank wrote into. Without fsguard
and with ``FSGUARD=1`` the job ends the same (the same checkpoints, every file in them), and fsguard writes no
``hazard``: an old generation beside a newer one is a rotation, not a staging tree a peer is about to commit.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.conftest import clean_env
from tests.support.records import json_records

WORKER = Path(__file__).resolve().parent / "workers" / "hf_trainer_job.py"
STEPS = 8


def run_trainer(python: Path, out: Path, env: dict[str, str]) -> dict[str, list[str]]:
    torchrun = [str(python), "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4"]
    job = subprocess.run(
        [*torchrun, str(WORKER), str(out), str(STEPS)],
        env=clean_env({"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", **env}),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert job.returncode == 0, job.stderr[-4000:]
    left: dict[str, list[str]] = json.loads(job.stdout.strip().splitlines()[-1])
    return left


def test_hf_trainer_rotation_ends_as_without_fsguard(fsguard_python: Path, tmp_path: Path) -> None:
    off = run_trainer(fsguard_python, tmp_path / "off", {"FSGUARD": "0"})
    logs = tmp_path / "logs"
    on = run_trainer(fsguard_python, tmp_path / "on", {"FSGUARD": "1", "FSGUARD_LOG": str(logs)})
    assert on == off, (on, off)
    assert sorted(on) == ["checkpoint-6", "checkpoint-8"], on
    assert all({f"rng_state_{r}.pth" for r in range(4)} <= set(files) for files in on.values()), on
    found = json_records(logs) if logs.exists() else []
    assert not [r for r in found if r["decision"] in ("hazard", "conflict")], found
    print(f"records with fsguard: {sorted((r['op'], r['decision']) for r in found)}")
