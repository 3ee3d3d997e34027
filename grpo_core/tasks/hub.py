"""Whether the Hugging Face hub can be reached, asked once and at once: a hub id on a machine
without network failed only after the libraries' retries (~30 s and a page of warnings)."""

from __future__ import annotations

import os
import socket
from functools import lru_cache
from typing import Optional
from urllib.parse import urlsplit

from grpo_core.util.errors import ConfigError

_OFFLINE_SWITCHES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
_PROXIES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")


@lru_cache(maxsize=None)
def _unreachable(host: str, port: int) -> Optional[str]:
    try:
        socket.create_connection((host, port), timeout=3).close()
        return None
    except OSError as exc:
        return exc.strerror or str(exc) or type(exc).__name__


def check_hub_reachable(key: str, name: str) -> None:
    """A ConfigError for `key` when `name` (a hub id) would be fetched from a hub that cannot be
    reached. Nothing is asked where the user switched the libraries to their offline cache
    (HF_HUB_OFFLINE=1 and kin) or where a proxy carries the traffic."""
    if any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on") for v in _OFFLINE_SWITCHES):
        return
    if any(os.environ.get(v) for v in _PROXIES):
        return
    url = urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    reason = _unreachable(host, port)
    if reason is not None:
        raise ConfigError(
            key,
            f"{name!r} is a hub id, and the hub ({host}:{port}) cannot be reached from here "
            f"({reason}); allowed: a local path, a hub id where the hub is reachable, or "
            f"HF_HUB_OFFLINE=1 to read what the hub's local cache holds",
        )
