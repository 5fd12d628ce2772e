"""One rank of huggingface_hub 0.36.2's last step of a download, as two nodes whose locks are node-local run it
(issue 45): every rank appends the blob to the deterministic ``blobs/<etag>.incomplete`` and then, under the
hub's own ``WeakFileLock`` (on a lock file of its own node: the lock does not exclude the other ranks), moves it
to ``blobs/<etag>`` with the hub's own ``_chmod_and_move``. A file barrier lines the ranks up.

Run as ``hub_blob_move.py <root>`` in each rank (torchrun's variables), huggingface_hub 0.36.2 first on
``PYTHONPATH``. Prints one JSON line: the rank, and the size of the blob it then reads.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/workers: the file barrier

from gate import barrier
from huggingface_hub.file_download import _chmod_and_move
from huggingface_hub.utils import WeakFileLock

BLOB = b"model weights " * 4096


def main() -> None:
    root = Path(sys.argv[1])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    blobs = root / "models--org--tiny" / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    etag = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
    barrier(str(root), "start", rank, world)
    incomplete = blobs / f"{etag}.incomplete"
    with incomplete.open("ab") as out:
        out.write(BLOB)
    barrier(str(root), "appended", rank, world)
    with WeakFileLock(root / ".locks" / f"{etag}.lock.node{rank}"):  # node-local: locks no peer out
        _chmod_and_move(incomplete, blobs / etag)
    print(json.dumps({"rank": rank, "size": (blobs / etag).stat().st_size}), flush=True)


if __name__ == "__main__":
    main()
