"""Put on ``PYTHONPATH`` of a test job: every interpreter of the job reports whether fsguard patched it.

Runs after the ``.pth`` files, so fsguard (if it activates) has already patched. With ``FSG_PROBE_DIR``
set, writes one JSON file per process: host, pid, argv and the names of the operations that are wrapped.
The tests use it to show that the workers were patched and the launcher agents (torchrun) were not.
"""

import json
import os
import shutil
import socket
import sys


def _report() -> None:
    out = os.environ.get("FSG_PROBE_DIR")
    if not out:
        return
    ops = {"makedirs": os.makedirs, "rename": os.rename, "replace": os.replace, "rmtree": shutil.rmtree}
    ops.update({"remove": os.remove, "mkdir": os.mkdir, "symlink": os.symlink, "link": os.link, "rmdir": os.rmdir})
    report = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "argv": list(getattr(sys, "orig_argv", sys.argv)),
        "patched": sorted(name for name, fn in ops.items() if hasattr(fn, "__wrapped__")),
    }
    with open(os.path.join(out, f"{report['host']}-{report['pid']}.json"), "w", encoding="utf-8") as f:
        json.dump(report, f)


try:
    _report()
except Exception as error:
    sys.stderr.write(f"probe: {type(error).__name__}: {error}\n")
