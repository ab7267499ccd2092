"""ckpt.torch.Sampler: a DistributedSampler whose data position survives a
change of world size.

Its state is one global position in the epoch's permutation: how many
samples of the epoch the whole job has taken. A job resumed on another
number of ranks splits the samples from that position on across its new
ranks, so that every sample of the epoch is taken exactly once by the job
as a whole. The permutation is that of the C++ library's ckpt::Sampler
(include/ckpt/sampler.h) for the same seed and epoch: a Fisher-Yates
shuffle drawn with SplitMix64, a pure function of (seed, epoch) that no
PyTorch or NumPy version changes.
"""

import array
import numbers

import torch.distributed
from torch.utils.data.distributed import DistributedSampler

from ckpt import _errors

try:
    import numpy as _np
except ImportError:  # the pure-Python draws give the same numbers
    _np = None

_MASK = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
_EPOCH = 0xD1B54A32D192ED03  # the C++ Sampler's epoch multiplier

_STATE_KEYS = ("epoch", "position", "dataset_len", "seed", "shuffle")


class Sampler(DistributedSampler):
    """Sampler(dataset_or_len, num_replicas=None, rank=None, shuffle=True,
    seed=0, drop_last=False): DistributedSampler's knobs, and a state that
    resumes at any world size.

    Each epoch is a permutation of range(dataset_len) drawn from (seed,
    epoch) alone (the identity with shuffle=False). The job takes it in
    rounds of num_replicas samples: rank r takes the positions p + r,
    p + r + num_replicas, ... from the position p the epoch had reached,
    as DistributedSampler deals out its indices. state_dict() is that
    position counted for the whole job: how many samples of the epoch all
    ranks together have taken, which is the same number on every rank
    while every rank has taken as many samples as the others (data-parallel
    training, saving between steps). load_state_dict() on any number of
    ranks continues from it: the samples not yet taken are split across
    the new ranks, none taken twice, none left out.

    drop_last=False: every sample of the epoch is taken once. Unlike
    DistributedSampler, no sample is repeated to give every rank as many:
    in the last round some ranks take one sample fewer (give every rank the
    same number of batches with drop_last=True, or with DDP's join()).
    drop_last=True: every rank takes as many samples, and the tail of the
    epoch that does not fill a round (fewer than num_replicas samples) is
    left out of it.

    num_replicas and rank default to torch.distributed's world size and
    rank, or 1 and 0 where torch.distributed is not initialized.
    dataset_or_len is a data set (its len()) or a number of samples.

    What the position counts: the indices this sampler has handed out, by
    the iteration under way. A DataLoader that draws ahead of its consumer
    (num_workers > 0 prefetches) has drawn more than the training loop has
    taken: through torchdata's StatefulDataLoader, whose state_dict()
    records this sampler's state_dict() as of each batch it delivers, the
    position is what the consumer took; a plain DataLoader with
    num_workers=0 draws no more than it delivers; otherwise pass
    state_dict(consumed=n), the samples each rank's loop has taken in this
    epoch's iteration.

    Epochs: set_epoch(e) starts epoch e at position 0, unless the sampler
    is in epoch e already (restored mid-epoch), where it continues. An
    iteration that ran to the end of the epoch is followed by the same
    epoch over again, as DistributedSampler repeats its order when
    set_epoch is not called; a restored state of a finished epoch yields
    nothing more of it. load_state_dict() takes the saved epoch and
    position, except when set_epoch() has moved this sampler to a later
    epoch than the saved one (StatefulDataLoader restores its sampler when
    the iteration starts, after the loop's set_epoch): that epoch then
    starts at position 0.
    """

    def __init__(self, dataset_or_len, num_replicas=None, rank=None,
                 shuffle=True, seed=0, drop_last=False):
        # DistributedSampler.__init__ is not called: it requires an
        # initialized process group and sets num_samples and total_size,
        # which are computed here.
        if isinstance(dataset_or_len, numbers.Integral) and not isinstance(
                dataset_or_len, bool):
            self.dataset, n = None, int(dataset_or_len)
        else:
            try:
                self.dataset, n = dataset_or_len, len(dataset_or_len)
            except TypeError:
                raise _errors.InvalidArgument(
                    f"ckpt.torch.Sampler: the first argument is a data set "
                    f"(with len()) or a number of samples, not a "
                    f"{type(dataset_or_len).__name__}") from None
        if n < 0:
            raise _errors.InvalidArgument(
                f"ckpt.torch.Sampler: {n} samples")
        if not isinstance(seed, numbers.Integral) or isinstance(seed, bool):
            raise _errors.InvalidArgument(
                f"ckpt.torch.Sampler: seed must be an int, not "
                f"{type(seed).__name__}")
        world, me = _distributed_defaults(num_replicas, rank)
        self.dataset_len = n
        self.num_replicas = world
        self.rank = me
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.drop_last = bool(drop_last)
        self.epoch = 0
        self._position = 0  # samples of the epoch the job has taken
        self._start = 0     # the position the current iteration began at
        self._reached = False  # _position came from this object's iteration
        self._iteration = None  # the token of the live iterator
        self._perm_epoch, self._perm = None, None

    @property
    def num_samples(self):
        """The samples this rank takes in the current (or next)
        iteration: DistributedSampler's per-rank count."""
        return len(self)

    @property
    def total_size(self):
        return self.dataset_len

    def __len__(self):
        start = self._next_start() if self._iteration is None else self._start
        return self._share(start)

    def _share(self, start):
        """How many samples this rank takes from position `start` on."""
        remaining = self.dataset_len - start
        if self.drop_last:
            return remaining // self.num_replicas
        if remaining <= self.rank:
            return 0
        return (remaining - self.rank + self.num_replicas - 1) \
            // self.num_replicas

    def _next_start(self):
        """Where an iteration started now begins: the position, or 0 after
        an iteration of this object that finished the epoch."""
        if self._reached and self._position >= self.dataset_len:
            return 0
        return self._position

    def set_epoch(self, epoch):
        """Starts `epoch` at position 0, unless the sampler is in that
        epoch already (then it continues where it is)."""
        epoch = int(epoch)
        if epoch == self.epoch:
            return
        self.epoch = epoch
        self._position, self._start = 0, 0
        self._reached = False
        self._iteration = None  # a live iterator no longer moves the state

    def __iter__(self):
        start = self._next_start()
        token = object()
        self._position, self._start = start, start
        self._reached, self._iteration = False, token
        share = self._share(start)
        return self._indices(token, start, share)

    def _indices(self, token, start, share):
        world = self.num_replicas
        perm = self._permutation() if share else None
        first = start + self.rank
        for k in range(share):
            index = perm[first + k * world]
            if self._iteration is token:
                self._advance(start, k + 1, share)
            yield index
        if self._iteration is token:
            # Asked past its share, the rank is done, and so is the epoch:
            # shares differ by one sample at most, so in a loop of batches
            # the other ranks are taking their last batch too.
            self._position = self.dataset_len
            self._reached = True

    def _advance(self, start, taken, share):
        if self.drop_last and taken >= share:
            # The rest (less than a round) is left out of this epoch.
            self._position = self.dataset_len
        else:
            self._position = min(self.dataset_len,
                                 start + taken * self.num_replicas)
        self._reached = True

    def _permutation(self):
        if not self.shuffle:
            return range(self.dataset_len)
        if self._perm_epoch != self.epoch:
            self._perm = permutation(self.dataset_len, self.seed, self.epoch)
            self._perm_epoch = self.epoch
        return self._perm

    def state_dict(self, consumed=None):
        """{"epoch", "position", "dataset_len", "seed", "shuffle"}: ints and
        a bool, for a ckpt state or StatefulDataLoader. consumed: the
        samples each rank's loop has taken in the current iteration (the
        same number on every rank, e.g. batches * batch_size), when that is
        fewer than this sampler has handed out (a DataLoader that draws
        ahead); default: all it handed out."""
        position = self._position
        if consumed is not None:
            consumed = int(consumed)
            if consumed < 0:
                raise _errors.InvalidArgument(
                    f"ckpt.torch.Sampler.state_dict(consumed={consumed}): "
                    f"a number of samples is >= 0")
            if self.drop_last and consumed >= self._share(self._start):
                position = self.dataset_len
            else:
                position = min(self.dataset_len,
                               self._start + consumed * self.num_replicas)
        return {"epoch": self.epoch, "position": position,
                "dataset_len": self.dataset_len, "seed": self.seed,
                "shuffle": self.shuffle}

    def load_state_dict(self, state):
        """Continues from `state` (a state_dict() of any rank of a job of
        any world size); the next iteration starts at its position."""
        where = "ckpt.torch.Sampler.load_state_dict"
        if not hasattr(state, "get"):
            raise _errors.InvalidArgument(
                f"{where}: a state_dict() is a dict, not a "
                f"{type(state).__name__}")
        missing = [k for k in _STATE_KEYS if k not in state]
        if missing:
            raise _errors.InvalidArgument(
                f"{where}: the state has no {missing[0]!r} (keys: "
                f"{sorted(state)}; is it this sampler's state_dict()?)")
        saved = (int(state["dataset_len"]), int(state["seed"]),
                 bool(state["shuffle"]))
        mine = (self.dataset_len, self.seed, self.shuffle)
        if saved != mine:
            raise _errors.InvalidArgument(
                f"{where}: the state is of {saved[0]} samples, seed "
                f"{saved[1]}, shuffle={saved[2]}; this sampler has "
                f"{mine[0]} samples, seed {mine[1]}, shuffle={mine[2]} (the "
                f"data set or the sampler's arguments changed)")
        epoch, position = int(state["epoch"]), int(state["position"])
        if not 0 <= position <= self.dataset_len:
            raise _errors.InvalidArgument(
                f"{where}: position {position} is outside the epoch of "
                f"{self.dataset_len} samples")
        self._iteration = None
        self._reached = False
        if self.epoch > epoch:
            # set_epoch() moved on past the saved epoch: it starts afresh.
            self._position = self._start = 0
            return
        self.epoch = epoch
        self._position = self._start = position

    def __repr__(self):
        return (f"ckpt.torch.Sampler({self.dataset_len}, num_replicas="
                f"{self.num_replicas}, rank={self.rank}, shuffle="
                f"{self.shuffle}, seed={self.seed}, drop_last="
                f"{self.drop_last}; epoch {self.epoch}, position "
                f"{self._position})")


def _distributed_defaults(num_replicas, rank):
    dist = torch.distributed
    initialized = dist.is_available() and dist.is_initialized()
    if num_replicas is None:
        num_replicas = dist.get_world_size() if initialized else 1
    if rank is None:
        rank = dist.get_rank() if initialized else 0
    num_replicas, rank = int(num_replicas), int(rank)
    if num_replicas < 1:
        raise _errors.InvalidArgument(
            f"ckpt.torch.Sampler: num_replicas={num_replicas}, not >= 1")
    if not 0 <= rank < num_replicas:
        raise _errors.InvalidArgument(
            f"ckpt.torch.Sampler: rank {rank} is outside [0, "
            f"{num_replicas - 1}]")
    return num_replicas, rank


def _mix(z):
    z = ((z ^ (z >> 30)) * _MIX1) & _MASK
    z = ((z ^ (z >> 27)) * _MIX2) & _MASK
    return z ^ (z >> 31)


def splitmix64(state, count):
    """The first `count` numbers SplitMix64{state} draws (ckpt::SplitMix64):
    for tests and for the draws below."""
    return [_mix((state + (k + 1) * _GAMMA) & _MASK) for k in range(count)]


def permutation(n, seed, epoch):
    """ckpt::Sampler's permutation of range(n) for (seed, epoch), as an
    array of int64."""
    perm = array.array("q", range(n))
    i = n
    for j in _swaps(n, (seed & _MASK) ^ ((epoch * _EPOCH) & _MASK)):
        i -= 1
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def _swaps(n, state):
    """The indices Fisher-Yates swaps position n-1, n-2, ..., 1 with:
    SplitMix64{state}.Below(i) for i = n, n-1, ..., 2, each a draw (or,
    rarely, more: Lemire's rejection) of the same stream."""
    drawn = 0  # numbers of the stream used so far
    bound = n
    while bound > 1:
        count = min(bound - 1, 1 << 16)
        highs = _bulk_below(state, drawn, bound, count)
        yield from highs
        bound -= len(highs)
        drawn += len(highs)
        if len(highs) < count:  # a draw to reject: redraw it one at a time
            while True:
                drawn += 1
                product = _mix((state + drawn * _GAMMA) & _MASK) * bound
                if product & _MASK >= ((1 << 64) - bound) % bound:
                    break
            yield product >> 64
            bound -= 1


def _bulk_below(state, drawn, bound, count):
    """Below(bound), Below(bound - 1), ... for up to `count` bounds, one
    draw each, starting after `drawn` numbers of the stream; stops before
    the first draw that Lemire's method rejects."""
    if _np is None:
        out = []
        for k in range(count):
            b = bound - k
            product = _mix((state + (drawn + k + 1) * _GAMMA) & _MASK) * b
            low = product & _MASK
            if low < b and low < ((1 << 64) - b) % b:
                break
            out.append(product >> 64)
        return out
    u64 = _np.uint64
    with _np.errstate(over="ignore"):
        k = _np.arange(drawn + 1, drawn + count + 1, dtype=u64)
        z = u64(state) + k * u64(_GAMMA)
        z = (z ^ (z >> u64(30))) * u64(_MIX1)
        z = (z ^ (z >> u64(27))) * u64(_MIX2)
        z = z ^ (z >> u64(31))
        b = _np.arange(bound, bound - count, -1, dtype=u64)
        # The 128-bit product z * b in 32-bit halves: its high word is the
        # draw, its low word decides a rejection.
        m32, s32 = u64(0xFFFFFFFF), u64(32)
        zl, zh, bl, bh = z & m32, z >> s32, b & m32, b >> s32
        ll, lh, hl = zl * bl, zl * bh, zh * bl
        mid = (ll >> s32) + (lh & m32) + (hl & m32)
        high = zh * bh + (lh >> s32) + (hl >> s32) + (mid >> s32)
        low = z * b
    stop = count
    for i in _np.flatnonzero(low < b).tolist():  # rare: check exactly
        bi = bound - i
        if int(low[i]) < ((1 << 64) - bi) % bi:
            stop = i
            break
    return high[:stop].tolist()
