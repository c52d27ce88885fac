"""Request bodies and media types shared by the JSON-RPC and REST bindings.

Requests: `application/json` and `application/a2a+json` are accepted (a
missing Content-Type is read as JSON; a charset other than UTF-8 is refused).
Anything else is 415; a body that is not JSON is a parse error (400 on REST,
-32700 on JSON-RPC) -- never a 500.

Responses: JSON-RPC answers `application/json` (the JSON-RPC binding's media
type); REST answers `application/a2a+json` (the media type the A2A spec
registers for HTTP+JSON payloads), or `application/json` when the client's
Accept header asks for that and not for the A2A type.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from gateway.errors import PayloadTooLargeError, UnsupportedMediaTypeError
from service.inputs.early import PartLimits, SendScan
from service.protocol.json_text import dumps

JSON_MEDIA_TYPE = "application/json"
A2A_MEDIA_TYPE = "application/a2a+json"
ACCEPTED_MEDIA_TYPES = frozenset({JSON_MEDIA_TYPE, A2A_MEDIA_TYPE})
MAX_BODY_BYTES = 16 * 1024 * 1024  # default of max_request_bytes (the gRPC limit too)


def check_content_type(content_type: str | None) -> None:
    if not content_type:
        return
    media, _, params = content_type.partition(";")
    media = media.strip().lower()
    if media not in ACCEPTED_MEDIA_TYPES:
        raise UnsupportedMediaTypeError(
            f"Content-Type {media!r} is not supported; send {JSON_MEDIA_TYPE} or {A2A_MEDIA_TYPE}."
        )
    for param in params.split(";"):
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset" and value.strip().strip('"').lower() not in (
            "utf-8",
            "utf8",
        ):
            raise UnsupportedMediaTypeError(
                f"charset {value.strip()!r} is not supported; send UTF-8 JSON."
            )


def may_hold_oversized(request: Request, limits: PartLimits) -> bool:
    """Whether the body may hold a part too large for any media type: not when its declared
    length is within both part limits (the common small send is read without a scan)."""
    length = request.headers.get("content-length")
    return not (length is not None and length.isdigit() and limits.fits_length(int(length)))


async def read_body(
    request: Request, limit: int = MAX_BODY_BYTES, scan: SendScan | None = None
) -> bytes:
    """The raw body, bounded by `limit` bytes (the max_request_bytes setting): a declared
    length past it is refused before anything is read, a chunked body as soon as its count
    passes it. With `scan` (a send), each chunk is scanned as it arrives and reading stops
    at the first part known to be too large for any media type (`scan.found`): what was
    read is returned, and the rest is never held."""
    length = request.headers.get("content-length")
    declared = int(length) if length is not None and length.isdigit() else None
    if declared is not None and declared > limit:
        raise PayloadTooLargeError(f"The request body exceeds {limit} bytes.")
    if scan is not None and (declared is None or not scan.limits.fits_length(declared)):
        return await _read_scanned(request, limit, scan)
    if declared is not None:
        return await _read_into(request, declared)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLargeError(f"The request body exceeds {limit} bytes.")
        chunks.append(chunk)
    return b"".join(chunks)


async def _read_scanned(request: Request, limit: int, scan: SendScan) -> bytes:
    """The body fed to `scan` chunk by chunk, until its end or a refusal."""
    async for chunk in request.stream():
        if len(scan.buf) + len(chunk) > limit:
            raise PayloadTooLargeError(f"The request body exceeds {limit} bytes.")
        if scan.feed(chunk) is not None:
            return scan.body()
    scan.finish()
    return scan.body()


async def _read_into(request: Request, length: int) -> bytes:
    """A body of a declared length, read into one buffer of that size: held once, not
    as chunks and then their join."""
    body = bytearray(length)
    size = 0
    async for chunk in request.stream():
        end = size + len(chunk)
        if end > length:  # more than declared: the server would not pass it, but never grow
            raise PayloadTooLargeError(f"The request body exceeds its Content-Length {length}.")
        body[size:end] = chunk
        size = end
    if size < length:
        del body[size:]
    # bytes' interface without a copy (json, re and the scans read it alike)
    return body  # type: ignore[return-value]


async def read_json_body(
    request: Request, limit: int = MAX_BODY_BYTES, scan: SendScan | None = None
) -> bytes:
    """The body of a request that must be JSON: the content type is checked first."""
    check_content_type(request.headers.get("content-type"))
    return await read_body(request, limit, scan)


def rest_media_type(accept: str | None) -> str:
    """A2A_MEDIA_TYPE unless the client accepts application/json but not it (or a wildcard)."""
    if not accept:
        return A2A_MEDIA_TYPE
    kinds = {part.split(";", 1)[0].strip().lower() for part in accept.split(",")}
    if kinds & {A2A_MEDIA_TYPE, "*/*", "application/*"} or JSON_MEDIA_TYPE not in kinds:
        return A2A_MEDIA_TYPE
    return JSON_MEDIA_TYPE


def json_response(
    value: object,
    status: int = 200,
    media_type: str = JSON_MEDIA_TYPE,
    headers: dict[str, str] | None = None,
) -> Response:
    return Response(dumps(value), status_code=status, media_type=media_type, headers=headers)
