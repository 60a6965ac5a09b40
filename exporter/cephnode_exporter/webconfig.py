"""The ``--web.config.file`` file: TLS, basic auth and extra response headers.

The format is the one every Prometheus exporter built on the Go exporter-toolkit reads, so a
node that already has a web config for node_exporter can point this exporter at the same
file. Two deliberate differences from the toolkit:

* The file is read once, at startup, and every certificate, key and CA file it names is
  loaded then. A typo or an unreadable key fails the start (and ``systemctl start``), instead
  of failing each scrape later. Restart the exporter to pick up renewed certificates.
* Toolkit settings that cannot be honoured with Python's ``ssl`` module are refused with a
  "not supported" error rather than silently ignored, so nobody believes a setting is in
  force when it is not. docs/web-config.md lists them.
"""

from __future__ import annotations

import ipaddress
import os
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from cephnode_exporter import safeio

__all__ = [
    "CLIENT_AUTH_TYPES",
    "MAX_BCRYPT_COST",
    "TLS_VERSIONS",
    "WebConfig",
    "WebConfigError",
    "load_web_config",
]


class WebConfigError(ValueError):
    """The web config file is unreadable or invalid; the message names the file and the key."""


# Toolkit client_auth_type -> (verify mode, whether a client CA is required).
# Python's ssl cannot ask for a client certificate without verifying it, nor require one
# without verifying it, so the two "unverified" Go modes map as follows:
#  * RequestClientCert: nothing here ever looks at an unverified certificate, so not asking
#    for one (CERT_NONE) behaves the same for the client.
#  * RequireAnyClientCert (and its old name RequireClientCert): fail-safe, i.e. stricter than
#    Go: the certificate must also chain to the client CA (CERT_REQUIRED).
CLIENT_AUTH_TYPES: dict[str, tuple[ssl.VerifyMode, bool]] = {
    "NoClientCert": (ssl.CERT_NONE, False),
    "RequestClientCert": (ssl.CERT_NONE, False),
    "RequireAnyClientCert": (ssl.CERT_REQUIRED, True),
    "RequireClientCert": (ssl.CERT_REQUIRED, True),
    "VerifyClientCertIfGiven": (ssl.CERT_OPTIONAL, True),
    "RequireAndVerifyClientCert": (ssl.CERT_REQUIRED, True),
}

# client_allowed_sans only makes sense when a certificate is always presented (as in the toolkit).
_SAN_AUTH_TYPES = ("RequireAnyClientCert", "RequireClientCert", "RequireAndVerifyClientCert")

TLS_VERSIONS: dict[str, ssl.TLSVersion] = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}

# The toolkit allows exactly these response headers (everything else, e.g. Authorization or
# Content-Type, is refused), some with a fixed set of values. Keys are lower-cased names.
_HEADERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "strict-transport-security": ("Strict-Transport-Security", ()),
    "x-content-type-options": ("X-Content-Type-Options", ("nosniff",)),
    "x-frame-options": ("X-Frame-Options", ("deny", "sameorigin")),
    "x-xss-protection": ("X-XSS-Protection", ()),
    "content-security-policy": ("Content-Security-Policy", ()),
}

# $2a$, $2b$, $2x$, $2y$ with a two-digit cost and 53 characters of salt and hash.
_BCRYPT_RE = re.compile(r"^\$2[abxy]\$(\d\d)\$[./A-Za-z0-9]{53}$")
# The highest bcrypt cost accepted. Each step doubles the work: with the bcrypt module on
# the development machines a check took 0.05 s at cost 10 and 0.9 s at 14, so about 4 s
# at 16 and a day and a half at 31. Verified passwords are cached, but every wrong
# password anyone sends pays the full cost again, so a cost that takes seconds turns a
# few requests into a CPU denial of service on a storage node, and a scraper whose
# credentials are not yet cached waits that long.
MAX_BCRYPT_COST = 14
_COST_1S = 14  # the cost that takes about one second (above)

_TOP_KEYS = ("tls_server_config", "http_server_config", "basic_auth_users")
_TOP_UNSUPPORTED = {
    "rate_limit": "rate limiting is not supported; the exporter bounds concurrent connections",
}
_TLS_KEYS = (
    "cert_file",
    "key_file",
    "client_auth_type",
    "client_ca_file",
    "client_ca",
    "min_version",
    "max_version",
    "prefer_server_cipher_suites",
    "client_allowed_sans",
)
_TLS_UNSUPPORTED = {
    "cert": "inline certificates are not supported; put it in a file and use cert_file",
    "key": "inline keys are not supported; put it in a file and use key_file",
    # Go cipher suite and curve names have no reliable OpenSSL equivalents; an empty list
    # (the toolkit's default) is accepted, anything else is refused.
    "cipher_suites": "choosing cipher suites is not supported; OpenSSL's defaults apply",
    "curve_preferences": "choosing curves is not supported; OpenSSL's defaults apply",
}
_TLS_EMPTY_OK = ("cipher_suites", "curve_preferences")
_HTTP_KEYS = ("headers", "http2")


@dataclass(frozen=True)
class WebConfig:
    """What the HTTP server needs from the web config file, validated and loaded.

    ``ssl_context`` is None when TLS is off. ``basic_auth_users`` maps user names to bcrypt
    hashes; empty means no authentication. ``headers`` are added to every response.
    ``client_allowed_sans`` (normalised) is empty unless client certificates must carry one
    of these subject alternative names.
    """

    ssl_context: ssl.SSLContext | None = None
    basic_auth_users: dict[str, bytes] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    client_allowed_sans: frozenset[str] = frozenset()
    client_auth_type: str = "NoClientCert"
    path: str | None = None

    @property
    def tls_enabled(self) -> bool:
        return self.ssl_context is not None

    @property
    def basic_auth_enabled(self) -> bool:
        return bool(self.basic_auth_users)

    def client_san_allowed(self, peercert: Mapping[str, Any] | None) -> bool:
        """Whether a verified client certificate (``SSLSocket.getpeercert()``) passes the SAN list.

        Like the toolkit: DNS names, e-mail addresses, IP addresses and URIs are compared
        exactly; IP addresses are normalised first because OpenSSL prints IPv6 long-hand.
        """
        if not self.client_allowed_sans:
            return True
        if not peercert:
            return False
        for kind, value in peercert.get("subjectAltName", ()):
            if kind == "IP Address":
                value = _normalise_san(value.strip())
            if value in self.client_allowed_sans:
                return True
        return False


def load_web_config(path: str) -> WebConfig:
    """Read, validate and load ``path``; raise WebConfigError naming the file and the key.

    An empty file (or one with only comments) means no TLS and no authentication.
    """
    data = _read_yaml(path)
    if data is None:
        return WebConfig(path=path)
    if not isinstance(data, dict):
        raise _error(path, "(top level)", "must be a mapping of settings")
    _check_keys(path, "", data, _TOP_KEYS, _TOP_UNSUPPORTED)
    base_dir = os.path.dirname(os.path.abspath(path))

    ssl_context = None
    sans: frozenset[str] = frozenset()
    auth_type = "NoClientCert"
    if "tls_server_config" in data:
        section = _section(path, "tls_server_config", data["tls_server_config"])
        ssl_context, sans, auth_type = _load_tls(path, base_dir, section)

    headers: dict[str, str] = {}
    if data.get("http_server_config") is not None:
        section = _section(path, "http_server_config", data["http_server_config"])
        headers = _load_http(path, section)

    users = _load_users(path, data.get("basic_auth_users"))
    return WebConfig(
        ssl_context=ssl_context,
        basic_auth_users=users,
        headers=headers,
        client_allowed_sans=sans,
        client_auth_type=auth_type,
        path=path,
    )


def _error(path: str, key: str, message: str) -> WebConfigError:
    return WebConfigError(f"web config {path}: {key}: {message}")


class _StrictLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML: no stubs
    """SafeLoader that refuses duplicate keys: the Go decoder does, PyYAML keeps the last one."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found duplicate key {key!r}",
                key_node.start_mark,
            )
        seen.add(key)
    mapping: dict[Any, Any] = loader.construct_mapping(node)
    return mapping


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _read_yaml(path: str) -> Any:
    """The web config's YAML. A regular file of at most 1 MiB, nested at most 32 levels
    (safeio): a FIFO would hang start-up, /dev/zero would fill memory, and a deep
    document would end in a RecursionError instead of one line."""
    try:
        text = safeio.read_config_text(path, "web config")
    except safeio.ConfigFileError as e:
        detail = str(e).removeprefix(f"web config {path}: ")
        raise WebConfigError(f"web config {path}: cannot read: {detail}") from None
    try:
        safeio.check_yaml_depth(text, f"web config {path}")
    except safeio.ConfigFileError as e:
        raise WebConfigError(str(e).replace(": not valid YAML:", ": invalid YAML:", 1)) from None
    try:
        return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
    except yaml.YAMLError as e:
        detail = " ".join(str(e).split())
        raise WebConfigError(f"web config {path}: invalid YAML: {detail}") from e


def _check_keys(
    path: str,
    prefix: str,
    section: dict[Any, Any],
    known: tuple[str, ...],
    unsupported: dict[str, str],
) -> None:
    for key in section:
        name = f"{prefix}{key}"
        if key in unsupported:
            raise _error(path, name, f"not supported by cephnode-exporter: {unsupported[key]}")
        if key not in known:
            raise _error(path, name, f"unknown key (known: {', '.join(known)})")


def _section(path: str, key: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _error(path, key, "must be a mapping")
    return value


def _string(path: str, key: str, value: Any) -> str:
    """A string setting; None (key present but empty) reads as ''."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _error(path, key, f"must be a string, not {type(value).__name__}")
    return value


def _string_list(path: str, key: str, value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise _error(path, key, "must be a list of non-empty strings")
    return value


def _read_file(path: str, key: str, filename: str) -> str:
    """A certificate, key or CA file: a regular file of at most 1 MiB, as the config."""
    try:
        return safeio.read_config_text(filename, "file")
    except safeio.ConfigFileError as e:
        detail = str(e).removeprefix(f"file {filename}: ")
        raise _error(path, key, f"cannot read {filename}: {detail}") from None


def _no_password() -> bytes:
    # Without a callback OpenSSL would prompt on the terminal for an encrypted key.
    raise WebConfigError("encrypted private keys are not supported")


def _load_tls(
    path: str, base_dir: str, tls: dict[str, Any]
) -> tuple[ssl.SSLContext, frozenset[str], str]:
    """Build the server SSLContext now, so bad files or settings stop the exporter at startup."""
    p = "tls_server_config."
    for key in _TLS_EMPTY_OK:
        if key in tls and tls[key] in (None, []):
            tls = {k: v for k, v in tls.items() if k != key}
    _check_keys(path, p, tls, _TLS_KEYS, _TLS_UNSUPPORTED)

    cert_file = _string(path, p + "cert_file", tls.get("cert_file"))
    key_file = _string(path, p + "key_file", tls.get("key_file"))
    for key, value in (("cert_file", cert_file), ("key_file", key_file)):
        if not value:
            raise _error(path, p + key, "required when tls_server_config is present")
    cert_file = os.path.join(base_dir, cert_file)
    key_file = os.path.join(base_dir, key_file)

    auth_type = _string(path, p + "client_auth_type", tls.get("client_auth_type")) or "NoClientCert"
    if auth_type not in CLIENT_AUTH_TYPES:
        raise _error(
            path,
            p + "client_auth_type",
            f"invalid value {auth_type!r} (valid: {', '.join(CLIENT_AUTH_TYPES)})",
        )
    verify_mode, needs_ca = CLIENT_AUTH_TYPES[auth_type]

    versions = {}
    for key, default in (("min_version", "TLS12"), ("max_version", "TLS13")):
        name = _string(path, p + key, tls.get(key)) or default
        if name not in TLS_VERSIONS:
            raise _error(
                path, p + key, f"invalid value {name!r} (valid: {', '.join(TLS_VERSIONS)})"
            )
        versions[key] = TLS_VERSIONS[name]
    if versions["min_version"] > versions["max_version"]:
        raise _error(path, p + "min_version", "is higher than max_version")

    prefer_server = tls.get("prefer_server_cipher_suites", True)
    if not isinstance(prefer_server, bool):
        raise _error(path, p + "prefer_server_cipher_suites", "must be true or false")

    ca_file = _string(path, p + "client_ca_file", tls.get("client_ca_file"))
    ca_text = _string(path, p + "client_ca", tls.get("client_ca"))
    if ca_file and ca_text:
        raise _error(path, p + "client_ca", "set only one of client_ca_file and client_ca")
    if needs_ca and not (ca_file or ca_text):
        raise _error(path, p + "client_ca_file", f"required when client_auth_type is {auth_type}")
    if (ca_file or ca_text) and auth_type == "NoClientCert":
        # Same refusal as the toolkit: a CA with no client auth is almost certainly a mistake.
        raise _error(
            path,
            p + "client_auth_type",
            "a client CA is configured but client_auth_type is NoClientCert",
        )

    sans: frozenset[str] = frozenset()
    if "client_allowed_sans" in tls:
        san_list = _string_list(path, p + "client_allowed_sans", tls["client_allowed_sans"])
        if not san_list:
            raise _error(path, p + "client_allowed_sans", "must list at least one name")
        if auth_type not in _SAN_AUTH_TYPES:
            raise _error(
                path,
                p + "client_allowed_sans",
                "requires client_auth_type RequireAnyClientCert or RequireAndVerifyClientCert",
            )
        sans = frozenset(_normalise_san(s) for s in san_list)

    # Settings are consistent; now build the context and load the files.
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = versions["min_version"]
    ctx.maximum_version = versions["max_version"]
    if prefer_server:
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        ctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    # Only HTTP/1.1 is served; say so in ALPN so clients do not attempt h2.
    ctx.set_alpn_protocols(["http/1.1"])

    # Read each file first so a missing or non-PEM file is reported under its own key.
    if "-----BEGIN CERTIFICATE-----" not in _read_file(path, p + "cert_file", cert_file):
        raise _error(path, p + "cert_file", f"{cert_file} holds no PEM certificate")
    key_text = _read_file(path, p + "key_file", key_file)
    if "PRIVATE KEY-----" not in key_text:
        raise _error(path, p + "key_file", f"{key_file} holds no PEM private key")
    if "ENCRYPTED" in key_text:
        raise _error(path, p + "key_file", f"{key_file}: encrypted private keys are not supported")
    try:
        ctx.load_cert_chain(cert_file, key_file, password=_no_password)
    except (ssl.SSLError, WebConfigError) as e:
        reason = getattr(e, "reason", None) or str(e)
        raise _error(
            path,
            p + "cert_file/key_file",
            f"cannot load {cert_file} with {key_file} ({reason}); "
            "does the key belong to this certificate?",
        ) from e
    except OSError as e:
        raise _error(path, p + "cert_file/key_file", f"cannot load: {e.strerror or e}") from e

    if ca_file:
        ca_key, ca_file = p + "client_ca_file", os.path.join(base_dir, ca_file)
        ca_text = _read_file(path, ca_key, ca_file)
    else:
        ca_key = p + "client_ca"
    if ca_text:
        try:
            ctx.load_verify_locations(cadata=ca_text)
        except (ssl.SSLError, ValueError) as e:
            raise _error(path, ca_key, f"holds no usable PEM CA certificate ({e})") from e
    ctx.verify_mode = verify_mode
    return ctx, sans, auth_type


def _normalise_san(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return value


def _load_http(path: str, http: dict[str, Any]) -> dict[str, str]:
    p = "http_server_config."
    _check_keys(path, p, http, _HTTP_KEYS, {})
    # http2 is accepted for compatibility and ignored: the server speaks HTTP/1.1 only.
    if not isinstance(http.get("http2", True), bool):
        raise _error(path, p + "http2", "must be true or false")
    headers: dict[str, str] = {}
    for name, value in _section(path, p + "headers", http.get("headers")).items():
        key = f"{p}headers.{name}"
        allowed = _HEADERS.get(str(name).lower())
        if allowed is None:
            names = ", ".join(h for h, _ in _HEADERS.values())
            raise _error(path, key, f"this header can not be configured (allowed: {names})")
        canonical, values = allowed
        value = _string(path, key, value)
        if not value:
            continue  # blank means unset, as in the toolkit
        if any(c in value for c in "\r\n\0"):
            raise _error(path, key, "must not contain line breaks")
        # A field value is visible ASCII, spaces and tabs (RFC 9110 section 5.5); http.server
        # encodes headers as Latin-1 and would fail every response on a curly quote.
        if not all(c == "\t" or " " <= c <= "~" for c in value):
            raise _error(path, key, "must be printable ASCII (RFC 9110 field value)")
        if values and value.lower() not in values:
            raise _error(path, key, f"invalid value {value!r} (valid: {', '.join(values)})")
        headers[canonical] = value
    return headers


def _load_users(path: str, users: Any) -> dict[str, bytes]:
    if users is None:
        return {}
    if not isinstance(users, dict):
        raise _error(path, "basic_auth_users", "must be a mapping of user name to bcrypt hash")
    out: dict[str, bytes] = {}
    for user, hashed in users.items():
        key = f"basic_auth_users.{user}"
        if not isinstance(user, str) or not user:
            raise _error(path, key, "user names must be non-empty strings (quote them)")
        if ":" in user:
            raise _error(path, key, "user names can not contain ':' in basic auth")
        if not isinstance(hashed, str):
            raise _error(path, key, "must be a bcrypt hash string")
        match = _BCRYPT_RE.match(hashed)
        if match is None or not 4 <= int(match.group(1)) <= 31:
            raise _error(path, key, "is not a bcrypt hash (see docs/web-config.md)")
        cost = int(match.group(1))
        if cost > MAX_BCRYPT_COST:
            raise _error(
                path,
                key,
                f"bcrypt cost {cost} is too high (at most {MAX_BCRYPT_COST}): one check would "
                f"take about {_duration(2.0 ** (cost - _COST_1S))} of CPU, paid again for every "
                "wrong password sent; hash the password again with cost 10 to 12 "
                "(see docs/web-config.md)",
            )
        out[user] = hashed.encode("ascii")
    return out


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.0f} h"
