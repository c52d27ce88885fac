"""Stored file artifacts: what `ctx.file_artifact(...)` turns into.

The bytes go to the blob store (content-addressed, deduplicated, see
service.store.blobs); the task gets a standard artifact whose one part is a `url`
to the gateway's download route (service.protocol.files), with `filename`,
`mediaType` and the part metadata `a2a_service.byteSize` / `a2a_service.sha256`
(and, when `file_artifact_local_urls` is on, `a2a_service.fileUrl`: a `file://` URL
of the blob for clients on the same host). So the bytes never travel in a task, a
stream or a push notification, and reading a task costs the same whatever its files
weigh.

Limits: `file_artifact_max_bytes` per file and `file_artifacts_max_bytes_per_turn`
for all files of one turn; exceeding one raises `FileArtifactLimitError` (the agent
API's) naming the file and the key, and nothing is stored.
"""

from __future__ import annotations

import mimetypes
import os
from dataclasses import dataclass
from typing import Any

from gen import a2a_pb2 as pb
from service.agent import NAMESPACE, FileArtifactLimitError, metadata_struct
from service.protocol.files import file_path
from service.protocol.media import essence
from service.setting import at_least, check_section, setting
from service.store import Scope
from service.store.blobs import BlobSource, BlobStore, BlobTooLargeError

MiB = 1024 * 1024
BYTE_SIZE_KEY = "byteSize"
SHA256_KEY = "sha256"
FILE_URL_KEY = "fileUrl"
MAX_FILENAME_BYTES = 255
DEFAULT_MEDIA_TYPE = "application/octet-stream"
AT_LEAST_1_BYTE = at_least(1, "must be at least {low} (bytes), got {value}")


@dataclass
class FileSettings:
    """Stored file artifacts ([Writing an agent: stored file artifacts](agents.md#stored-file-artifacts))."""

    file_artifact_dir: str = setting(
        "",
        "where stored file artifacts' bytes are kept (with the `memory:` store: a temporary directory removed at shutdown). Several servers on one task store must share it. See [Writing an agent: stored file artifacts](agents.md#stored-file-artifacts)",
        shown="`DATA_DIR/files`",
    )
    file_artifact_max_bytes: int = setting(
        100 * MiB,
        "largest stored file artifact",
        shown="`104857600` (100 MiB)",
        check=AT_LEAST_1_BYTE,
    )
    file_artifacts_max_bytes_per_turn: int = setting(
        1024 * MiB,
        "all file artifacts one turn may store together",
        shown="`1073741824` (1 GiB)",
        check=AT_LEAST_1_BYTE,
    )
    file_artifact_local_urls: bool = setting(
        False,
        "also give each stored file a `file://` URL of its bytes (part metadata `a2a_service.fileUrl`), for clients on the same host; it reveals a local path",
    )


def validate_files(s: FileSettings) -> None:
    check_section(s, FileSettings)


@dataclass(frozen=True, slots=True)
class StoredFile:
    """A file artifact as the download route serves it."""

    sha256: str
    size: int
    path: str
    filename: str
    media_type: str


def clean_filename(filename: str) -> str:
    """The last path component, printable, at most 255 bytes; ValueError when nothing is left."""
    name = filename.replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(c for c in name if c.isprintable()).strip()
    if name in ("", ".", ".."):
        raise ValueError(f"file artifact: {filename!r} is not a usable file name")
    while len(name.encode()) > MAX_FILENAME_BYTES:
        name = name[1:]  # keep the end: it has the extension
    return name


def clean_media_type(media_type: str | None, filename: str) -> str:
    """The given media type (type/subtype, lower case) or one guessed from the file name."""
    if media_type:
        found = essence(media_type)
        if found is None:
            raise ValueError(f"file artifact: {media_type!r} is not a media type (type/subtype)")
        return found
    return mimetypes.guess_type(filename, strict=False)[0] or DEFAULT_MEDIA_TYPE


def _size(n: int) -> str:
    return f"{n // MiB} MiB" if n >= MiB and n % MiB == 0 else f"{n} bytes"


def sha256_of(part: pb.Part) -> str:
    """The `a2a_service.sha256` of a stored file's part ('' for any other part)."""
    ours = part.metadata.fields.get(NAMESPACE)
    if ours is None or ours.WhichOneof("kind") != "struct_value":
        return ""
    value = ours.struct_value.fields.get(SHA256_KEY)
    return value.string_value if value is not None else ""


class FileArtifacts:
    """The blob store, the download URLs and the limits, as the engine's turns use them."""

    def __init__(
        self,
        blobs: BlobStore,
        *,
        base_url: str,
        max_file_bytes: int = FileSettings.file_artifact_max_bytes,
        max_turn_bytes: int = FileSettings.file_artifacts_max_bytes_per_turn,
        local_urls: bool = False,
    ) -> None:
        self.blobs = blobs
        self.base_url = base_url.rstrip("/")  # '' when no HTTP address is known: a path only
        self.max_file_bytes = max_file_bytes
        self.max_turn_bytes = max_turn_bytes
        self.local_urls = local_urls

    async def store(
        self,
        scope: Scope,
        task_id: str,
        source: BlobSource,
        filename: str,
        media_type: str | None,
        used: int,
    ) -> tuple[pb.Part, int]:
        """Store the bytes for the task; the url part and its size. `used`: bytes this turn
        stored already."""
        name = clean_filename(filename)
        media = clean_media_type(media_type, name)
        allowed = max(0, min(self.max_file_bytes, self.max_turn_bytes - used))
        try:
            blob = await self.blobs.put(scope, task_id, source, allowed)
        except BlobTooLargeError:
            if allowed == self.max_file_bytes:
                raise FileArtifactLimitError(
                    f"The file {name!r} is larger than {_size(self.max_file_bytes)}, the limit "
                    "per file (file_artifact_max_bytes)."
                ) from None
            raise FileArtifactLimitError(
                f"The file {name!r} would take this turn's files past "
                f"{_size(self.max_turn_bytes)} (file_artifacts_max_bytes_per_turn)."
            ) from None
        ours: dict[str, Any] = {BYTE_SIZE_KEY: blob.size, SHA256_KEY: blob.sha256}
        if self.local_urls:
            ours[FILE_URL_KEY] = blob.path.resolve().as_uri()
        part = pb.Part(
            url=self.base_url + file_path(scope.tenant, task_id, blob.sha256),
            filename=name,
            media_type=media,
        )
        meta = metadata_struct({NAMESPACE: ours})
        assert meta is not None
        part.metadata.CopyFrom(meta)
        return part, blob.size

    async def find(self, scope: Scope, task: pb.Task, sha256: str) -> StoredFile | None:
        """The task's stored file with this hash, if the task has it and its bytes are kept."""
        part = next(
            (p for a in task.artifacts for p in a.parts if p.url and sha256_of(p) == sha256),
            None,
        )
        if part is None:
            return None
        blob = await self.blobs.find(scope, task.id, sha256)
        if blob is None:
            return None
        return StoredFile(
            sha256=blob.sha256,
            size=blob.size,
            path=os.fspath(blob.path),
            filename=part.filename,
            media_type=part.media_type or DEFAULT_MEDIA_TYPE,
        )

    async def release_task(self, scope: Scope, task_id: str) -> int:
        """When a task is deleted (retention): its files go, unless another task has them."""
        return await self.blobs.release_task(scope, task_id)

    async def close(self) -> None:
        await self.blobs.close()
