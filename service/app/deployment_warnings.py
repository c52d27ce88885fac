"""What an operator should hear about at startup because of how the service is deployed
(the security warnings are service.auth.settings' `startup_warnings`).

- A card that advertises `localhost`: listening on all interfaces (`0.0.0.0`, `::`) with
  no `public_url` / `grpc_public_address`, the card names `localhost` for the endpoints,
  which only a client on the same host can use.
- Push keys per process: with push notifications on a shared store or bus and no
  `push_secret_keys`, each process seals push credentials with a key generated in its own
  data directory, and no other replica can open them. `--workers N` refuses this at
  startup (service.app.workers: the parent knows there are several processes); a single
  process on a shared store cannot know whether other replicas exist, so it warns.
"""

from __future__ import annotations

from service.app.config import Settings
from service.store import is_shared

ALL_INTERFACES = ("0.0.0.0", "::", "")  # the card says `localhost` for these


def deployment_warnings(s: Settings) -> list[str]:
    """The warnings for `s`, each one line (empty when there is nothing to say)."""
    return [w for w in (_localhost_card(s), _per_process_push_keys(s)) if w]


def _localhost_card(s: Settings) -> str:
    if s.host not in ALL_INTERFACES:
        return ""
    missing = []
    if s.http_port >= 0 and not s.public_url:
        missing.append("public_url (JSON-RPC, HTTP+JSON and file download URLs)")
    if not s.upstream and not s.grpc_public_address:
        missing.append("grpc_public_address (gRPC)")
    if not missing:
        return ""
    return (
        f"THE AGENT CARD ADVERTISES localhost: the service listens on {s.host or 'all interfaces'} "
        f"but {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set, so "
        "clients on other hosts are sent to themselves. Set them to the addresses clients "
        "reach (docs/deployment.md)."
    )


def _per_process_push_keys(s: Settings) -> str:
    if not s.push_notifications or s.push_secret_keys or s.upstream:
        return ""
    if not (is_shared(s.store_url) or s.bus):
        return ""
    return (
        "PUSH SECRET KEYS ARE PER PROCESS: push notifications are on with a shared store or "
        "bus and no push_secret_keys, so this process seals push tokens and credentials with "
        "a key generated in its own data directory (push-secret.key); any other replica "
        "fails to open them and cannot deliver those notifications. Set push_secret_keys to "
        "the same key(s) on every replica (docs/push-notifications.md)."
    )
