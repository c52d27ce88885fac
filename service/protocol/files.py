"""Where a stored file artifact is downloaded: the route's path, spelled once.

    GET /tasks/{taskId}/files/{sha256}              (no tenant)
    GET /{tenant}/tasks/{taskId}/files/{sha256}     (a tenant, like the REST routes)

The engine writes this path into an artifact's `url` part; the gateway serves it.
"""

from __future__ import annotations

import re
from urllib.parse import quote

FILES_ROUTE = "/tasks/{task_id}/files/{sha256}"
TENANT_FILES_ROUTE = "/{tenant}" + FILES_ROUTE
SHA256_HEX = re.compile(r"[0-9a-f]{64}")  # how a stored file is named: its hash, lower-case hex


def file_path(tenant: str, task_id: str, sha256: str) -> str:
    path = FILES_ROUTE.format(task_id=quote(task_id, safe=""), sha256=sha256)
    return f"/{quote(tenant, safe='')}{path}" if tenant else path
