"""Authentication, per-caller identity and transport security.

- `schemes.Authenticator`: bearer tokens, HTTP Basic, API keys and JWTs -> a principal;
  what the agent card advertises (`securitySchemes`, `securityRequirements`).
- `credentials`: `NAME=SECRET` entries from env, config file or `*_file`; constant-time lookup.
- `jwt_bearer`: JWKS (file, URL or OpenID Connect discovery), cached, `kid` selection.
- `tls`: TLS and mTLS for the gRPC and HTTP listeners.
- `settings`: from the `auth_*` / `tls_*` settings to the above, and startup warnings.

The gRPC servicer and the HTTP gateway both call the one `Authenticator`, so every
binding accepts exactly the same credentials and names the caller alike.
"""

from service.auth.schemes import Authenticator
from service.auth.tls import TlsFiles

__all__ = ["Authenticator", "TlsFiles"]
