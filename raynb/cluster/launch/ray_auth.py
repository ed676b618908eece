"""Ray's token authentication, on the launcher's side of ``raynb start --ray`` and
``raynb stop``.

A Ray cluster started with ``RAY_AUTH_MODE=token`` (or by ``ray start --head`` where a
token already exists) refuses every RPC that does not carry its token. Ray's own
driver enables token mode by itself only for ``address="auto"``; for an explicit
``HOST:PORT`` it connects without the token, and after about 20 s of retries reports a
``ConnectionError``. raynb does what ``ray start`` does (``scripts.py`` calls
``maybe_enable_token_auth_if_token_available``): where ``RAY_AUTH_MODE`` is unset and a
token is available (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``),
this process switches to token mode before connecting. A token-mode client also
connects to a cluster without authentication, so this never locks anyone out.

Where the token is missing or wrong, the error keeps Ray's cause (``InvalidAuthToken``,
"no authentication token was found") and says where the token goes.

Imported only by ``ray_engine`` after its version check: everything here reads Ray's
private modules of the supported version (``ray._raylet``, ``ray._private.authentication``).
"""
from __future__ import annotations

import os

from ...errors import ClusterError

AUTH_MODE_ENV = "RAY_AUTH_MODE"
TOKEN_ENV = "RAY_AUTH_TOKEN"
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"
DOCS = "https://docs.ray.io/en/latest/ray-security/token-auth.html"


def token_source() -> str | None:
    """Where Ray would read this process's token from (in Ray's order), or None when no
    token is available: ``"RAY_AUTH_TOKEN"``, ``"RAY_AUTH_TOKEN_PATH (path)"`` or the
    default file's path."""
    if os.environ.get(TOKEN_ENV, "").strip():
        return f"the {TOKEN_ENV} environment variable"
    path = os.environ.get(TOKEN_PATH_ENV)
    if path:
        return f"{TOKEN_PATH_ENV} ({path})" if _non_empty(path) else None
    default = os.path.join(os.path.expanduser("~"), ".ray", "auth_token")
    return default if _non_empty(default) else None


def _non_empty(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return bool(f.read(4096).strip())
    except OSError:
        return False


def enable_token_if_available() -> bool:
    """Token mode for this process (and the processes it starts) when ``RAY_AUTH_MODE`` is
    unset and a token is available, as ``ray start`` does; an explicit ``RAY_AUTH_MODE``
    is left as it is. Returns True when this process is in token mode afterwards.

    The mode stays set: a connected driver's RPCs all need it, and Ray's own ``auto``
    path leaves it set the same way."""
    mode = os.environ.get(AUTH_MODE_ENV)
    if mode is not None:
        return mode.strip().lower() == "token"
    try:
        from ray._raylet import AuthenticationTokenLoader, Config
    except ImportError:   # a Ray without token authentication: nothing to pass
        return False
    if not AuthenticationTokenLoader.instance().has_token(ignore_auth_mode=True):
        return False
    os.environ[AUTH_MODE_ENV] = "token"
    Config.initialize("")   # Ray caches its config: re-read it, as Ray's own switch does
    return True


def auth_error(exc: BaseException) -> BaseException | None:
    """Ray's ``AuthenticationError`` in ``exc`` or its causes (``ray.init`` wraps it in a
    ``ConnectionError``), or None."""
    try:
        from ray.exceptions import AuthenticationError
    except ImportError:
        return None
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, AuthenticationError) or "InvalidAuthToken" in str(getattr(exc, "message", "")):
            return exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def refused(address: str, exc: BaseException) -> ClusterError:
    """The error for Ray's refusal ``exc`` (an ``AuthenticationError``) at ``address``:
    Ray's own cause first, then where the token goes."""
    cause = (getattr(exc, "message", None) or str(exc)).strip().rstrip(".")
    source = token_source()
    mode = os.environ.get(AUTH_MODE_ENV)
    if source is None:
        given = "this machine has no Ray token"
    else:
        given = f"the token raynb passed (from {source}) is not this cluster's"
    if mode is not None and mode.strip().lower() != "token":
        given += f", and {AUTH_MODE_ENV}={mode} here turns token mode off (unset it or set it to token)"
    return ClusterError(
        f"the Ray cluster at {address} refused the connection: {type(exc).__name__}: {cause}. "
        f"It has Ray's token authentication on, and {given}. Fix: copy the cluster's token "
        "(`ray get-auth-token` on the Ray head node prints it) into ~/.ray/auth_token on this "
        f"machine, or set {TOKEN_ENV}=<token> or {TOKEN_PATH_ENV}=<file>; raynb then passes it "
        f"as Ray's CLI does. See {DOCS}")


def probe(address: str) -> None:
    """One call to the GCS at ``address`` (HOST:PORT) with this process's token: a refused
    token fails here in a second or two, where ``ray.init`` retries for about 20 s before
    it says only "Failed to connect".

    Raises:
        ClusterError: Ray refused the token (``refused``). Anything else is left to
            ``ray.init``, whose errors say more."""
    try:
        from ray._private.authentication.authentication_token_setup import ensure_token_if_auth_enabled
        from ray._raylet import GcsClient
    except ImportError:
        return
    try:
        # Token mode without a token: Ray's own AuthenticationError here, as ray.init raises
        # it (a GcsClient made in that state aborts the process on a failed CHECK).
        ensure_token_if_auth_enabled(None, create_token_if_missing=False)
        GcsClient(address=address)   # it asks the GCS for the cluster's id: refused without the token
    except Exception as e:  # noqa: BLE001 - only a refusal is ours to report
        err = auth_error(e)
        if err is not None:
            raise refused(address, err) from None


__all__ = ["enable_token_if_available", "probe", "auth_error", "refused", "token_source"]
