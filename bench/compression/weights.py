#!/usr/bin/env python3
"""Real trained weights and Adam moments as data for bench_compression.

    .venv/bin/python bench/compression/weights.py --out FILE.safetensors \\
        [--hidden 1024] [--layers 4] [--steps 300] [--seed 0]

bench_compression runs this once to make the tensors it compresses: ckpt's
codec (byte planes of the element, one zstd frame per 4 MiB chunk) and the
peers (bench/compression/peers.py) then work on the same bytes, so that the
ratios compare like with like. Random tensors would not do: their mantissas
are noise and their exponents narrower than trained ones, and Adam's moments
(exp_avg near zero, exp_avg_sq tiny and positive) are shaped by training.

The model is a residual MLP (an input projection, --layers blocks of
LayerNorm, hidden x hidden, GELU, hidden x hidden, a head) that learns to
classify points by the argmax of a fixed random teacher network: a task that
is deterministic, needs no data files and whose loss falls within a few
hundred Adam steps. The defaults give about 8.5M parameters, so the float32
weights and the two moments make about 100 MB, and train in well under a
minute on two cores.

The file holds, for every parameter <p>, f32/{weight,exp_avg,exp_avg_sq}/<p>
(float32) and bf16/{weight,exp_avg,exp_avg_sq}/<p> (the same cast to
bfloat16), with metadata steps, first_loss, last_loss and params. One JSON
line goes to stdout. The run fails (exit 1) if the loss did not fall, since
the point is trained weights rather than the initialisation.
"""

import argparse
import json
import sys
import time

import torch
from torch import nn
from safetensors.torch import save_file

IN_DIM = 64
CLASSES = 16
BATCH = 32


class Block(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.up = nn.Linear(hidden, hidden)
        self.down = nn.Linear(hidden, hidden)

    def forward(self, x):
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


class Student(nn.Module):
    def __init__(self, hidden, layers):
        super().__init__()
        self.embed = nn.Linear(IN_DIM, hidden)
        self.blocks = nn.ModuleList(Block(hidden) for _ in range(layers))
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, CLASSES)

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def teacher(gen):
    # A fixed random two-layer tanh network; its argmax over CLASSES outputs
    # is a smooth, learnable labelling of the input space.
    w1 = torch.randn(IN_DIM, 256, generator=gen) / IN_DIM**0.5
    w2 = torch.randn(256, CLASSES, generator=gen) / 256**0.5
    return lambda x: (torch.tanh(x @ w1) @ w2).argmax(dim=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.steps < 2:
        sys.exit("weights.py: --steps must be at least 2 for the loss to fall")

    # Two threads, fixed seeds and one generator for the data keep runs
    # reproducible on the two-core machines the benchmark runs on.
    torch.set_num_threads(2)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed + 1)
    label = teacher(gen)

    start = time.perf_counter()
    model = Student(args.hidden, args.layers)
    # fused: PyTorch's one-kernel CPU Adam, the same update in half the time
    # of the per-tensor loop, which dominates a step at this batch size.
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
    losses = []
    for _ in range(args.steps):
        x = torch.randn(BATCH, IN_DIM, generator=gen)
        loss = nn.functional.cross_entropy(model(x), label(x))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    # One step's loss is noisy with a batch of 32; the means of the first and
    # last tenth say whether training moved the weights somewhere useful.
    tenth = max(1, args.steps // 10)
    first_loss = sum(losses[:tenth]) / tenth
    last_loss = sum(losses[-tenth:]) / tenth
    if not last_loss < first_loss:
        sys.exit(f"weights.py: loss did not fall ({first_loss:.4f} -> "
                 f"{last_loss:.4f}); the weights would not be trained")

    tensors = {}
    params = 0
    for name, p in model.named_parameters():
        state = opt.state[p]
        params += p.numel()
        for kind, t in (("weight", p.detach()), ("exp_avg", state["exp_avg"]),
                        ("exp_avg_sq", state["exp_avg_sq"])):
            f32 = t.detach().to(torch.float32).contiguous().clone()
            tensors[f"f32/{kind}/{name}"] = f32
            tensors[f"bf16/{kind}/{name}"] = f32.to(torch.bfloat16).contiguous()
    save_file(tensors, args.out, metadata={
        "steps": str(args.steps), "first_loss": repr(first_loss),
        "last_loss": repr(last_loss), "params": str(params)})
    seconds = time.perf_counter() - start
    print(json.dumps({"file": args.out, "params": params,
                      "first_loss": first_loss, "last_loss": last_loss,
                      "seconds": seconds}))


if __name__ == "__main__":
    main()
