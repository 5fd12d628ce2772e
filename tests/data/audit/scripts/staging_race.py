import os, sys, time
import torch
import torch.distributed as dist

def write_shard(staging, rank, how):
    if how == "listdir":
        shards = sorted(n for n in os.listdir(staging) if n.startswith("rank"))
        torch.save({"seen": shards}, os.path.join(staging, f"rank{rank}-index.pt"))
    elif how == "torch-save":
        torch.save({"w": torch.zeros(4)}, os.path.join(staging, f"rank{rank}.pt"))
    else:
        from safetensors.torch import save_file
        save_file({"w": torch.zeros(4)}, os.path.join(staging, f"rank{rank}.safetensors"))

def checkpoint(root, step, how):
    rank = dist.get_rank()
    staging = os.path.join(root, f"tmp-checkpoint-{step}")
    final = os.path.join(root, f"checkpoint-{step}")
    os.makedirs(staging, exist_ok=True)
    dist.barrier()
    if rank == 0:
        torch.save({"w": torch.zeros(4)}, os.path.join(staging, "rank0.pt"))
        os.rename(staging, final)  # publishes before the other ranks wrote their shards: the bug
    else:
        time.sleep(1.0)
        write_shard(staging, rank, how)
    dist.barrier()

def main():
    dist.init_process_group("gloo")
    checkpoint(sys.argv[1], 1, sys.argv[2])
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
