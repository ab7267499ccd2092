#!/usr/bin/env python3
"""Trains a small PyTorch model, checkpointing every epoch with ckpt, and
resumes from the newest checkpoint when it is started again after a crash.

    PYTHONPATH=build/release/python .venv/bin/python \\
        examples/python/train.py --root /tmp/run [--epochs 6] [--kill-in-epoch 3]

--kill-in-epoch N makes the run kill itself with SIGKILL halfway through
epoch N, after poisoning its weights: nothing of the half-done epoch may
survive. Run it again with the same --root and it resumes from the newest
complete checkpoint. Every run ends by printing a SHA-256 of the model and
optimizer state, which is the same for a run that was killed and resumed as
for one that never was.
"""

import argparse
import hashlib
import os
import signal

import torch

import ckpt

SAMPLES, FEATURES, HIDDEN, BATCH = 2048, 16, 64, 128


def make_data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    w = torch.randn(FEATURES, 1, generator=g)
    y = torch.sin(x @ w) + 0.1 * torch.randn(SAMPLES, 1, generator=g)
    return x, y


def make_model():
    torch.manual_seed(1)
    return torch.nn.Sequential(
        torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(),
        torch.nn.Dropout(0.1),  # uses the global RNG, which is saved too
        torch.nn.Linear(HIDDEN, 1))


def digest(model, optimizer):
    """SHA-256 over every tensor of the model's and the optimizer's state."""
    h = hashlib.sha256()
    tensors = list(model.state_dict().values())
    for s in optimizer.state_dict()["state"].values():
        tensors += [v for v in s.values() if torch.is_tensor(v)]
    for t in tensors:
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", required=True, help="checkpoint root (path/URL)")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--kill-in-epoch", type=int, default=None)
    args = p.parse_args()

    x, y = make_data()
    model = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    shuffle = torch.Generator().manual_seed(2)  # the data loader's order
    epoch = 0  # the next epoch to run

    # create=True: the first run starts a new job in a root not made yet.
    mgr = ckpt.open(args.root, keep_last=3, create=True)
    last = mgr.latest()
    if last is not None:
        state = mgr.load(last, as_torch=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"]["torch"])
        shuffle.set_state(state["rng"]["shuffle"])
        epoch = state["epoch"]
        print(f"resumed from step {last}: next epoch is {epoch}")

    while epoch < args.epochs:
        model.train()
        order = torch.randperm(SAMPLES, generator=shuffle)
        total = 0.0
        for b, start in enumerate(range(0, SAMPLES, BATCH)):
            if epoch == args.kill_in_epoch and b == SAMPLES // BATCH // 2:
                print(f"epoch {epoch}: killed halfway (SIGKILL)", flush=True)
                with torch.no_grad():
                    for param in model.parameters():
                        param.fill_(float("nan"))
                os.kill(os.getpid(), signal.SIGKILL)
            idx = order[start:start + BATCH]
            loss = torch.nn.functional.mse_loss(model(x[idx]), y[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
        epoch += 1
        mean_loss = total / (SAMPLES // BATCH)
        saved = mgr.save(
            epoch, {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "rng": {"torch": torch.get_rng_state(),
                        "shuffle": shuffle.get_state()},
                "epoch": epoch,
            },
            epoch=epoch - 1, metrics={"loss": mean_loss})
        print(f"epoch {epoch - 1}: loss {mean_loss:.6f}, saved step "
              f"{saved.info.step} ({saved.info.bytes} bytes)")

    print(f"final state sha256: {digest(model, optimizer)}")


if __name__ == "__main__":
    main()
