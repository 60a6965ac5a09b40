#!/usr/bin/env python3
"""Lay out the mixin's dashboards (jsonnet's JSON, keys sorted) as dashboards/generate.py
writes them, so that `make mixin` with the default _config reproduces the committed files
byte for byte.

    format_dashboards.py LIKE_DIR IN_DIR OUT_DIR

For each IN_DIR/*.json: keys in the order of the same object in LIKE_DIR's file of that
name (the generator's output), keys it lacks after them, sorted; list items matched by
position; a number equal to the generator's keeps the generator's spelling (jsonnet writes
every number as a double: 1 for 1.0). Rendered as generate.py's render(): two-space
indent, no ASCII escaping, one final newline. Standard library only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def like(value: Any, template: Any) -> Any:
    if isinstance(value, dict):
        tmpl = template if isinstance(template, dict) else {}
        keys = [k for k in tmpl if k in value] + sorted(k for k in value if k not in tmpl)
        return {k: like(value[k], tmpl.get(k)) for k in keys}
    if isinstance(value, list):
        tmpl = template if isinstance(template, list) else []
        return [like(v, tmpl[i] if i < len(tmpl) else None) for i, v in enumerate(value)]
    if (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and isinstance(template, (int, float))
        and not isinstance(template, bool)
        and value == template
    ):
        return template
    return value


def render(board: Any) -> str:
    return json.dumps(board, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    like_dir, in_dir, out_dir = (Path(a) for a in argv[1:])
    out_dir.mkdir(parents=True, exist_ok=True)
    for src in sorted(in_dir.glob("*.json")):
        template_file = like_dir / src.name
        template = json.loads(template_file.read_text()) if template_file.is_file() else None
        text = render(like(json.loads(src.read_text()), template))
        (out_dir / src.name).write_text(text)
        print(f"wrote {out_dir / src.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
