"""The kernel command line, ``/proc/cmdline``.

Parsing follows the kernel's own rules (lib/cmdline.c ``next_arg``): parameters are
separated by spaces, a value may be double-quoted to hold spaces, and everything after
a bare ``--`` goes to init, not the kernel. When a parameter repeats, the last one wins
for the ``__setup``/``module_param`` parameters that matter here.
"""

from __future__ import annotations

from cephnode_exporter.hostfs import HostFS


def parse_cmdline(text: str) -> dict[str, str]:
    """Map parameter name to value; a flag without ``=`` maps to the empty string."""
    params: dict[str, str] = {}
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            break
        start, in_quote = i, False
        while i < n and (in_quote or not text[i].isspace()):
            if text[i] == '"':
                in_quote = not in_quote
            i += 1
        token = text[start:i].replace('"', "")
        if token == "--":
            break
        name, _, value = token.partition("=")
        # The kernel treats '-' and '_' in parameter names alike (parameq()).
        params[name.replace("-", "_")] = value
    return params


# The last command line parsed and its parameters: it is fixed from boot, and three
# collectors parse it on every scrape (a loop per character).
_LAST: tuple[str, dict[str, str]] = ("", {})


def read_cmdline(fs: HostFS) -> dict[str, str]:
    """``/proc/cmdline``'s parameters, a dict of the caller's own."""
    global _LAST
    # Read by three collectors: one read per scrape (HostFS.shared).
    text = fs.shared.text(fs.proc("cmdline"))
    last = _LAST
    if last[0] != text:
        last = _LAST = (text, parse_cmdline(text))
    return dict(last[1])
