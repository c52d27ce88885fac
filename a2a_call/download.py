"""`a2a-call download`: a task's stored file artifacts to local files, each checked against
the SHA-256 (and size) its part declares before it gets its name.

A stored file is a `url` part with `filename`, `mediaType` and metadata
`a2a_service.sha256` / `a2a_service.byteSize` (on the part or its artifact). The bytes
are fetched over http(s), with the run's credentials only from the agent's own origin, and
never past the size the part declares nor past `--max-download`: a remote agent decides
the URL, so an endless body would otherwise fill the disk. A `file://` URL is never read:
it would let the agent copy any file the user can read into the download directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pathlib
import re
import tempfile
import urllib.parse
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

import httpx
from a2a.types import a2a_pb2 as sdk

from a2a_call.client import CONNECT_TIMEOUT_SECONDS, Connection
from a2a_call.errors import CallError, Exit
from a2a_call.metadata import namespace_of

CHUNK = 1 << 16
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class StoredFile:
    artifact_id: str
    filename: str
    url: str
    sha256: str
    byte_size: int | None


def _whole_number(value: Any) -> int | None:
    """A byte count from metadata: JSON numbers arrive as doubles, or it may be a string."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    if isinstance(value, int) and value >= 0:
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def stored_files(task: sdk.Task) -> list[StoredFile]:
    """The url parts of the task's artifacts that declare a SHA-256."""
    files = []
    for artifact in task.artifacts:
        for part in artifact.parts:
            if part.WhichOneof("content") != "url":
                continue
            meta = namespace_of(part.metadata, artifact.metadata)
            digest = str(meta.get("sha256", "")).lower()
            if not _SHA256.fullmatch(digest):
                continue
            size = _whole_number(meta.get("byteSize"))
            files.append(
                StoredFile(
                    artifact_id=artifact.artifact_id,
                    filename=part.filename or artifact.name or digest,
                    url=part.url,
                    sha256=digest,
                    byte_size=size,
                )
            )
    return files


def select(files: list[StoredFile], which: str | None, everything: bool) -> list[StoredFile]:
    if not files:
        raise CallError(Exit.PROTOCOL, "the task has no stored file artifacts")
    if everything:
        return files
    if which is None:
        if len(files) == 1:
            return files
        names = ", ".join(f.filename for f in files)
        raise CallError(
            Exit.USAGE, f"the task has {len(files)} files ({names}): name one, or --all"
        )
    chosen = [f for f in files if which in (f.artifact_id, f.filename, f.sha256)]
    if not chosen:
        raise CallError(Exit.USAGE, f"no stored file with artifact id or filename {which!r}")
    return chosen


def safe_name(filename: str, fallback: str) -> str:
    """The last path component, without anything that could leave the target directory."""
    name = pathlib.PurePosixPath(filename.replace("\\", "/")).name
    name = "".join(c for c in name if c.isprintable() and c not in "/\0")
    return name if name not in ("", ".", "..") else fallback


def target_path(output: str | None, file: StoredFile, several: bool) -> pathlib.Path:
    """Where FILE goes: OUTPUT itself (one file), else in it: when it is a directory, ends
    in a slash (`-o out/`: a directory, made if missing; pathlib would drop the slash and
    name a file `out`), or several files go."""
    name = safe_name(file.filename, file.sha256)
    if output is None:
        return pathlib.Path(name)
    out = pathlib.Path(output)
    if output.endswith(("/", os.sep)):
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CallError(
                Exit.USAGE, f"{output}: cannot make the directory ({exc.strerror})"
            ) from None
        return out / name
    if several or out.is_dir():
        return out / name
    return out


@dataclass(frozen=True)
class Cap:
    """The most bytes one download may bring: the size the part declares, and the
    --max-download limit; past either it is aborted."""

    file: StoredFile
    limit: int

    def check(self, size: int) -> None:
        """Refuse SIZE bytes (so far, or announced) if they are more than allowed."""
        declared = self.file.byte_size
        if declared is not None and size > declared:
            raise CallError(
                Exit.NOT_VERIFIED,
                f"{self.file.filename}: more than the {declared} bytes the artifact declares; "
                "aborted, nothing written",
            )
        if size > self.limit:
            raise CallError(
                Exit.REFUSED,
                f"{self.file.filename}: larger than --max-download ({self.limit} bytes); "
                "aborted, nothing written",
            )


async def fetch(
    conn: Connection,
    file: StoredFile,
    dest: pathlib.Path,
    *,
    force: bool,
    limit: int,
) -> int:
    """Write the bytes next to DEST, check them, then rename; returns the byte count. The
    download stops as soon as it is larger than allowed (`Cap`: the declared size, LIMIT
    bytes: --max-download), and what it wrote goes."""
    cap = Cap(file, limit)
    cap.check(file.byte_size or 0)  # a declared size over the limit: not even started
    _refuse_local(file.url)
    fd, tmp = _temp_beside(dest, force)
    digest = hashlib.sha256()
    size = 0
    try:
        # aclosing: an aborted download closes its connection at once, not when collected
        async with contextlib.aclosing(_chunks(conn, file.url, cap)) as body:
            with os.fdopen(fd, "wb") as sink:
                async for chunk in body:
                    size += len(chunk)
                    cap.check(size)
                    digest.update(chunk)
                    sink.write(chunk)
        if digest.hexdigest() != file.sha256:
            raise CallError(
                Exit.NOT_VERIFIED,
                f"{file.filename}: SHA-256 {digest.hexdigest()} does not match the declared "
                f"{file.sha256}; nothing written",
            )
        if file.byte_size is not None and size != file.byte_size:
            raise CallError(
                Exit.NOT_VERIFIED,
                f"{file.filename}: {size} bytes, the artifact declares {file.byte_size}; nothing written",
            )
        os.replace(tmp, dest)
    except BaseException:
        _discard(tmp)
        raise
    return size


def _temp_beside(dest: pathlib.Path, force: bool) -> tuple[int, str]:
    """A temporary file in DEST's directory (the rename is then atomic)."""
    if dest.exists() and not force:
        raise CallError(Exit.USAGE, f"{dest}: exists (pass --force to overwrite it)")
    try:
        return tempfile.mkstemp(prefix=".a2a-call-", dir=dest.parent)
    except OSError as exc:
        raise CallError(Exit.USAGE, f"{dest.parent}: cannot write there ({exc.strerror})") from None


def _discard(tmp: str) -> None:
    pathlib.Path(tmp).unlink(missing_ok=True)


def _refuse_local(url: str) -> None:
    """The agent names the URL: a file:// one would have the client copy a local file of the
    user's (or read /dev/zero forever) on the agent's say. Never, loopback agent or not."""
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme == "file":
        raise CallError(
            Exit.REFUSED,
            f"{url}: a local file; a2a-call never reads file:// URLs an agent names",
        )
    if scheme not in ("http", "https"):
        raise CallError(Exit.PROTOCOL, f"{url}: not an http(s) URL")


async def _chunks(conn: Connection, url: str, cap: Cap) -> AsyncGenerator[bytes, None]:
    # identity: what a compressed body would inflate to is not what Content-Length says
    headers = {"Accept-Encoding": "identity", **conn.credentials_for(url)}
    # a download has no bound as a whole (it may be large); its reads have the idle one
    timeout = httpx.Timeout(conn.idle_timeout, connect=CONNECT_TIMEOUT_SECONDS)
    try:
        async with conn.http.stream("GET", url, headers=headers, timeout=timeout) as response:
            if response.status_code in (401, 403):
                raise CallError(Exit.UNAUTHENTICATED, f"{url}: HTTP {response.status_code}")
            if response.status_code != 200:
                raise CallError(Exit.PROTOCOL, f"{url}: HTTP {response.status_code}")
            announced = response.headers.get("content-length", "")
            if announced.isdigit():
                cap.check(int(announced))
            async for chunk in response.aiter_bytes(CHUNK):
                yield chunk
    except httpx.HTTPError as exc:
        raise CallError(Exit.UNREACHABLE, f"unreachable: {url}: {type(exc).__name__}") from None
