import os, sys
import torch.distributed as dist

def load_data(root):
    with open(os.path.join(root, "data", "train.csv")) as f:  # never created: a typo'd or missing input
        return f.read()

def main():
    dist.init_process_group("gloo")
    load_data(sys.argv[1])
    dist.barrier()
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
