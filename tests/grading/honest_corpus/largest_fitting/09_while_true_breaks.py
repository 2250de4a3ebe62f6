def largest_fitting(fits, guess):
    n0 = max(int(guess), 1)
    up = fits(n0)
    if not up and n0 == 1:
        raise ValueError("fits(1) is False")
    yes, no = (n0, None) if up else (None, n0)
    d = 1
    while True:
        if up:
            cand = n0 + d
        else:
            cand = max(n0 - d, 1)
        ok = fits(cand)
        if ok:
            yes = cand
        else:
            no = cand
        if up and not ok:
            break
        if not up and ok:
            break
        if not up and cand == 1:
            raise ValueError("fits(1) is False")
        d *= 2
    while no - yes > 1:
        mid = (yes + no) // 2
        if fits(mid):
            yes = mid
        else:
            no = mid
    return yes
