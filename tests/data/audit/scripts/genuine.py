import os, sys
import torch.distributed as dist

def make_output(root):
    os.mkdir(os.path.join(root, "missing-parent", "out"))

def publish(root):
    src = os.path.join(root, f"result-{dist.get_rank()}.txt")
    open(src, "w").write("x")
    os.rename(src, f"/dev/shm/fsguard-result-{dist.get_rank()}.txt")

def main():
    dist.init_process_group("gloo")
    if dist.get_rank() == 0:
        make_output(sys.argv[1])
    else:
        publish(sys.argv[1])
    dist.barrier()
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
