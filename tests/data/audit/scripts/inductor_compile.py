import os, sys
os.environ["TORCHINDUCTOR_CACHE_DIR"] = sys.argv[1] + "/inductor"; os.environ["TRITON_CACHE_DIR"] = sys.argv[1] + "/triton"
import os, sys, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
def f(x, y):
    return (torch.sin(x) * torch.cos(y) + x.relu()).sum(dim=-1)
g = torch.compile(f)
x = torch.randn(64, 32); y = torch.randn(64, 32)
dist.barrier()
out = g(x, y)
torch.testing.assert_close(out, f(x, y))
dist.barrier()
print(f"rank {rank} ok", flush=True)
dist.destroy_process_group()
