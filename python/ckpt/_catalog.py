"""ckpt.Catalog: the library's catalog handle.
"""

import os

from ckpt._errors import InvalidArgument
from ckpt._lib import _Owned, _call, _encode, _lib, _make
from ckpt._records import CatalogCheckpoint, CatalogJob, row as _row


class Catalog(_Owned):
    """The catalog of committed checkpoints: a SQLite file (sqlite:///path
    or a plain path) or a postgresql:// URL; "" or "default":
    $CKPT_CATALOG, else ~/.local/state/ckpt/catalog.sqlite. Pass it to
    CheckpointManager(catalog=...) to record saves, or ask it what to
    resume from."""

    _free = "ckpt_catalog_close"

    def __init__(self, url=""):
        super().__init__(None)
        url = os.fspath(url)
        self._h = _make(_lib.ckpt_catalog_open, _encode(url, "catalog URL"))

    @property
    def url(self):
        return _lib.ckpt_catalog_url(self._handle()).decode()

    def jobs(self):
        """Every job, by id (CatalogJob)."""
        rows = _call(_lib.ckpt_catalog_jobs, self._handle(), out=True)
        return [CatalogJob(r) for r in rows]

    def latest(self, job):
        """The job's newest committed durable checkpoint
        (CatalogCheckpoint), or None."""
        return _row(_call(_lib.ckpt_catalog_latest, self._handle(),
                          _encode(job, "job"), out=True))

    def best(self, job, metric, higher_is_better=False):
        """The job's committed durable checkpoint with the lowest (or, with
        higher_is_better, highest) value of `metric`, or None."""
        return _row(_call(_lib.ckpt_catalog_best, self._handle(),
                          _encode(job, "job"), _encode(metric, "metric"),
                          1 if higher_is_better else 0, out=True))

    def list(self, job="", *, root="", include_deleted=False, limit=0,
             tier=None):
        """Rows (CatalogCheckpoint), oldest step first: of one job and/or
        root ("": every one), committed only unless include_deleted, at
        most `limit` newest (0: all); of one tier ("durable" or "local")
        or both (None)."""
        if tier not in (None, "durable", "local"):
            raise InvalidArgument(f"no tier {tier!r}: a tier is 'durable' or "
                                  "'local'")
        rows = _call(_lib.ckpt_catalog_list, self._handle(),
                     _encode(job, "job"), _encode(os.fspath(root), "root"),
                     1 if include_deleted else 0,
                     int(limit) if tier is None else 0, out=True)
        rows = [CatalogCheckpoint(r) for r in rows
                if tier is None or r.get("tier", "durable") == tier]
        return rows[-int(limit):] if tier is not None and limit else rows
