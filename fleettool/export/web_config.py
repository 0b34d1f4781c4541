"""The agent port's TLS and basic auth, from a file in the format of the Prometheus exporters' `--web.config.file`
(prometheus/exporter-toolkit, docs/web-configuration.md), so one file serves node_exporter and fleettool:

    tls_server_config:
      cert_file: /etc/fleettool/tls/tls.crt      # relative paths are relative to this file's directory
      key_file: /etc/fleettool/tls/tls.key
      client_auth_type: RequireAndVerifyClientCert   # or NoClientCert (default), RequireAnyClientCert,
      client_ca_file: /etc/fleettool/tls/ca.crt      #    VerifyClientCertIfGiven
      min_version: TLS12                              # TLS10..TLS13 (default TLS12); max_version likewise
    basic_auth_users:
      prometheus: $2y$10$...                          # bcrypt hashes (htpasswd -nBC 10 "" | tr -d ':\\n')

What fleettool chose where the toolkit leaves room: the probe paths (/healthz, /readyz) are answered without basic
auth, since a kubelet probe cannot send a password without writing it into the pod spec, and they tell only
whether the loop runs and the store is writable; TLS, when set, covers them too (a kubelet probe with
`scheme: HTTPS` does not verify the certificate). Keys the toolkit has and fleettool does not implement
(cipher_suites, curve_preferences, http2, headers, client_allowed_sans, ...) are refused by name, never ignored:
a security setting that silently does nothing is worse than an error.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from fleettool.export.http import Auth

_CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_OPTIONAL,  # Python verifies a certificate that is given; Go's does not
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAnyClientCert": ssl.CERT_REQUIRED,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
_TLS_KEYS = {"cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version", "max_version"}
_TOOLKIT_ONLY = {
    "tls_server_config": {
        "cert",
        "key",
        "cipher_suites",
        "curve_preferences",
        "prefer_server_cipher_suites",
        "client_allowed_sans",
    },
    "": {"http_server_config", "rate_limit"},
}


class WebConfigError(ValueError):
    """A web config that cannot be used: the message names the file, line and key."""


@dataclass(frozen=True)
class WebConfig:
    tls: ssl.SSLContext | None
    auth: Auth | None


def _where(path: Path, node: yaml.Node) -> str:
    return f"{path}:{node.start_mark.line + 1}"


def _mapping(path: Path, node: yaml.Node, what: str) -> dict[str, tuple[yaml.Node, yaml.Node]]:
    if not isinstance(node, yaml.MappingNode):
        raise WebConfigError(f"{_where(path, node)}: {what} must be a mapping")
    out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
    for k, v in node.value:
        if not isinstance(k, yaml.ScalarNode):
            raise WebConfigError(f"{_where(path, k)}: {what}: keys must be names")
        out[str(k.value)] = (k, v)
    return out


def _scalar(path: Path, key: str, node: yaml.Node) -> str:
    if not isinstance(node, yaml.ScalarNode) or node.value == "":
        raise WebConfigError(f"{_where(path, node)}: {key} must be a non-empty string")
    return str(node.value)


def _refuse_unknown(
    path: Path, items: Mapping[str, tuple[yaml.Node, yaml.Node]], known: set[str], sect: str
) -> None:
    for name, (k, _v) in items.items():
        if name in known:
            continue
        where = f"{sect}." if sect else ""
        if name in _TOOLKIT_ONLY.get(sect, set()):
            raise WebConfigError(
                f"{_where(path, k)}: {where}{name} is an exporter-toolkit setting fleettool does not implement"
            )
        raise WebConfigError(f"{_where(path, k)}: unknown key {where}{name}")


def _file(base: Path, path: Path, key: str, node: yaml.Node) -> Path:
    p = Path(_scalar(path, key, node))
    p = p if p.is_absolute() else base / p
    if not p.is_file():
        raise WebConfigError(f"{_where(path, node)}: {key}: {p}: no such file")
    return p


def _tls(path: Path, node: yaml.Node) -> ssl.SSLContext:
    items = _mapping(path, node, "tls_server_config")
    _refuse_unknown(path, items, _TLS_KEYS, "tls_server_config")
    base = path.parent
    for need in ("cert_file", "key_file"):
        if need not in items:
            raise WebConfigError(f"{_where(path, node)}: tls_server_config needs {need}")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    cert = _file(base, path, "cert_file", items["cert_file"][1])
    key = _file(base, path, "key_file", items["key_file"][1])
    for what, p, marker, node in (
        ("cert_file", cert, b"-----BEGIN CERTIFICATE", items["cert_file"][1]),
        ("key_file", key, b"PRIVATE KEY-----", items["key_file"][1]),
    ):
        try:
            head = p.read_bytes()[:65536]
        except OSError as e:
            raise WebConfigError(f"{_where(path, node)}: {what}: {p}: {e.strerror or e}") from None
        if marker not in head:
            want = "a PEM certificate" if what == "cert_file" else "a PEM private key"
            raise WebConfigError(f"{_where(path, node)}: {what}: {p} is not {want} (swapped with the other?)")
    try:
        ctx.load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as e:
        why = "the key does not match the certificate" if "KEY_VALUES_MISMATCH" in str(e) else str(e)
        raise WebConfigError(f"{_where(path, items['cert_file'][1])}: {cert} and {key}: {why}") from None
    for bound in ("min_version", "max_version"):
        if bound in items:
            v = _scalar(path, bound, items[bound][1])
            if v not in _VERSIONS:
                raise WebConfigError(
                    f"{_where(path, items[bound][1])}: {bound} {v!r}: one of {', '.join(_VERSIONS)}"
                )
            setattr(ctx, bound, _VERSIONS[v])
    if "min_version" not in items:
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2  # the toolkit's default
    mode = "NoClientCert"
    if "client_auth_type" in items:
        mode = _scalar(path, "client_auth_type", items["client_auth_type"][1])
        if mode not in _CLIENT_AUTH:
            raise WebConfigError(
                f"{_where(path, items['client_auth_type'][1])}: client_auth_type {mode!r}: one of "
                + ", ".join(_CLIENT_AUTH)
            )
    ctx.verify_mode = _CLIENT_AUTH[mode]
    if mode != "NoClientCert":
        if "client_ca_file" not in items:
            raise WebConfigError(f"{_where(path, node)}: client_auth_type {mode} needs client_ca_file")
        ctx.load_verify_locations(_file(base, path, "client_ca_file", items["client_ca_file"][1]))
    return ctx


def _users(path: Path, node: yaml.Node) -> dict[str, bytes]:
    users: dict[str, bytes] = {}
    for name, (_k, v) in _mapping(path, node, "basic_auth_users").items():
        hashed = _scalar(path, f"basic_auth_users.{name}", v)
        if not hashed.startswith(("$2a$", "$2b$", "$2y$")):
            raise WebConfigError(
                f"{_where(path, v)}: basic_auth_users.{name} must be a bcrypt hash ($2y$...), never a password"
            )
        users[name] = hashed.encode()
    return users


def load(path: Path, open_paths: frozenset[str]) -> WebConfig:
    """Read and check a web config; a WebConfigError names the file, line and key of what is wrong."""
    try:
        text = path.read_text()
    except OSError as e:
        raise WebConfigError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise WebConfigError(f"{path}{line}: not YAML: {getattr(e, 'problem', None) or e}") from None
    if root is None:
        return WebConfig(None, None)  # an empty file: plain HTTP, no auth, as the toolkit reads it
    items = _mapping(path, root, "the web config")
    _refuse_unknown(path, items, {"tls_server_config", "basic_auth_users"}, "")
    tls = _tls(path, items["tls_server_config"][1]) if "tls_server_config" in items else None
    users = _users(path, items["basic_auth_users"][1]) if "basic_auth_users" in items else {}
    return WebConfig(tls, Auth(users, open_paths) if users else None)


def check_password(password: bytes, hashed: bytes) -> bool:
    import bcrypt

    try:
        return bool(bcrypt.checkpw(password, hashed.replace(b"$2y$", b"$2b$", 1)))
    except ValueError:  # a malformed hash: nobody gets in with it
        return False
