import bisect


def largest_fitting(fits, guess):
    """The exact largest n >= 1 with fits(n) True, found by galloping away from `guess`, then
    bisecting. Raises ValueError if fits(1) is False. Returns an int."""
    start = max(1, int(guess))
    jump = 1
    if fits(start):
        low = start
        while fits(start + jump):
            low = start + jump
            jump *= 2
        high = start + jump
    else:
        if start == 1:
            raise ValueError("no batch size fits")
        high = start
        while True:
            n = max(1, start - jump)
            if fits(n):
                low = n
                break
            if n == 1:
                raise ValueError("no batch size fits")
            high = n
            jump *= 2
    # sizes strictly between low and high: find the first that does not fit
    between = range(low + 1, high)
    first_bad = bisect.bisect_left(between, True, key=lambda n: not fits(n))
    return low + first_bad
