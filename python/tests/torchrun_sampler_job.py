"""A torchrun job for test_sampler.py (gloo): a data loader over N samples
through ckpt.torch.Sampler and torchdata's StatefulDataLoader.

  torchrun_sampler_job.py first ROOT OUT N
      epoch 0: every rank takes 3 batches of 5, writes the samples it took
      to OUT/first-RANK, and the loader is saved with ckpt.torch.save as
      step 1 of ROOT (mid-epoch)
  torchrun_sampler_job.py second ROOT OUT N
      loads the loader from ROOT (saved at another world size), takes the
      rest of epoch 0, and writes the samples to OUT/second-RANK
"""

import os
import sys

import torch
import torch.distributed as dist
from torchdata.stateful_dataloader import StatefulDataLoader

import ckpt.torch


class Indices(torch.utils.data.Dataset):
    """Sample i is i: what a rank took is what it read."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


def main(phase, root, out, n):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    data = Indices(n)
    sampler = ckpt.torch.Sampler(data, seed=17)  # world and rank: dist's
    loader = StatefulDataLoader(data, sampler=sampler, batch_size=5)
    state = {"loader": loader}
    if phase == "second":
        ckpt.torch.load(state, root)
    sampler.set_epoch(0)
    taken = []
    for batch in loader:
        taken += batch.tolist()
        if phase == "first" and len(taken) == 15:
            break
    if phase == "first":
        ckpt.torch.save(state, root, 1)
    with open(os.path.join(out, f"{phase}-{rank}"), "w") as f:
        f.write(" ".join(map(str, taken)))
    ckpt.torch.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
