"""What matrix.html loads on demand (cell evidence and plots, gzip + base64), for tests that read it."""

from __future__ import annotations

import base64
import gzip
import json
import re


def blob(html: str) -> dict:
    """The embedded document of a matrix.html: ``cells`` evidence and ``plots`` per hardware class."""
    (packed,) = re.findall(r'<script type="application/gzip\+base64" id="inv-data">([^<]*)</script>', html)
    return json.loads(gzip.decompress(base64.b64decode(packed)))

