"""Basic auth (exporter-toolkit's web config ``basic_auth_users``): bcrypt hashes checked
at a bounded cost.

A flood of wrong passwords cannot turn into a denial of service: verified credentials are
cached, failed checks are limited per peer address (429 beyond them), bcrypt runs at most
a few at a time, and the failures are logged at a bounded rate.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import ipaddress
import logging
import math
import threading
import time
from collections import OrderedDict, deque

import bcrypt

from cephnode_exporter.web.request import _LOG_USER

log = logging.getLogger("cephnode_exporter.web")

_AUTH_CACHE_SIZE = 256
# Failed password checks per peer address and window before its unverified credentials
# get 429: each check costs the exporter one bcrypt run (up to about 1 s of CPU).
AUTH_MAX_FAILURES = 10
AUTH_WINDOW = 60.0
_AUTH_PEERS = 4096  # peer addresses remembered for the failure limit (LRU)
# bcrypt checks running at once, across all peers; bcrypt releases the GIL, so this many
# cores at most go to password checks and the rest stay with scrapes and the OSDs.
_AUTH_CONCURRENCY = 4
_AUTH_LOG_EVERY = 10.0  # seconds between "basic auth failed" log lines under a flood
_BCRYPT_MAX = 72  # bcrypt only ever used the first 72 bytes; bcrypt>=5 refuses longer input


AUTH_OK, AUTH_DENIED, AUTH_THROTTLED, AUTH_BUSY = "ok", "denied", "throttled", "busy"


class _Peer:
    """Failed checks of one peer address, for the failure limit."""

    __slots__ = ("checking", "failures", "warned")

    def __init__(self, max_failures: int) -> None:
        self.checking = False  # a bcrypt check for this peer is running
        self.failures: deque[float] = deque(maxlen=max_failures)  # monotonic times
        self.warned = False  # the current lock-out was logged


class _BasicAuth:
    """Checks ``Authorization: Basic`` headers against bcrypt hashes.

    bcrypt is slow on purpose (tens of ms at cost 10, about 1 s at 14), too slow to pay on
    every scrape and an amplifier for anyone who can reach the port. So:

    * Verified (user, sha256(password)) pairs are remembered in a small LRU and answered
      without bcrypt and without waiting for anything. Only successes are cached, so
      failed guesses cannot evict the scraper's entry.
    * Checks run in parallel (bcrypt releases the GIL), at most ``_AUTH_CONCURRENCY`` at
      once, and at most one per peer address: a flood from one address costs one core,
      and never queues a different client's check behind it. Nothing ever waits for a
      check to start: beyond ``_AUTH_CONCURRENCY`` the answer is AUTH_BUSY (429) at once,
      because a connection waiting here would hold its connection slot, and enough of
      them (wrong passwords from many addresses) would keep out even cached credentials.
    * A peer with ``max_failures`` failed checks within ``window`` seconds gets 429 for
      unverified credentials until the oldest failure leaves the window; cached ones still
      pass. Failed checks are logged at most once per ``_AUTH_LOG_EVERY`` seconds.
    * Unknown users are checked against the costliest configured hash (and refused), so
      the response time does not reveal whether a user exists. No hash is made at start:
      at a high cost that alone took hours.
    """

    def __init__(
        self,
        users: dict[str, bytes],
        max_failures: int = AUTH_MAX_FAILURES,
        window: float = AUTH_WINDOW,
    ) -> None:
        self._users = users
        self._decoy = max(users.values(), key=lambda h: int(h[4:6]))
        self._max_failures = max_failures
        self._window = window
        self._cache: OrderedDict[tuple[str, bytes], None] = OrderedDict()
        self._peers: OrderedDict[str, _Peer] = OrderedDict()
        self._lock = threading.Lock()  # cache, peers and log state; never held over bcrypt
        self._checks = threading.BoundedSemaphore(_AUTH_CONCURRENCY)
        self._logged_at = -math.inf
        self._unlogged = 0

    def check(self, header: str | None, client: str) -> tuple[str, float]:
        """(AUTH_OK | AUTH_DENIED | AUTH_THROTTLED | AUTH_BUSY, seconds to wait when
        throttled or busy)."""
        creds = _parse_basic(header)
        if creds is None:
            return AUTH_DENIED, 0.0  # no bcrypt run: not counted as a failed check
        user, password = creds
        key = (user, hashlib.sha256(password).digest())
        now = time.monotonic()
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return AUTH_OK, 0.0
            peer = self._peer(_peer_key(client))
            wait = self._lockout(peer, now)
            if wait > 0:
                warn, peer.warned = not peer.warned, True
            elif peer.checking:
                # One check per address at a time: a second request from it is told to
                # come back in a second instead of holding a connection slot here.
                return AUTH_THROTTLED, 1.0
            else:
                peer.checking = True
        if wait > 0:
            if warn:
                log.warning(
                    "too many failed logins, answering 429",
                    extra={"kv": {"client": client, "retry_after": math.ceil(wait)}},
                )
            return AUTH_THROTTLED, wait
        return self._verify(user, password, key, peer, client)

    def _verify(
        self, user: str, password: bytes, key: tuple[str, bytes], peer: _Peer, client: str
    ) -> tuple[str, float]:
        if not self._checks.acquire(blocking=False):
            with self._lock:
                peer.checking = False
            return AUTH_BUSY, 1.0  # not a failed check: nothing was checked
        hashed = self._users.get(user)
        ok = False
        try:
            try:
                ok = bcrypt.checkpw(password[:_BCRYPT_MAX], hashed or self._decoy)
            finally:
                self._checks.release()
            ok = ok and hashed is not None
        finally:
            now = time.monotonic()
            with self._lock:
                peer.checking = False
                if ok:
                    self._cache[key] = None
                    while len(self._cache) > _AUTH_CACHE_SIZE:
                        self._cache.popitem(last=False)
                else:
                    peer.failures.append(now)
                    self._unlogged += 1
                    due = now - self._logged_at >= _AUTH_LOG_EVERY
                    if due:
                        failures, self._unlogged, self._logged_at = self._unlogged, 0, now
        if ok:
            return AUTH_OK, 0.0
        if due:
            # One line per interval under a flood; "failures" counts every failed check
            # since the previous line, this one included.
            log.warning(
                "basic auth failed",
                extra={"kv": {"user": user[:_LOG_USER], "client": client, "failures": failures}},
            )
        return AUTH_DENIED, 0.0

    def _peer(self, key: str) -> _Peer:
        """The peer's entry, created if new; the least recently used idle one makes room."""
        peer = self._peers.get(key)
        if peer is not None:
            self._peers.move_to_end(key)
            return peer
        if len(self._peers) >= _AUTH_PEERS:
            for old_key, old in self._peers.items():
                if not old.checking:
                    del self._peers[old_key]
                    break
        peer = self._peers[key] = _Peer(self._max_failures)
        return peer

    def _lockout(self, peer: _Peer, now: float) -> float:
        """Seconds until the peer may have its credentials checked again; 0 if it may now."""
        if len(peer.failures) < self._max_failures:
            return 0.0
        wait = self._window - (now - peer.failures[0])
        if wait <= 0:
            peer.warned = False
            return 0.0
        return wait


def _peer_key(host: str) -> str:
    """The unit the failure limit counts: an IPv4 address, or an IPv6 /64.

    One IPv6 host usually has a whole /64 to pick source addresses from; IPv4-mapped
    addresses (a dual-stack listener) count as the IPv4 address.
    """
    try:
        ip = ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


def _parse_basic(header: str | None) -> tuple[str, bytes] | None:
    """(user, password) from a Basic Authorization header, or None if it is not one."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        raw = base64.b64decode(token.strip(), validate=True)
        user, sep, password = raw.partition(b":")
        if not sep:
            return None
        return user.decode("utf-8"), password
    except (binascii.Error, ValueError):  # bad base64, non-ASCII header, non-UTF-8 user
        return None
