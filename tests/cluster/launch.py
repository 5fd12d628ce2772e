"""Run one command on K simulated nodes at once, by hand or from a benchmark.

    python -m tests.cluster.launch --nodes 2 --cache-s 30 -- CMD ARGS...
    python -m tests.cluster.launch --torchrun PYTHON --nproc-per-node 2 -- SCRIPT ARGS...

``{shared}``, ``{backing}`` and ``{local}`` in the arguments become the cluster's paths. Prints each node's
exit status and where its stdout/stderr are; exits 0 only when every node did.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from .harness import cluster


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.cluster.launch", description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--cache-s", type=float, default=0.0, help="bindfs entry/attr/negative timeout")
    parser.add_argument("--root", type=Path, help="keep the cluster (backing data, logs) here")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--torchrun", metavar="PYTHON", help="run the command as a torchrun job with this python")
    parser.add_argument("--nproc-per-node", type=int, default=2)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")

    with cluster(args.nodes, args.cache_s, root=args.root) as made:
        paths = {"shared": str(made.shared), "backing": str(made.backing), "local": str(made.local)}
        command = [part.format(**paths) for part in command]
        if args.torchrun:
            result = made.torchrun(
                args.torchrun,
                command[0],
                command[1:],
                nproc_per_node=args.nproc_per_node,
                env=os.environ,
                timeout=args.timeout,
            )
        else:
            result = made.run(command, env=os.environ, timeout=args.timeout)
        for node in result.nodes:
            print(f"node{node.node}: rc={node.returncode} stdout={node.stdout_path} stderr={node.stderr_path}")
        print(f"{'timed out' if result.timed_out else 'finished'} in {result.seconds:.1f} s")
        if args.root is None:
            sys.stdout.write(result.output())  # the temporary root goes away on exit
        return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
