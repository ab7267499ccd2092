"""The exceptions ckpt raises: ckpt.Error and one subclass per status code
of the library's (include/ckpt/c.h), in the codes' order.
"""


class Error(Exception):
    """Base class of every error ckpt raises; the message names the object
    and the operation."""


class InvalidArgument(Error, ValueError):
    pass


class NotFound(Error):
    pass


class AlreadyExists(Error):
    pass


class DataLoss(Error):
    pass


class IOError(Error):  # noqa: A001 - the library's code name
    pass


class Unavailable(Error):
    pass


class Aborted(Error):
    pass


class FailedPrecondition(Error):
    pass


_CODES = [None, InvalidArgument, NotFound, AlreadyExists, DataLoss, IOError,
          Unavailable, Aborted, FailedPrecondition]
for _cls in _CODES[1:] + [Error]:
    _cls.__module__ = "ckpt"
del _cls


def _error(code, message):
    cls = _CODES[code] if 0 < code < len(_CODES) else Error
    return cls(message)
