def _gallop_up(fits, start):
    """start fits: return (largest fit seen, first failure)."""
    last_fit, step = start, 1
    while fits(start + step):
        last_fit = start + step
        step <<= 1
    return last_fit, start + step


def _gallop_down(fits, start):
    """start does not fit: return (first fit found, smallest failure seen)."""
    first_fail, step = start, 1
    while True:
        n = max(1, start - step)
        if fits(n):
            return n, first_fail
        if n == 1:
            raise ValueError("fits(1) is False")
        first_fail, step = n, step << 1


def _bisect(fits, lo, hi):
    while lo + 1 < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def largest_fitting(fits, guess):
    """The exact largest n >= 1 with fits(n) True, found by galloping away from `guess`, then
    bisecting. Raises ValueError if fits(1) is False. Returns an int."""
    start = max(1, int(guess))
    if fits(start):
        lo, hi = _gallop_up(fits, start)
    elif start == 1:
        raise ValueError("fits(1) is False")
    else:
        lo, hi = _gallop_down(fits, start)
    return _bisect(fits, lo, hi)
