def largest_fitting(fits, guess):
    """The exact largest n >= 1 with fits(n) True, found by galloping away from `guess`, then
    bisecting. Raises ValueError if fits(1) is False. Returns an int."""
    guess = max(1, int(guess))
    ok = fits(guess)
    if not ok and guess == 1:
        raise ValueError("nothing fits: fits(1) is False")
    bounds = [guess, None] if ok else [None, guess]  # [largest fit, smallest failure]
    jump = 1
    while bounds[0] is None or bounds[1] is None:
        size = guess + jump if ok else max(1, guess - jump)
        if fits(size):
            bounds[0] = size if bounds[0] is None or size > bounds[0] else bounds[0]
            if not ok:
                break
        else:
            bounds[1] = size
            if ok:
                break
            if size == 1:
                raise ValueError("nothing fits: fits(1) is False")
        jump *= 2
    lo, hi = bounds
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo
