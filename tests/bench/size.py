"""How big a benchmark run is: ``make bench`` runs the stated sizes, ``make bench-quick``
the same scenarios scaled down (FIRELINE_BENCH_SCALE, a fraction), so every headline key
is reproduced in minutes. A scaled run says so in its figures (``scale``)."""

from __future__ import annotations

import os

SCALE = float(os.environ.get("FIRELINE_BENCH_SCALE", "1"))


def scaled(count: int, least: int = 1) -> int:
    """``count`` at this run's scale, at least ``least``."""
    return max(least, round(count * SCALE))
