import os, sys
import torch.distributed as dist

def publish(root):
    # every rank stages its own copy, then renames onto the shared name
    r = dist.get_rank()
    tmp = os.path.join(root, f"tmp-rank{r}")
    os.makedirs(tmp)
    open(os.path.join(tmp, "f"), "w").write("x")
    dist.barrier()
    os.rename(tmp, os.path.join(root, "published"))

def main():
    dist.init_process_group("gloo")
    publish(sys.argv[1])
    dist.barrier()
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
