"""The page cache helper of the Python benchmarks (bench/*.py)."""
import os


def drop_cache(root):
    """Drops the pages of every file under `root` from the page cache, as
    after a restart, so that the next read comes from the disk."""
    for folder, _, files in os.walk(root):
        for f in files:
            fd = os.open(os.path.join(folder, f), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
