"""tensord's Status codes as Python exceptions.

Every exception carries the C++ message and its code name (``e.code``, e.g.
``"INVALID_ARGUMENT"``), and is also the built-in exception a Python user expects:
``ValueError`` for INVALID_ARGUMENT, ``MemoryError`` for RESOURCE_EXHAUSTED,
``ConnectionError`` for UNAVAILABLE, ...
"""


class TensordError(Exception):
    """Base class of every error tensord raises."""

    code = "UNKNOWN"

    def __init__(self, message, code=None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self):
        return f"{self.code}: {self.message}"


class InvalidArgument(TensordError, ValueError):
    code = "INVALID_ARGUMENT"


class NotFound(TensordError, LookupError):
    code = "NOT_FOUND"


class AlreadyExists(TensordError, RuntimeError):
    code = "ALREADY_EXISTS"


class PermissionDenied(TensordError, PermissionError):
    code = "PERMISSION_DENIED"


class Unauthenticated(TensordError, PermissionError):
    code = "UNAUTHENTICATED"


class ResourceExhausted(TensordError, MemoryError):
    code = "RESOURCE_EXHAUSTED"


class FailedPrecondition(TensordError, RuntimeError):
    code = "FAILED_PRECONDITION"


class Aborted(TensordError, RuntimeError):
    code = "ABORTED"


class OutOfRange(TensordError, IndexError):
    code = "OUT_OF_RANGE"


class Unimplemented(TensordError, NotImplementedError):
    code = "UNIMPLEMENTED"


class Internal(TensordError, RuntimeError):
    code = "INTERNAL"


class Unavailable(TensordError, ConnectionError):
    code = "UNAVAILABLE"


class DeadlineExceeded(TensordError, TimeoutError):
    code = "DEADLINE_EXCEEDED"


class Cancelled(TensordError, RuntimeError):
    code = "CANCELLED"


class DataLoss(TensordError, RuntimeError):
    code = "DATA_LOSS"


class Unknown(TensordError, RuntimeError):
    code = "UNKNOWN"


BY_CODE = {cls.code: cls for cls in (
    InvalidArgument, NotFound, AlreadyExists, PermissionDenied, Unauthenticated,
    ResourceExhausted, FailedPrecondition, Aborted, OutOfRange, Unimplemented, Internal,
    Unavailable, DeadlineExceeded, Cancelled, DataLoss, Unknown)}

__all__ = ["TensordError"] + [cls.__name__ for cls in BY_CODE.values()]
