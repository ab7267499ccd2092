"""ckpt.Catalog: the library's catalog handle.
"""

import os
import warnings

from ckpt._errors import (DataLoss, FailedPrecondition, InvalidArgument,
                          NotFound)
from ckpt._lib import _Owned, _call, _encode, _lib, _make
from ckpt._records import CatalogCheckpoint, CatalogJob, row as _row


def _job(job):
    """A job as the library takes it: a path object is a root (made
    absolute: a relative str without "./" is a job id)."""
    if isinstance(job, os.PathLike):
        return os.path.abspath(os.fspath(job))
    return job


class Catalog(_Owned):
    """The catalog of committed checkpoints: a SQLite file (sqlite:///path
    or a plain path) or a postgresql:// URL; "" or "default":
    $CKPT_CATALOG, else ${XDG_STATE_HOME:-~/.local/state}/ckpt/
    catalog.sqlite. Ask it what to resume from, or pass it to
    CheckpointManager(catalog=...) to record saves.

    A SQLite file that is not there is ckpt.NotFound naming it (a mistyped
    path is no empty catalog), unless create=True, which creates it (and
    its folders): for a catalog new jobs are to record in. A job's
    catalog="path" creates its catalog itself."""

    _free = "ckpt_catalog_close"

    def __init__(self, url="", *, create=False):
        super().__init__(None)
        url = os.fspath(url)
        self._h = _make(_lib.ckpt_catalog_open_ex,
                        _encode(url, "catalog URL"), 1 if create else 0)

    @property
    def url(self):
        return _lib.ckpt_catalog_url(self._handle()).decode()

    def __repr__(self):
        if not self._h:
            return "ckpt.Catalog(closed)"
        return f"ckpt.Catalog({self.url!r})"

    def jobs(self):
        """Every job, by id (CatalogJob)."""
        rows = _call(_lib.ckpt_catalog_jobs, self._handle(), out=True)
        return [CatalogJob(r) for r in rows]

    def latest(self, job, *, check=True):
        """The job's newest committed durable checkpoint
        (CatalogCheckpoint), or None.

        `job` (here and in best() and list()) is a job's id, or its root
        given as a path ("/...", "./...", "../...", "file://...", a
        pathlib.Path): the job that saved under that root, whatever its id,
        answered from that root alone. A root several jobs saved into
        raises ckpt.FailedPrecondition naming them.

        Storage is the truth: each row, newest first, is checked against
        it (its manifest is there and is the commit the row names), and one
        that is not (deleted or replaced since, without the catalog being
        told) is skipped with a RuntimeWarning for the next older, as `ckpt
        catalog latest` does. A storage that cannot be asked raises
        (ckpt.Unavailable): nothing is known to be stale. check=False
        answers from the catalog alone."""
        if not check:
            found = _row(_call(_lib.ckpt_catalog_latest, self._handle(),
                               _encode(_job(job), "job"), out=True))
        else:
            rows = self.list(job, tier="durable")
            found = _first_on_storage(reversed(rows), "latest")
        return found if found is not None else self._none(job, "latest")

    def best(self, job, metric, higher_is_better=False, *, check=True):
        """The job's committed durable checkpoint with the lowest (or, with
        higher_is_better, highest) value of `metric` (ties: the newest
        step), or None; each checked against storage as latest() checks
        it, a stale one skipped for the next best."""
        if not check:
            return _row(_call(_lib.ckpt_catalog_best, self._handle(),
                              _encode(_job(job), "job"), _encode(metric, "metric"),
                              1 if higher_is_better else 0, out=True))
        rows = _call(_lib.ckpt_catalog_ranked, self._handle(),
                     _encode(_job(job), "job"), _encode(metric, "metric"),
                     1 if higher_is_better else 0, out=True)
        found = _first_on_storage((CatalogCheckpoint(r) for r in rows),
                                  "best")
        return found if found is not None else self._none(job, "best")

    def _none(self, job, what):
        """None, for latest() or best() that found nothing; when `job` is
        a job id the catalog has no row of and also a folder here (a root
        given as a relative path without "./" is read as a job id, as
        mgr.url is for ckpt.open("run")), warns how to name the root."""
        if isinstance(job, str) and "://" not in job and \
                not job.startswith(("/", "./", "../")) and \
                os.path.isdir(job) and not self.list(job):
            warnings.warn(
                f"Catalog.{what}({job!r}): the catalog has no job of that "
                f"id; a folder {job!r} is here, but a relative path without "
                f"'./' is read as a job id: name the root as './{job}' or "
                f"pathlib.Path({job!r})", RuntimeWarning, stacklevel=3)
        return None

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
                     _encode(_job(job), "job"), _encode(os.fspath(root), "root"),
                     1 if include_deleted else 0,
                     int(limit) if tier is None else 0, out=True)
        rows = [CatalogCheckpoint(r) for r in rows
                if tier is None or r.get("tier", "durable") == tier]
        return rows[-int(limit):] if tier is not None and limit else rows


def _first_on_storage(rows, what):
    """The first of `rows` whose checkpoint is committed on storage as the
    row says, warning of each that is not; None when none is."""
    for r in rows:
        try:
            _call(_lib.ckpt_catalog_check, _encode(r.job_id, "job"),
                  _encode(r.root, "root"), int(r.step),
                  _encode(r.manifest_checksum, "manifest checksum"))
        except (NotFound, DataLoss, FailedPrecondition) as e:
            warnings.warn(f"Catalog.{what}: skipping step {r.step} of job "
                          f"{r.job_id!r}: {e}", RuntimeWarning, stacklevel=3)
            continue
        return r
    return None
