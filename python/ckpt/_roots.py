"""Whether a root a manager opened with create=None exists: reading one
that does not is ckpt.NotFound naming it (a mistyped path, or S3 prefix,
is no silent fresh start; _manager.py).
"""

import os
import urllib.parse

from ckpt import _errors, _manager_handle


def is_store(url):
    """Whether `url` names an object store's root (s3://)."""
    return url.lower().startswith("s3://")


def missing(url, probe=True):
    """The path or URL of a root that does not exist, else None (it exists,
    or is mem://). A local root (a path, or a file:// URL, whose escapes the
    library decodes) by its folder; an s3:// root, whose prefix holds no
    object (a mistyped one), by the library opening it without creating it,
    when `probe` (else it is taken as missing until a read looks)."""
    if "://" not in url:
        path = os.path.abspath(url)
    elif url.lower().startswith("file://"):
        path = urllib.parse.unquote(url[len("file://"):])
        if not path.startswith("/"):  # file://host/path: the library's
            return None
    elif is_store(url):
        if not probe:
            return url
        try:
            _manager_handle.Manager(url, create=False).close()
        except _errors.NotFound:
            return url
        return None
    else:
        return None
    return None if os.path.exists(path) else path
