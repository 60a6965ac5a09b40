"""The rule bench's live tail (tests/bench/bench_rules.py, :class:`LiveTail`): what each
scrape of the bench's Prometheus gets. With ``catch_up`` the head is loaded with the main
window's last minutes one time per scrape, oldest first (a series' samples must reach the
head in order), and the bench counts only the evaluations after that. Correctness only:
nothing here is timed."""

from __future__ import annotations

import itertools
import time
import urllib.request

from tests.alerts.replay import _chunks
from tests.bench.bench_rules import LiveTail


def scrape(live: LiveTail) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{live.port}/metrics", timeout=10) as r:
        body: bytes = r.read()
    return body


def bodies() -> dict[int, bytes]:
    now = int(time.time())
    return {now - 120: b"a 1 1\n", now - 60: b"a 2 2\n", now + 3600: b"a 3 3\n"}


def test_catch_up_serves_each_due_time_once_oldest_first() -> None:
    with LiveTail(bodies(), catch_up=True) as live:
        got = [scrape(live) for _ in range(4)]
        assert got == [b"a 1 1\n", b"a 2 2\n", b"", b""]
        # Caught up at the first scrape that found nothing new, not before.
        assert live.caught_up_at > 0
        assert live.scrapes == 4


def test_catch_up_is_not_reported_while_due_times_remain() -> None:
    with LiveTail(bodies(), catch_up=True) as live:
        scrape(live)
        assert live.caught_up_at == 0


def test_without_catch_up_each_scrape_gets_the_latest_due_time() -> None:
    with LiveTail(bodies()) as live:
        got = [scrape(live) for _ in range(2)]
    assert got == [b"a 2 2\n", b"a 2 2\n"]
    assert live.caught_up_at == 0


def test_rule_backfill_ranges_cover_the_window_and_are_never_a_single_point() -> None:
    # A window of one 5-minute step (the drift groups' interval): promtool refuses a range
    # whose end is not after its start.
    assert _chunks(0, 300, 300, 2) == [(0, 300)]
    assert _chunks(0, 100, 300, 2) == [(0, 100)]
    assert _chunks(0, 0, 60, 2) == []
    ranges = _chunks(0, 3900, 60, 2)
    assert ranges[0][0] == 0 and ranges[-1][1] == 3900
    # Consecutive ranges share their boundary: no evaluation is lost there.
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
