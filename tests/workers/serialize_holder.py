"""A rank that takes the serialization lock of one path and keeps it, or a peer that wants the same lock.

``serialize_holder.py hold <path> <ready-file>``: ``shutil.rmtree`` of a symlink at ``<path>``; the standard
library reports "cannot rmtree a symlink" to our ``onerror`` *inside* the serialized call, which signals
``<ready-file>`` and sleeps: a holder stuck mid-operation, for the test to ``kill -9``.
``serialize_holder.py peer <path> <ready-file>``: imports what its first serialized call will need, signals
``<ready-file>``, then ``shutil.rmtree(<path>, ignore_errors=True)`` (same lock) and prints the seconds it
took, as JSON.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time


def main() -> None:
    role, path, ready = sys.argv[1:4]
    if role == "hold":

        def stuck(*_: object) -> None:
            with open(ready, "w") as f:
                f.write(str(os.getpid()))
            time.sleep(120)

        shutil.rmtree(path, onerror=stuck)
        return
    if os.environ.get("FSGUARD_LOCK") == "store":
        import torch.distributed  # noqa: F401 - the first serialized call would import it: do it before timing
    with open(ready, "w") as f:
        f.write(str(os.getpid()))
    started = time.monotonic()
    shutil.rmtree(path, ignore_errors=True)
    print(json.dumps({"took_s": time.monotonic() - started}), flush=True)


if __name__ == "__main__":
    main()
