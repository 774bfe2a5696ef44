"""Arguments made into the things grants name, once, where the arguments are parsed. [core]

A grant compares targets, never spellings: a path is its workspace-relative components (what
brokerd opens), a host is lower case without a trailing dot, a name in its IDNA (xn--) form, an
address in its one plain form whatever the URL wrote (decimal, hex, octal, short `127.1`, an
IPv6 form that carries an IPv4 address: v4-mapped, v4-compatible, 6to4, NAT64, Teredo). The
grants parser normalises the hosts it reads with the same function, so a rule and a call meet
on the same text.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from boxmaker.brokerd.netcheck import embedded_v4

MAX_PATH_BYTES = 4095  # Linux's PATH_MAX less the NUL
MAX_NAME_BYTES = 255  # NAME_MAX
MAX_HOST_BYTES = 253
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-.")


class BadTarget(Exception):
    """An argument that names nothing a grant could name; the message says why."""


def split_path(path: str, workspace: str) -> tuple[str, ...]:
    """A path argument as components relative to the workspace, checked lexically.

    An absolute path is accepted only when it lies under `workspace`. `.` and empty components
    are dropped; `..` is refused (the kernel refuses it too, beneath the workspace: this is the
    clear message). Control characters (a newline in a name) are refused so that no name can
    forge a line in a summary or a log.

    Raises:
        BadTarget: with the reason.
    """
    if "\0" in path:
        raise BadTarget("the path holds a NUL byte")
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in path):
        raise BadTarget(
            "the path holds a control character (a newline?); names like that are refused"
        )
    size = len(path.encode("utf-8", "surrogatepass"))
    if size > MAX_PATH_BYTES:
        raise BadTarget(f"the path is {size} bytes; at most {MAX_PATH_BYTES}")
    if path.startswith("/"):
        root = workspace.rstrip("/") + "/"
        if path != workspace.rstrip("/") and not path.startswith(root):
            inside = path.lstrip("/")  # a model's "/inbox" for the workspace's inbox
            hint = f'a path inside it, as "{inside}"' if inside else "a path inside it"
            raise BadTarget(f"{path} is outside the workspace {workspace}; give {hint}")
        path = path[len(root) :] if path.startswith(root) else ""
    parts = tuple(p for p in path.split("/") if p not in ("", "."))
    if ".." in parts:
        raise BadTarget("'..' is not allowed in a path: paths stay inside the workspace")
    for p in parts:
        if len(p.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
            raise BadTarget(f"a name in the path is over {MAX_NAME_BYTES} bytes")
    return parts


def _ipv4_number(part: str) -> int | None:
    """One part of an inet_aton spelling: decimal, 0x hex or 0-led octal; None if not one."""
    if not part:
        return None
    try:
        if part[:2] in ("0x", "0X"):
            return int(part[2:], 16) if part[2:] else 0
        if len(part) > 1 and part[0] == "0":
            return int(part[1:], 8)
        return int(part, 10) if part.isdigit() else None
    except ValueError:
        return None


def ipv4_any(text: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address any inet_aton spelling names (what getaddrinfo and curl accept: 1 to 4
    parts, the last filling the bytes left), or None when `text` is not such a spelling."""
    parts = text.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    numbers = [_ipv4_number(p) for p in parts]
    if any(n is None for n in numbers):
        return None
    *head, last = [n for n in numbers if n is not None]
    if any(n > 255 for n in head) or last >= 1 << (8 * (4 - len(head))):
        return None
    value = 0
    for n in head:
        value = value << 8 | n
    return ipaddress.IPv4Address(value << (8 * (4 - len(head))) | last)


def normal_host(text: str) -> str:
    """A host as grants compare it: an address in its plain form (an IPv6 address that carries
    an IPv4 one, netcheck.embedded_v4, as that IPv4 address), a name lower case, without its
    trailing dot, in IDNA form.

    Raises:
        BadTarget: not a host name or an address (a wildcard, a port, a space, a `_`...).
    """
    host = text.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    host = host.lower()
    if host.endswith(".") and not host.endswith(".."):
        host = host[:-1]
    if "%" in host:  # percent-encoding or an IPv6 zone id: another spelling of what a rule names
        raise BadTarget(
            f"{text!r}: a '%' in a host (percent-encoding, an IPv6 zone id) is refused; "
            "write the host plainly"
        )
    if ":" in host:
        try:
            v6 = ipaddress.IPv6Address(host)
        except ValueError:
            raise BadTarget(f"{text!r} is not a host name or an address") from None
        return str(embedded_v4(v6) or v6)
    if (v4 := ipv4_any(host)) is not None:
        return str(v4)
    try:
        ascii_host = host.encode("idna").decode("ascii") if not host.isascii() else host
    except UnicodeError:
        raise BadTarget(f"{text!r} is not a host name (IDNA refuses it)") from None
    labels = ascii_host.split(".")
    if (
        not ascii_host
        or len(ascii_host) > MAX_HOST_BYTES
        or any(c not in _NAME_CHARS for c in ascii_host)
        or any(not label or len(label) > 63 for label in labels)
        or any(label.startswith("-") or label.endswith("-") for label in labels)
    ):
        raise BadTarget(
            f"{text!r} is not a host name (letters, digits, '-' and '.'; no wildcard, port or path)"
        )
    if all(label.isdigit() for label in labels):
        raise BadTarget(f"{text!r} is not an IPv4 address (a number over 255?)")
    return ascii_host


@dataclass(frozen=True, slots=True)
class HostPort:
    """A host (normal_host's form) and a port: a fetch call's target, a grant's host entry, an
    MCP argument's host. `port` None: an entry for every port of the host, or a target whose
    port is not known (a bare host name an MCP server is given)."""

    host: str
    port: int | None = None

    def __str__(self) -> str:  # as a grant entry: brackets only where a port follows
        if self.port is None:
            return self.host
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def host_port(text: str) -> HostPort:
    """A host entry, `host`, `host:port`, `[v6]` or `[v6]:port` (an IPv6 address without
    brackets takes no port), normalised: the host as normal_host makes it, so
    `[::ffff:127.0.0.1]:8080`, `2130706433:8080` and `127.0.0.1.:8080` are all `127.0.0.1:8080`.

    Raises:
        BadTarget: not a host, or a port that is not a number 1 to 65535.
    """
    text = text.strip()
    if "/" in text:
        raise BadTarget(f"{text!r} is not a host name (a URL? write host or host:port alone)")
    port_text: str | None = None
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise BadTarget(f"{text!r}: an IPv6 address in brackets lacks its ]")
        host, rest = text[: end + 1], text[end + 1 :]
        if rest and not rest.startswith(":"):
            raise BadTarget(f"{text!r}: after ] only :port may follow")
        port_text = rest[1:] if rest else None
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    else:
        host = text
    if port_text is None:
        return HostPort(normal_host(host))
    if not (port_text.isascii() and port_text.isdigit()) or not 1 <= int(port_text) <= 65535:
        raise BadTarget(f"{text!r}: a port is a number 1 to 65535")
    return HostPort(normal_host(host), int(port_text))


def scheme_port(scheme: str, port: int | None) -> int | None:
    """The port a URL reaches: its own, or its scheme's (http 80, https 443); None when it
    names none and its scheme has no default fetch knows."""
    return port or {"http": 80, "https": 443}.get(scheme.lower())


def url_host_port(url: str) -> HostPort:
    """The host and port a URL reaches, as fetch connects (url_host; the port written, or the
    scheme's). Raises BadTarget."""
    host = url_host(url)
    parts = urlsplit(url)
    return HostPort(host, scheme_port(parts.scheme, parts.port))


def url_host(url: str) -> str:
    """The normalised host a URL names, read by the same parser fetch connects with
    (`urlsplit(...).hostname`), so the decision and the connection see one host; BadTarget when
    it names none, or not one a grant can name."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a bad port raises ValueError here
        host = parts.hostname
    except ValueError as exc:
        raise BadTarget(f"not a URL ({exc}); give an http:// or https:// URL") from None
    if not host:
        raise BadTarget("the URL names no host; give an http:// or https:// URL")
    return normal_host(host)


def names_address_exactly(url_hostname: str, address: str) -> bool:
    """Whether a URL's host text IS `address` in its plain form: the only spelling that lets a
    grant open a loopback or private address (never a name, never another spelling of it)."""
    return url_hostname.strip("[]").lower() == address


# ---- an MCP call's string arguments, as argument constraints read them ----

SANDBOX_WORKSPACE = "/workspace"  # where an MCP server sees the workspace (mcp/launch.py)
# What a server may expand in a path before it opens it: variables and commands (os.path.
# expandvars, a shell), globs and braces (glob, a shell). `~` is refused at the start only.
EXPANDED = frozenset("$`*?[{")


@dataclass(frozen=True, slots=True)
class Field:
    """One string argument, normalised once: as a workspace path and as a host. None: it names
    no such thing (a '..', a path outside the workspace, a NUL, a host with a '%'...), and
    `why_path` / `why_host` say why."""

    path: tuple[str, ...] | None
    host: HostPort | None
    why_path: str = ""
    why_host: str = ""


@dataclass(frozen=True, slots=True)
class Fields:
    """An MCP call's target: its arguments that are strings, by name, each normalised (None: the
    argument is there but is not a string); `strings`, the arguments its schema has as
    strings (a rule naming another is the owner's mistake: policy.py fails it closed)."""

    values: tuple[tuple[str, Field | None], ...]
    strings: frozenset[str]

    def get(self, name: str) -> tuple[bool, Field | None]:
        """(present, its Field or None when not a string)."""
        for key, value in self.values:
            if key == name:
                return True, value
        return False, None


def workspace_path(value: str, cwd: str) -> tuple[str, ...]:
    """A path a server is given, as the workspace path it names: a relative one joined to the
    server's `cwd` in its sandbox, then split as the built-in tools split theirs (split_path),
    against /workspace, where the server sees it. Raises BadTarget."""
    if "\0" in value:
        raise BadTarget("the path holds a NUL byte")
    if value.startswith("~"):  # many servers expanduser() their paths
        raise BadTarget("a path starting with '~' may name a home folder; give it plainly")
    if expanded := sorted(set(value) & EXPANDED):
        raise BadTarget(
            f"a path with {' or '.join(repr(c) for c in expanded)} may be expanded by the server "
            "($PWD, ${HOME}, $(...), a glob): give it plainly"
        )
    if not value.startswith("/"):
        value = f"{cwd.rstrip('/')}/{value}" if value else cwd
    return split_path(value, SANDBOX_WORKSPACE)


def host_of(value: str) -> HostPort:
    """The host and port a string names: a URL's (`scheme://...`) as fetch reads it
    (url_host_port), or the string itself as a host entry (host_port: a port if written; no
    path, no userinfo). Raises BadTarget."""
    if "\0" in value:
        raise BadTarget("the value holds a NUL byte")
    return url_host_port(value) if "://" in value else host_port(value)


def string_fields(args: Mapping[str, object], strings: frozenset[str], cwd: str) -> Fields:
    """An MCP call's Fields: every argument, each string normalised both ways once."""
    values: list[tuple[str, Field | None]] = []
    for name in sorted(args):
        value = args[name]
        if not isinstance(value, str):
            values.append((name, None))
            continue
        path: tuple[str, ...] | None
        host: HostPort | None
        why_path = why_host = ""
        try:
            path = workspace_path(value, cwd)
        except BadTarget as exc:
            path, why_path = None, str(exc)
        try:
            host = host_of(value)
        except BadTarget as exc:
            host, why_host = None, str(exc)
        values.append((name, Field(path, host, why_path, why_host)))
    return Fields(tuple(values), strings)
