from itertools import count


def largest_fitting(fits, guess):
    g = max(1, int(guess))
    if fits(g):
        best = g
        for e in count():
            n = g + 2**e
            if not fits(n):
                worst = n
                break
            best = n
    elif g == 1:
        raise ValueError("fits(1) is False")
    else:
        worst = g
        for e in count():
            n = max(1, g - 2**e)
            if fits(n):
                best = n
                break
            if n == 1:
                raise ValueError("fits(1) is False")
            worst = n
    while worst > best + 1:
        mid = (best + worst) // 2
        best, worst = (mid, worst) if fits(mid) else (best, mid)
    return int(best)
