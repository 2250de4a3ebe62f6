def largest_fitting(fits, guess):
    """The exact largest n >= 1 with fits(n) True, found by galloping away from `guess`, then
    bisecting. Raises ValueError if fits(1) is False. Returns an int."""
    # gallop in the direction that changes the answer, then close the gap by halving it
    here = max(1, int(guess))
    here_fits = fits(here)
    if not here_fits and here == 1:
        raise ValueError("a batch of 1 does not fit")
    direction = 1 if here_fits else -1
    last, distance = here, 1
    while True:
        there = max(1, here + direction * distance)
        there_fits = fits(there)
        if there_fits != here_fits:
            break
        if there == 1:  # going down, 1 does not fit either
            raise ValueError("a batch of 1 does not fit")
        last, distance = there, distance * 2
    lo, hi = (last, there) if here_fits else (there, last)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo
