"""Transport security: TLS from PEM cert/key files, and optional client certificates (mTLS).

The same three files serve both listeners: gRPC (`grpc.ssl_server_credentials`)
and the HTTP gateway (uvicorn's `ssl_*` options). With a client CA configured,
both require a client certificate signed by it; a client without one fails the
handshake. Files are checked at startup (a bad key or a cert/key mismatch stops
the service with a message naming the setting).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

import grpc


@dataclass(frozen=True, slots=True)
class TlsFiles:
    cert_file: str
    key_file: str
    client_ca_file: str = ""  # set: client certificates are required (mTLS)

    @property
    def mutual(self) -> bool:
        return bool(self.client_ca_file)

    def check(self) -> None:
        """ValueError naming the setting when the files cannot be used."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        for key, path in (
            ("tls_cert_file", self.cert_file),
            ("tls_key_file", self.key_file),
            ("tls_client_ca_file", self.client_ca_file),
        ):
            if path:
                _read(path, key)
        try:
            context.load_cert_chain(self.cert_file, self.key_file)
        except ssl.SSLError as exc:
            raise ValueError(
                "tls_cert_file / tls_key_file: not a PEM certificate chain and its matching "
                f"unencrypted private key ({exc.reason or exc})"
            ) from None
        if self.client_ca_file:
            try:
                context.load_verify_locations(cafile=self.client_ca_file)
            except ssl.SSLError as exc:
                raise ValueError(
                    f"tls_client_ca_file: not PEM CA certificates ({exc.reason or exc})"
                ) from None

    def grpc_credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials(
            [(_read(self.key_file, "tls_key_file"), _read(self.cert_file, "tls_cert_file"))],
            root_certificates=_read(self.client_ca_file, "tls_client_ca_file")
            if self.mutual
            else None,
            require_client_auth=self.mutual,
        )

    def uvicorn_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"ssl_certfile": self.cert_file, "ssl_keyfile": self.key_file}
        if self.mutual:
            options.update(ssl_ca_certs=self.client_ca_file, ssl_cert_reqs=ssl.CERT_REQUIRED)
        return options


def _read(path: str, key: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise ValueError(f"{key}: cannot read {path!r} ({exc.strerror})") from None


def tls_files(cert_file: str, key_file: str, client_ca_file: str) -> TlsFiles | None:
    """The TLS configuration, or None for plaintext; ValueError for an incomplete one."""
    if not cert_file and not key_file:
        if client_ca_file:
            raise ValueError(
                "tls_client_ca_file: client certificates need TLS; set tls_cert_file and tls_key_file too"
            )
        return None
    if not cert_file or not key_file:
        missing = "tls_key_file" if cert_file else "tls_cert_file"
        raise ValueError(f"{missing}: TLS needs both tls_cert_file and tls_key_file")
    return TlsFiles(cert_file, key_file, client_ca_file)
