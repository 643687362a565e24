"""Summary statistics every report in minillm uses, defined once so their figures compare.

`percentile` is NumPy's default (`numpy.percentile(values, q)`, method "linear"): sort the
values, put the q-th percentile at position (n - 1) x q / 100, and interpolate linearly between
the two values around it. With one value every percentile is that value.
"""

from __future__ import annotations

import math
import statistics


def percentile(values, q: float) -> float:
    """The q-th percentile (0 to 100) of `values`, as `numpy.percentile` computes it; NaN values
    are left out, and no values give NaN."""
    from .validate import check_number

    check_number("q", q, 0, 100)
    data = sorted(float(v) for v in values if not math.isnan(v))
    if not data:
        return math.nan
    position = (len(data) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (position - low)


def spread(values) -> dict:
    """min, median, max and the count of repeated measurements (NaN-free), for reports that must
    show how much a noisy figure moved, not only its middle."""
    data = [float(v) for v in values if not math.isnan(v)]
    if not data:
        return {"n": 0, "min": math.nan, "median": math.nan, "max": math.nan}
    return {"n": len(data), "min": min(data), "median": statistics.median(data),
            "max": max(data)}
