"""The coordinator's lightkube client, and the one place its errors become ours.

Where the API server is: an explicit kubeconfig file (an operator's node config), the
pod's service account (in-cluster, the default), or a bare server URL (the test kit's
``FakeAPIServer``, or ``kubectl proxy``). Every write carries the driver name as its
field manager, so server-side apply knows which fields are ours.

Errors (httpcore's ``map_exceptions``, done once): a transport failure, a timeout, a 429
or a 5xx is :class:`ApiUnavailable` (retryable: the kubelet retries prepare, the
publisher republishes); any other answer the server refuses with is :class:`ApiRefused`,
carrying the Status's code and reason. Callers that give a status its own meaning
(404 for a claim) look at :attr:`ApiRefused.code` first.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import httpx2
import msgspec
from lightkube import ApiError, Client, ConfigError, KubeConfig
from lightkube.config.models import Cluster, User

from plugins.coordinator import ClaimSourceUnavailable
from plugins.coordinator.kubelet import check_driver_name

__all__ = [
    "DEFAULT_TIMEOUT",
    "ApiRefused",
    "ApiUnavailable",
    "KubeConfigError",
    "api_call",
    "make_client",
]

DEFAULT_TIMEOUT: Final = 10.0
"""Seconds for connect, read and write; a watch's read has none (lightkube's rule)."""

# 429: the server sheds load (API priority and fairness); it asks us to come back.
_RETRYABLE_CODES: Final = frozenset({429, 500, 502, 503, 504})


class ApiUnavailable(ClaimSourceUnavailable):
    """The API server did not answer, or answered that it cannot now; retry later."""


class ApiRefused(Exception):
    """The API server refused a request for good (not retryable as it stands)."""

    def __init__(self, what: str, code: int, reason: str, message: str) -> None:
        super().__init__(f"{what}: the API server refused ({code} {reason}): {message}")
        self.code = code
        self.reason = reason
        self.server_message = message


class KubeConfigError(ValueError):
    """No usable connection settings (a missing kubeconfig, not in a pod, two sources)."""


@contextlib.contextmanager
def api_call(what: str) -> Iterator[None]:
    """Translate lightkube's and httpx2's errors raised inside into ours, naming ``what``
    (``"get ResourceClaim ns/name"``)."""
    try:
        yield
    except ApiError as e:
        code = int(e.status.code or e.response.status_code)
        reason = e.status.reason or ""
        message = e.status.message or ""
        if code in _RETRYABLE_CODES:
            raise ApiUnavailable(f"{what}: API server answered {code} {reason}: {message}") from e
        raise ApiRefused(what, code, reason, message) from e
    except httpx2.HTTPStatusError as e:  # an error answer that is not a Status (a proxy's)
        code = e.response.status_code
        if code in _RETRYABLE_CODES:
            raise ApiUnavailable(f"{what}: API server answered {code}") from e
        raise ApiRefused(what, code, "", e.response.text[:200]) from e
    except httpx2.HTTPError as e:  # transport: refused, reset, timed out, TLS
        raise ApiUnavailable(f"{what}: API server unreachable: {type(e).__name__}: {e}") from e
    except msgspec.MsgspecError as e:  # lightkube could not decode the answer
        raise ApiRefused(what, 0, "BadResponse", f"undecodable answer: {e}") from e


def make_client(
    driver: str,
    *,
    kubeconfig: str | Path | None = None,
    server: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> Client:
    """A lightkube client whose writes are managed by ``driver``.

    ``kubeconfig``: that file's current context; ``server``: that URL, unauthenticated,
    without the environment's proxies (a loopback test server must not be proxied);
    neither: the pod's service account. Both at once is refused.
    """
    check_driver_name(driver)
    if timeout <= 0:
        raise KubeConfigError(f"API timeout must be positive, got {timeout}")
    if kubeconfig is not None and server is not None:
        raise KubeConfigError("give a kubeconfig or a server URL, not both")
    trust_env = server is None
    try:
        if server is not None:
            if not server.startswith(("http://", "https://")):
                raise KubeConfigError(f"API server URL {server!r} is not http:// or https://")
            # KubeConfig.from_server leaves the user out, which lightkube 1.0.1's client
            # then refuses ("Missing user"): the same config with an empty user
            config = KubeConfig.from_one(cluster=Cluster(server=server), user=User())
        elif kubeconfig is not None:
            config = KubeConfig.from_file(os.fspath(kubeconfig))
        else:
            config = _in_cluster()
    except ConfigError as e:
        raise KubeConfigError(f"Kubernetes API configuration: {e}") from e
    return Client(
        config,
        timeout=httpx2.Timeout(timeout),
        field_manager=driver,
        trust_env=trust_env,
    )


def _in_cluster() -> KubeConfig:
    missing = [
        v for v in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT") if v not in os.environ
    ]
    if missing:
        raise KubeConfigError(
            f"not in a pod ({' and '.join(missing)} unset): give a kubeconfig or a server URL"
        )
    return KubeConfig.from_service_account()
