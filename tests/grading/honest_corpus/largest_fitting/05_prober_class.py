class _Prober:
    """Wraps fits() and remembers the largest size known to fit and the smallest known not to."""

    def __init__(self, fits):
        self.fits = fits
        self.fit = None
        self.fail = None

    def __call__(self, n):
        ok = self.fits(n)
        if ok:
            self.fit = n if self.fit is None else max(self.fit, n)
        else:
            self.fail = n if self.fail is None else min(self.fail, n)
        return ok


def largest_fitting(fits, guess):
    """The exact largest n >= 1 with fits(n) True, found by galloping away from `guess`, then
    bisecting. Raises ValueError if fits(1) is False. Returns an int."""
    p = _Prober(fits)
    g = max(1, int(guess))
    step = 1
    if p(g):
        while p(g + step):
            step *= 2
    elif g == 1:
        raise ValueError("a size of 1 does not fit")
    else:
        while True:
            n = max(1, g - step)
            if p(n):
                break
            if n == 1:
                raise ValueError("a size of 1 does not fit")
            step *= 2
    while p.fail - p.fit > 1:
        p((p.fit + p.fail) // 2)
    return p.fit
