"""A Keras fit that a test kills and starts again: a fresh process each
time, as a preempted job is, with Keras's default layer names.

    KERAS_BACKEND=jax python keras_job.py --out final.npz [--root ROOT
        --save-freq N|epoch] [--kill-at EPOCH:BATCH]

Writes every variable of the model and the optimizer, in order, to --out
once fit ends; --kill-at sends the process SIGKILL after that batch.
"""

import argparse
import os
import signal

import keras
import numpy as np


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--root")
    p.add_argument("--save-freq", default="epoch")
    p.add_argument("--kill-at")
    args = p.parse_args()
    np.savez(args.out, *train(args.root, args.save_freq, args.kill_at))


def train(root=None, save_freq="epoch", kill_at=None):
    """The values of every variable of the model and the optimizer, in
    order, once fit ends."""
    keras.utils.set_random_seed(7)
    model = keras.Sequential([keras.Input((6,)),
                              keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
    x = np.linspace(-1, 1, 80 * 6, dtype="float32").reshape(80, 6)
    y = np.sin(x).sum(axis=1, keepdims=True)
    callbacks = []
    if root:
        import ckpt.keras
        freq = save_freq if save_freq == "epoch" else int(save_freq)
        callbacks.append(ckpt.keras.BackupAndRestore(root, save_freq=freq))
    if kill_at:
        callbacks.append(Kill(*map(int, kill_at.split(":"))))
    model.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0,
              callbacks=callbacks)
    return [keras.ops.convert_to_numpy(v.value)
            for v in model.variables + model.optimizer.variables]


class Kill(keras.callbacks.Callback):
    def __init__(self, epoch, batch):
        super().__init__()
        self.at, self.epoch = (epoch, batch), None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if (self.epoch, batch) == self.at:
            os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main()
