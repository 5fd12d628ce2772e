import os, sys, time
import torch.distributed as dist

def make_run_dir(root):
    os.makedirs(os.path.join(root, "runs", "exp1"))

def main():
    dist.init_process_group("gloo")
    root = sys.argv[1]
    dist.barrier()
    make_run_dir(root)
    dist.barrier()
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
