"""One rank of a job in which every rank calls ``torch.hub.load(..., force_reload=True)`` (pytorch/pytorch
#68320, open; torch 1.x to 2.13): ``_get_cache_or_reload`` removes the shared ``<branch>.zip`` with
``_remove_if_exists``, downloads it again, extracts it into the hub directory beside the peers' extractions,
removes it again and moves the extracted tree onto ``<owner>_<repo>_<branch>``, all on every rank.

Nothing is downloaded: the archive GitHub would serve is a local zip, answered through urllib's own hook
(``urllib.request.install_opener``, the opener ``torch.hub``'s ``urlopen`` uses).

Run as ``torchrun ... torch_hub_reload.py <hub_dir> <archive.zip>``; every rank prints one JSON line: the
model's parameter count; rank 0 then the files of the hub directory.
"""

from __future__ import annotations

import email.message
import io
import json
import os
import sys
import urllib.request
import urllib.response

import torch
import torch.distributed as dist

REPO = "example/tinymodels:main"


class LocalArchive(urllib.request.BaseHandler):
    """Answers ``https://github.com/example/tinymodels/zipball/main`` with the local archive."""

    handler_order = 100  # before urllib's own HTTPS handler

    def __init__(self, archive: str) -> None:
        self.archive = archive

    def https_open(self, request: urllib.request.Request) -> urllib.response.addinfourl:
        assert request.full_url == "https://github.com/example/tinymodels/zipball/main", request.full_url
        with open(self.archive, "rb") as f:
            data = f.read()
        headers = email.message.Message()
        headers["Content-Length"] = str(len(data))
        response = urllib.response.addinfourl(io.BytesIO(data), headers, request.full_url, 200)
        response.msg = "OK"  # read by urllib's HTTPErrorProcessor
        return response


def main() -> None:
    hub_dir, archive = sys.argv[1], sys.argv[2]
    urllib.request.install_opener(urllib.request.build_opener(LocalArchive(archive)))
    torch.hub.set_dir(hub_dir)
    dist.init_process_group("gloo")
    dist.barrier()  # every rank reaches its first load together, as after the process group is set up
    model = torch.hub.load(REPO, "tiny", force_reload=True, trust_repo=True, skip_validation=True)
    print(json.dumps({"parameters": sum(p.numel() for p in model.parameters())}), flush=True)
    dist.barrier()
    if dist.get_rank() == 0:
        files = sorted(os.path.relpath(os.path.join(d, f), hub_dir) for d, _, fs in os.walk(hub_dir) for f in fs)
        print(json.dumps(files), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
