def largest_fitting(fits, guess):
    def bisect(lo, hi):
        # lo fits, hi does not
        if hi - lo == 1:
            return lo
        mid = lo + (hi - lo) // 2
        return bisect(mid, hi) if fits(mid) else bisect(lo, mid)

    g = int(guess) if guess >= 1 else 1
    if fits(g):
        k = 0
        while fits(g + 2**k):
            k += 1
        lo = g + 2 ** (k - 1) if k else g
        return bisect(lo, g + 2**k)
    if g == 1:
        raise ValueError("nothing fits, not even 1")
    k = 0
    while True:
        n = max(1, g - 2**k)
        if fits(n):
            hi = g - 2 ** (k - 1) if k else g
            return bisect(n, hi)
        if n == 1:
            raise ValueError("nothing fits, not even 1")
        k += 1
