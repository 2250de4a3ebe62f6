def largest_fitting(fits, guess):
    asked = {}

    def ask(n):
        if n not in asked:
            asked[n] = bool(fits(n))
        return asked[n]

    g = max(int(guess), 1)
    if ask(g):
        lo, d = g, 1
        while ask(g + d):
            lo = g + d
            d *= 2
        hi = g + d
    else:
        hi, d = g, 1
        while True:
            n = max(g - d, 1)
            if ask(n):
                lo = n
                break
            if n == 1:
                raise ValueError("not even a size of 1 fits")
            hi = n
            d *= 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ask(mid):
            lo = mid
        else:
            hi = mid
    return lo
