"""Student's t quantile, for the report's confidence intervals: scipy's when the report extra is installed, else
the same number from the regularized incomplete beta function (a continued fraction), so the core tables need
numpy alone.
"""

from __future__ import annotations

import functools
import math

import numpy as np

try:
    from scipy import stats as _sps
except ImportError:  # without the report extra: the fallback below (agrees with scipy to 1e-8)
    _sps = None


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function, by the modified Lentz method."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0 or x >= 1.0:
        return 0.0 if x <= 0.0 else 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def _upper_tail(t: float, df: float) -> float:
    """P(T > t) for t >= 0."""
    return 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))


@functools.lru_cache(maxsize=4096)
def _ppf(p: float, df: float) -> float:
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -_ppf(1.0 - p, df)
    tail, lo, hi = 1.0 - p, 0.0, 1.0
    while _upper_tail(hi, df) > tail:
        lo, hi = hi, hi * 2.0
    for _ in range(200):  # bisection: the tail falls monotonically in t
        mid = (lo + hi) / 2.0
        if _upper_tail(mid, df) > tail:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-14 * hi:
            break
    return (lo + hi) / 2.0


def ppf(p: float, df: np.ndarray | float) -> np.ndarray | float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (each ``df`` > 0 and finite)."""
    if _sps is not None:
        out = _sps.t.ppf(p, df)
        return float(out) if np.ndim(out) == 0 else out
    if np.ndim(df) == 0:
        return _ppf(float(p), float(df))
    return np.array([_ppf(float(p), float(d)) for d in np.asarray(df, float).ravel()]).reshape(np.shape(df))
