import os, sys, shutil
import torch.distributed as dist

def cleanup_staging(root):
    staging = os.path.join(root, "staging")
    shutil.rmtree(staging)

def main():
    dist.init_process_group("gloo")
    root = sys.argv[1]
    if dist.get_rank() == 0:
        for i in range(200):
            d = os.path.join(root, "staging", f"shard-{i}")
            os.makedirs(d, exist_ok=True)
            for j in range(5):
                open(os.path.join(d, f"part-{j}.bin"), "w").write("x")
    dist.barrier()
    cleanup_staging(root)
    dist.barrier()
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
