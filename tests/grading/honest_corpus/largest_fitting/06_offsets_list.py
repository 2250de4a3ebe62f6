def largest_fitting(fits, guess):
    """The exact largest n >= 1 with fits(n) True, found by galloping away from `guess`, then
    bisecting. Raises ValueError if fits(1) is False. Returns an int."""
    g = max(1, int(guess))
    offsets = (1 << i for i in range(64))
    if fits(g):
        lo = g
        for off in offsets:
            if fits(g + off):
                lo = g + off
            else:
                hi = g + off
                break
    else:
        if g == 1:
            raise ValueError("fits(1) is False")
        hi = g
        for off in offsets:
            cand = max(1, g - off)
            if fits(cand):
                lo = cand
                break
            if cand == 1:
                raise ValueError("fits(1) is False")
            hi = cand
    while hi - lo > 1:
        m = (lo + hi) // 2
        if fits(m):
            lo = m
        else:
            hi = m
    return lo
