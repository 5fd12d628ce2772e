"""One rank of a download into a deterministic shared temp name (issue 45), the shape of huggingface_hub 0.36.2's
``blobs/<etag>.incomplete``: every rank appends the blob to ``<etag>.incomplete`` (the hub's lock does not lock
across nodes whose locks are node-local), then renames it to ``<etag>``. A file barrier lines the ranks up, so
they all append before the first rename, as two nodes downloading at once do.

Run as ``shared_temp_append.py <root> [private]`` in each rank (torchrun's variables); ``private``: each rank
writes its own temp (``<etag>.incomplete.<rank>``) and renames it onto the shared name before the rename (a cache
that publishes whole, nothing mixed). Prints one JSON line: the rank, and the size of the blob it then reads (every
append is done by then).
"""

from __future__ import annotations

import json
import os
import sys

from gate import barrier  # run as a script: this directory is on sys.path

BLOB = b"model weights " * 4096  # 56 KiB


def main() -> None:
    root, private = sys.argv[1], sys.argv[2:] == ["private"]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    blobs = os.path.join(root, "blobs")
    os.makedirs(blobs, exist_ok=True)
    final = os.path.join(blobs, "0f1e2d3c4b5a69788796a5b4c3d2e1f0")
    incomplete = final + ".incomplete"
    barrier(root, "start", rank, world)
    if private:
        with open(f"{incomplete}.{rank}", "ab") as out:
            out.write(BLOB)
        os.rename(f"{incomplete}.{rank}", incomplete)
    else:
        with open(incomplete, "ab") as out:
            out.write(BLOB)
    barrier(root, "appended", rank, world)
    os.rename(incomplete, final)  # guarded call: rename
    print(json.dumps({"rank": rank, "size": os.path.getsize(final)}), flush=True)


if __name__ == "__main__":
    main()
