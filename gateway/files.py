"""The download route of stored file artifacts (service.engine.files):

    GET|HEAD /tasks/{taskId}/files/{sha256}
    GET|HEAD /{tenant}/tasks/{taskId}/files/{sha256}

Behind the same auth guard as every A2A route. Who may read a file is the API's
decision, with GetTask's scoping: the task's owner in its tenant; anyone else gets
the 404 a task it cannot see gets (the REST error body). No A2A-Version header is
needed: browsers and curl download it as any file.

The bytes are served by starlette's FileResponse (chunked reads off the event loop,
`http.response.pathsend` where the server offers it, single and multiple byte ranges,
416 with `Content-Range: bytes */size`, HEAD), never read whole into memory. On top:
`ETag` is the quoted SHA-256 (`If-None-Match` → 304; `If-Range` compares it),
`Content-Disposition: attachment` with the file name (RFC 6266 `filename*` encoding
when it is not plain ASCII), and headers that stop a browser from rendering an agent's
file as a page of this origin (`X-Content-Type-Options: nosniff`, a sandbox CSP).
"""

from __future__ import annotations

import os
from typing import Protocol

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import FileResponse, Response

from gateway.dispatch import REST_JSON, forward_error
from gateway.params import Caller, call_context
from service.api import CallContext
from service.calls import record
from service.calls.admission import DOWNLOAD
from service.calls.pipeline import Pipeline
from service.engine.files import StoredFile
from service.protocol.errors import TaskNotFoundError


class _FileResponse(FileResponse):
    chunk_size = 512 * 1024  # fewer thread hops and writes than the default 64 KiB


FILE_HEADERS = {
    # Content-addressed: the bytes behind one URL never change; only the caller may cache.
    "cache-control": "private, max-age=31536000, immutable",
    "x-content-type-options": "nosniff",
    "content-security-policy": "sandbox",
}


class FileReader(Protocol):
    """Where the endpoint asks for a file: A2AApi.stored_file."""

    async def stored_file(
        self, call: CallContext, tenant: str, task_id: str, sha256: str
    ) -> StoredFile: ...


def etag_matches(if_none_match: str | None, sha256: str) -> bool:
    """Whether an If-None-Match header names this file (`*`, or its tag, weak or strong)."""
    if not if_none_match:
        return False
    for tag in if_none_match.split(","):
        tag = tag.strip().removeprefix("W/").strip('"')
        if tag in ("*", sha256):
            return True
    return False


class FileEndpoint:
    def __init__(self, reader: FileReader, pipeline: Pipeline | None = None) -> None:
        self.reader = reader
        self.pipeline = pipeline or Pipeline()

    async def handle(self, request: Request, caller: Caller) -> Response:
        params = request.path_params
        task_id = params["task_id"]
        logged = record.current() or self.pipeline.open("rest", DOWNLOAD)
        logged.about(task_id)
        try:
            call = call_context(caller, request.headers, request.query_params)
            await self.pipeline.admit(logged, call, None)  # the drain, the caller's rate limit
            found = await self.reader.stored_file(
                call, params.get("tenant", ""), task_id, params["sha256"]
            )
            try:
                info = await anyio.to_thread.run_sync(os.stat, found.path)
            except FileNotFoundError:  # released between the lookup and now
                raise TaskNotFoundError(
                    f"Task {task_id} has no stored file by that name."
                ) from None
        except Exception as exc:
            return forward_error(exc, REST_JSON, "file download")
        headers = {**FILE_HEADERS, "etag": f'"{found.sha256}"'}
        if etag_matches(request.headers.get("if-none-match"), found.sha256):
            return Response(status_code=304, headers=headers)
        return _FileResponse(
            found.path,
            media_type=found.media_type,
            filename=found.filename or None,
            headers=headers,
            stat_result=info,
        )
