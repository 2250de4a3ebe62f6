def largest_fitting(fits, guess):
    """The exact largest n >= 1 with fits(n) True, found by galloping away from `guess`, then
    bisecting. Raises ValueError if fits(1) is False. Returns an int."""
    start = max(1, int(guess))
    if fits(start):
        good, step = start, 1
        while True:
            probe = start + step
            if not fits(probe):
                bad = probe
                break
            good = probe
            step *= 2
    else:
        if start == 1:
            raise ValueError("fits(1) is False: nothing fits")
        bad, step = start, 1
        while True:
            probe = max(1, start - step)
            if fits(probe):
                good = probe
                break
            if probe == 1:
                raise ValueError("fits(1) is False: nothing fits")
            bad = probe
            step *= 2
    while bad - good > 1:
        middle = (good + bad) // 2
        if fits(middle):
            good = middle
        else:
            bad = middle
    return good
