"""Domain errors. Engine code raises these; api/errors.py maps each to an HTTP status and
the envelope of the API family that asked. Nothing here knows about HTTP."""

from __future__ import annotations


MAX_ECHO = 200  # characters of a client's own value repeated in an error message


def echo(value: object) -> str:
    """A value from the request, cut short for an error message (a 1 MB model name is
    not worth sending back)."""
    text = str(value)
    return text if len(text) <= MAX_ECHO else text[:MAX_ECHO] + f"... ({len(text)} characters)"


class InferdError(Exception):
    """Base of every error a client may see. `message` is safe to show to the caller."""

    retryable = False
    MAX_MESSAGE = 2000  # messages quoting request values are cut past this

    def __init__(self, message: str):
        if len(message) > self.MAX_MESSAGE:
            message = message[:self.MAX_MESSAGE] + f"... (message cut, {len(message)} characters)"
        super().__init__(message)
        self.message = message


class InvalidInput(InferdError):
    """The request is well-formed JSON but asks for something invalid."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


class ContextOverflow(InvalidInput):
    """Prompt plus requested tokens do not fit the model's context window."""


class Unauthorized(InferdError):
    def __init__(self, message: str = "invalid or missing API key"):
        super().__init__(message)


class Forbidden(InferdError):
    """The request comes from a web page (Origin) or under a name (Host) that is not allowed."""


class ModelNotFound(InferdError):
    def __init__(self, name: str, kind: str | None = None):
        what = f"{kind} model" if kind else "model"
        super().__init__(f"{what} '{echo(name)}' not found")
        self.name = name


class NotFound(InferdError):
    """A non-model resource (route, file, adapter) does not exist."""


class ModelNotSupported(InferdError):
    """The model exists but cannot do what was asked (wrong kind, missing capability)."""


class CapabilityMissing(ModelNotSupported):
    pass


class NotImplementedYet(InferdError):
    """A documented feature whose runtime is not available in this build (501)."""


class CpuUnsupported(NotImplementedYet):
    """This llama.cpp build cannot run a model of this type on this CPU: a test decode in a child
    process died by a signal (runtimes/llama_cpp/selfcheck.py). The message names the CPU feature,
    the build and the rebuild command. Not retryable: the verdict is cached per build and CPU."""


class PayloadTooLarge(InferdError):
    pass


class UnsupportedMediaType(InferdError):
    """The body's Content-Type is not one the route reads (a 415)."""


class Overloaded(InferdError):
    """Admission control refused the request; the client should retry later."""

    retryable = True

    def __init__(self, message: str = "server is at capacity", retry_after_ms: int = 1000):
        super().__init__(message)
        self.retry_after_ms = retry_after_ms


class ModelUnloaded(InferdError):
    """The model was unloaded (keep-alive, eviction, shutdown) while the request waited or ran.
    The same answer from every scheduler: retryable, the next try loads it again."""

    retryable = True

    def __init__(self, name: str, retry_after_ms: int = 500):
        super().__init__(f"model '{name}' was unloaded while the request was pending; retry")
        self.retry_after_ms = retry_after_ms


class ModelLoadFailed(InferdError):
    """Loading failed. Not cached: the next request tries again."""

    retryable = True


class InferenceFailed(InferdError):
    pass


class MemoryBudgetExceeded(InferdError):
    """A model does not fit the memory budget (--max-memory) even after evicting idle models."""


class UpstreamFailed(InferdError):
    """A model source (Hugging Face Hub, an Ollama registry) failed or sent bad bytes."""

    retryable = True


class StorageFailed(InferdError):
    """Server-side storage (stored responses) could not be written or read."""


class InsufficientStorage(InferdError):
    """Not enough disk space for a download."""


class Cancelled(InferdError):
    """The client went away or /stop was called; nobody is waiting for an answer."""

    def __init__(self, message: str = "request cancelled"):
        super().__init__(message)


def copy_error(exc: BaseException, what: str = "inference failed") -> InferdError:
    """A fresh exception equal to `exc`, for one of the many requests a failed batch or step
    held: domain errors keep their class and fields (a ModelUnloaded stays retryable), anything
    else becomes InferenceFailed. One shared instance would gather every request's traceback."""
    if isinstance(exc, InferdError):
        new = InferdError.__new__(type(exc))
        new.__dict__.update(exc.__dict__)
        new.args = exc.args
        return new
    return InferenceFailed(f"{what}: {exc}")


class ConfigError(Exception):
    """Bad configuration found at start-up (duplicate served names, bad flags)."""
