"""Where an HTTP target may send: the SSRF rules, pure (no sockets, no DNS).

A tenant's webhook runs with Fireline's network position, so a URL naming the loopback, a
private network, the cloud's metadata service or any address that is not public would let
a tenant reach what only Fireline can. The rules are applied twice: to the URL at
registration (what can be told from its text: the scheme, a literal address in any of the
forms resolvers accept, ``localhost``) and to every address the name resolves to at send
time, the connection then going to the address that was checked (see
``fireline.services.webhook``).

The operator may widen two things, never the metadata addresses: plain ``http`` for some
tenants (or all), and networks that count as reachable (the local cloud's 127.0.0.0/8).
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass

from fireline.domain import errors

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# Categories of refused addresses (what a refusal names).
LOOPBACK = "loopback"
LINK_LOCAL = "link-local"
PRIVATE = "private"
UNIQUE_LOCAL = "unique-local"
MULTICAST = "multicast"
UNSPECIFIED = "unspecified"
RESERVED = "reserved"
METADATA = "metadata"

_net = ipaddress.ip_network

# Instance metadata and platform endpoints, refused even in networks an operator allows:
# AWS IMDS (IPv4, IPv6), ECS task metadata, EKS pod identity, Azure's wire server, Alibaba
# Cloud, Oracle Cloud.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",
        "169.254.170.2",
        "169.254.170.23",
        "168.63.129.16",
        "100.100.100.200",
        "192.0.0.192",
        "fd00:ec2::254",
        "fd00:ec2::23",
    )
)
# Names of the metadata services and of the loopback, refused at registration.
METADATA_NAMES = frozenset(
    {"metadata.google.internal", "metadata.goog", "metadata", "instance-data"}
)

# First match wins. Anything else that is not globally reachable (documentation,
# benchmarking, protocol assignments) is RESERVED.
_IPV4_RANGES: tuple[tuple[Network, str], ...] = (
    (_net("0.0.0.0/8"), UNSPECIFIED),
    (_net("127.0.0.0/8"), LOOPBACK),
    (_net("169.254.0.0/16"), LINK_LOCAL),
    (_net("10.0.0.0/8"), PRIVATE),
    (_net("172.16.0.0/12"), PRIVATE),
    (_net("192.168.0.0/16"), PRIVATE),
    (_net("100.64.0.0/10"), PRIVATE),  # carrier-grade NAT: the provider's own network
    (_net("224.0.0.0/4"), MULTICAST),
    (_net("240.0.0.0/4"), RESERVED),  # with 255.255.255.255, the broadcast
)
_IPV6_RANGES: tuple[tuple[Network, str], ...] = (
    (_net("::/128"), UNSPECIFIED),
    (_net("::1/128"), LOOPBACK),
    (_net("fe80::/10"), LINK_LOCAL),
    (_net("fec0::/10"), PRIVATE),  # site-local, deprecated but still routed by some
    (_net("fc00::/7"), UNIQUE_LOCAL),
    (_net("ff00::/8"), MULTICAST),
    (_net("64:ff9b:1::/48"), PRIVATE),  # local-use NAT64
)
_NAT64 = _net("64:ff9b::/96")
_COMPATIBLE = _net("::/96")
# A dotted name of numbers is an address to the C resolver (inet_aton): 1 to 4 parts,
# each decimal, octal (leading 0) or hex (0x), the last filling the remaining bytes.
_NUMBER_PART = re.compile(r"0[xX][0-9a-fA-F]*|0[0-7]*|[1-9][0-9]*")


def parse_address(host: str) -> Address | None:
    """The address a host string denotes, in every form resolvers accept: dotted IPv4,
    one number (``2130706433``), octal or hex parts (``0177.0.0.1``, ``0x7f.1``), short
    forms (``127.1``), IPv6 with or without brackets. None for a name."""
    text = host.strip().rstrip(".").lower()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if "%" in text:  # an IPv6 zone names a local interface: the address is link-scoped
        text = text.split("%", 1)[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        pass
    return _loose_ipv4(text)


def _loose_ipv4(text: str) -> ipaddress.IPv4Address | None:
    parts = text.split(".")
    if not 1 <= len(parts) <= 4 or not all(_NUMBER_PART.fullmatch(p) for p in parts):
        return None
    *head, last = [_number(p) for p in parts]
    rest = 4 - len(head)  # the bytes the last part fills
    if any(n > 255 for n in head) or last >= 256**rest:
        return None
    value = 0
    for n in head:
        value = value * 256 + n
    return ipaddress.IPv4Address(value * 256**rest + last)


def _number(part: str) -> int:
    if part[:2].lower() == "0x":
        return int(part[2:] or "0", 16)
    return int(part, 8 if part.startswith("0") else 10)


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries, which is what the packet reaches in the end:
    IPv4-mapped (::ffff:a.b.c.d), IPv4-compatible (::a.b.c.d), NAT64 (64:ff9b::a.b.c.d),
    6to4 (2002:aabb:ccdd::/48)."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64 or (address in _COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def category(address: Address) -> str | None:
    """Why an address is no place for a tenant's request (a category), or None if public."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            return category(embedded)
    if address in METADATA_ADDRESSES:
        return METADATA
    ranges = _IPV4_RANGES if isinstance(address, ipaddress.IPv4Address) else _IPV6_RANGES
    for network, name in ranges:
        if address in network:
            return name
    return None if address.is_global else RESERVED


@dataclass(frozen=True)
class EgressPolicy:
    """What the operator allows HTTP targets beyond the default (https, public addresses).

    ``http_tenants``: tenants whose targets may use plain http (``"*"``: every tenant).
    ``networks``: networks whose addresses count as reachable although not public (the
    metadata addresses stay refused)."""

    http_tenants: frozenset[str] = frozenset()
    networks: tuple[Network, ...] = ()

    @classmethod
    def parse(cls, http_tenants: str, networks: str) -> EgressPolicy:
        """From the operator's settings: comma-separated tenant ids and CIDR networks."""
        found = []
        for text in _items(networks):
            try:
                found.append(ipaddress.ip_network(text, strict=False))
            except ValueError as exc:
                raise errors.ValidationError(
                    f"{text!r} is not a network", field="HTTP_TARGET_ALLOW_NETWORKS"
                ) from exc
        return cls(http_tenants=frozenset(_items(http_tenants)), networks=tuple(found))

    def allows_http(self, tenant_id: str) -> bool:
        return "*" in self.http_tenants or tenant_id in self.http_tenants

    def refusal(self, address: Address) -> str | None:
        """The category an address is refused for, or None when a target may reach it."""
        found = category(address)
        if found is None or found == METADATA:
            return found
        if any(address.version == n.version and address in n for n in self.networks):
            return None
        return found


def _items(text: str) -> Iterable[str]:
    return (item.strip() for item in text.split(",") if item.strip())


STRICT = EgressPolicy()


def check_url(url: str, tenant_id: str, policy: EgressPolicy, *, field: str = "target.url") -> None:
    """Refuse at registration a URL no send could be allowed to (typed error naming the
    field): a scheme other than https (or http where the operator allows it for the
    tenant), credentials in the URL, a literal address or a name that is not public."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 (an out-of-range port raises here)
    except ValueError as exc:
        raise errors.ValidationError("is not a URL", field=field) from exc
    scheme = parts.scheme.lower()
    if scheme != "https" and not (scheme == "http" and policy.allows_http(tenant_id)):
        allowed = "https or http" if policy.allows_http(tenant_id) else "https"
        raise errors.ValidationError(f"must be an {allowed} URL", field=field)
    if parts.username is not None or parts.password is not None:
        raise errors.ValidationError("must not carry credentials", field=field)
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise errors.ValidationError("has no host", field=field)
    address = parse_address(host)
    if address is not None:
        refused = policy.refusal(address)
        if refused is not None:
            raise errors.ValidationError(f"names a {refused} address", field=field)
        return
    loopback = host == "localhost" or host.endswith(".localhost")
    if loopback and policy.refusal(ipaddress.IPv4Address("127.0.0.1")) is not None:
        raise errors.ValidationError(f"names a {LOOPBACK} address", field=field)
    if host in METADATA_NAMES:
        raise errors.ValidationError(f"names a {METADATA} address", field=field)
