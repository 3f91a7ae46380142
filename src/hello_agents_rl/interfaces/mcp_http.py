"""Who may reach `mcp --http`: loopback only, unless the owner asks for remote access and gives a bearer token.

On 127.0.0.1/localhost/::1 the SDK's own Host/Origin checks apply (DNS rebinding). Any other host needs
`--allow-remote` and a token (from the environment variable TOKEN_ENV or `--token-file`, never a
command-line value, which `ps` shows to every user); every request must then carry `Authorization: Bearer
<token>` (compared in constant time, through the SDK's TokenVerifier hook), and the Host/Origin checks stay on,
allowing the bound host and the names given with `--allowed-host`.
"""

from __future__ import annotations

import hmac
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import TransportSecuritySettings

from hello_agents_rl.errors import ConfigError

TOKEN_ENV = "HELLO_AGENTS_RL_MCP_TOKEN"
MIN_TOKEN_CHARS = 32
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
_WILDCARD_HOSTS = ("0.0.0.0", "::", "")
_MAKE_TOKEN = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"


class StaticToken:
    """The SDK's TokenVerifier for one shared secret."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()

    async def verify_token(self, token: str) -> AccessToken | None:
        if hmac.compare_digest(token.encode(), self._token):
            return AccessToken(token="", client_id="owner", scopes=[])
        return None


@dataclass
class HttpAccess:
    """What streamable_http_app needs: the Host/Origin rules and, in remote mode, the token check."""

    host: str
    token: str | None = None
    allowed_hosts: list[str] = field(default_factory=list)

    def app_options(self) -> dict:
        if self.token is None:
            return {"host": self.host}  # loopback: the SDK turns its own localhost Host/Origin checks on
        hosts = [*self.allowed_hosts, *([] if self.host in _WILDCARD_HOSTS else [self.host])]
        patterns = [_host_pattern(name) for name in hosts]
        return {
            "host": self.host,
            "transport_security": TransportSecuritySettings(
                enable_dns_rebinding_protection=True, allowed_hosts=patterns,
                allowed_origins=[f"{scheme}://{pattern}" for pattern in patterns for scheme in ("http", "https")]),
            # no resource or authorization server: the token is checked, nothing is advertised
            "auth": AuthSettings(issuer_url="http://localhost", resource_server_url=None),
            "token_verifier": StaticToken(self.token),
        }


def http_access(host: str, allow_remote: bool = False, token_file: str | None = None,
                allowed_hosts: list[str] | None = None) -> HttpAccess:
    """The access rules for `mcp --http --host HOST`; ConfigError naming the flag when remote access is unsafe."""
    allowed_hosts = list(allowed_hosts or [])
    if not allow_remote:
        if host not in LOOPBACK_HOSTS:
            raise ConfigError(f"`--host`: {host} is not a loopback address, so anyone who can reach it could train, "
                              f"read and write under --root; add --allow-remote with a bearer token in ${TOKEN_ENV} "
                              "or --token-file, or serve on 127.0.0.1")
        if allowed_hosts or token_file:
            raise ConfigError("`--allowed-host`/`--token-file`: only with --allow-remote")
        return HttpAccess(host)
    if host in _WILDCARD_HOSTS and not allowed_hosts:
        raise ConfigError(f"`--allowed-host`: {host or 'every interface'} is not a name clients send as Host; give "
                          "the name or address they use (e.g. --allowed-host gpu-box.lan), repeatable")
    return HttpAccess(host, _read_token(token_file), allowed_hosts)


def _read_token(token_file: str | None) -> str:
    if token_file is not None:
        path = Path(token_file).expanduser()
        try:
            mode = path.stat().st_mode
            token = path.read_text().strip()
        except OSError as error:
            raise ConfigError(f"`--token-file`: cannot read {token_file} ({error.strerror})") from None
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigError(f"`--token-file`: {token_file} is readable by other users; chmod 600 {token_file}")
        where = f"--token-file {token_file}"
    else:
        token, where = os.environ.get(TOKEN_ENV, "").strip(), f"${TOKEN_ENV}"
    if not token:
        raise ConfigError(f"`--allow-remote`: needs a bearer token in ${TOKEN_ENV} or a --token-file; make one with "
                          f"{_MAKE_TOKEN}")
    if len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(f"`--allow-remote`: the token in {where} has {len(token)} characters; use at least "
                          f"{MIN_TOKEN_CHARS}, e.g. from {_MAKE_TOKEN}")
    return token


def _host_pattern(name: str) -> str:
    """A Host header pattern: `name:*` (any port) unless the name already gives one; IPv6 in brackets."""
    if name.startswith("[") or name.count(":") == 1:
        return name if not name.endswith("]") else f"{name}:*"
    return f"[{name}]:*" if ":" in name else f"{name}:*"
