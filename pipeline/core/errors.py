"""Named exceptions of the library.

The CLI turns every ``CtxlakeError`` into a ``click.ClickException`` in one place
(``pipeline.cli.main``), printing the message, the file/line when known, and a hint.
"""

from __future__ import annotations


class CtxlakeError(Exception):
    """Base class: a problem the user can act on (never a bug)."""

    exit_code = 1

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.path = path
        self.line = line
        self.hint = hint

    def __str__(self) -> str:
        where = ""
        if self.path:
            where = f"{self.path}:{self.line}: " if self.line else f"{self.path}: "
        text = f"{where}{self.message}"
        if self.hint:
            text += f"\nhint: {self.hint}"
        return text


class UsageError(CtxlakeError):
    """Bad arguments or configuration (exit code 2)."""

    exit_code = 2


class ConfigError(UsageError):
    """The policy config file has an unknown key, a wrong type or an invalid regex."""


class LakeLockedError(CtxlakeError):
    """Another run holds the lake's lock (exit code 75, EX_TEMPFAIL: a scheduler retries later)."""

    exit_code = 75


class LakeNotFoundError(CtxlakeError):
    """The lake directory has no tables yet."""


class RemoteError(CtxlakeError):
    """The object store of an ``s3://`` or ``gs://`` lake refused a request or cannot be
    reached (credentials, endpoint, bucket, network)."""


class CorruptPartError(CtxlakeError):
    """A Parquet part of a derived table of the lake cannot be read (cut short, not Parquet).
    Derived tables are recomputed from the messages: the nightly job removes the part and
    has every stage redo its work in full."""


class LakeDamagedError(CtxlakeError):
    """A file the lake cannot be read without (``sources.parquet``, ``runs.parquet``, a part of
    a table read from the archive) is missing or not a whole Parquet file. Unlike a derived
    part, it is not recomputed: a run refuses to add to such a lake (it would read every
    file again beside the rows already there)."""


class LakeAccessError(CtxlakeError):
    """The lake's folder or lock file cannot be written by this user."""


class RecordError(CtxlakeError):
    """One source line/object cannot be read; it goes to the quarantine with this reason."""


class UnknownFormatError(CtxlakeError):
    """The lake records a transcript format no reader of this version knows."""


class StoreError(CtxlakeError):
    """The payload store refused a write (symlink, different bytes, I/O error)."""


class UnsafePathError(CtxlakeError):
    """A path ctxlake would write, delete or read through is a symlink, or resolves into the
    source archive: refused."""


class TokenizerUnavailableError(CtxlakeError):
    """A real tokenizer was asked for but the optional ``tokenizers`` extra is not installed."""


class IgnorePatternWarning(UserWarning):
    """An ``ignore_patterns`` entry is not a valid (JavaScript) regex: it is dropped, the other
    patterns still apply and the run goes on. The CLI prints it as ``warning: ...``."""
