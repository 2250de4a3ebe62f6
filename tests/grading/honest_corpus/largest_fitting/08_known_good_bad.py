def largest_fitting(fits, guess):
    """The exact largest n >= 1 with fits(n) True, found by galloping away from `guess`, then
    bisecting. Raises ValueError if fits(1) is False. Returns an int."""
    if guess < 1:
        guess = 1
    guess = int(guess)
    known_good = None
    known_bad = None
    if fits(guess):
        known_good = guess
        step = 1
        while known_bad is None:
            if fits(guess + step):
                known_good = guess + step
                step += step
            else:
                known_bad = guess + step
    else:
        if guess == 1:
            raise ValueError("even a single row is too much")
        known_bad = guess
        step = 1
        while known_good is None:
            size = guess - step
            if size <= 1:
                if not fits(1):
                    raise ValueError("even a single row is too much")
                known_good = 1
            elif fits(size):
                known_good = size
            else:
                known_bad = size
                step += step
    while known_bad - known_good > 1:
        half = (known_good + known_bad) // 2
        if fits(half):
            known_good = half
        else:
            known_bad = half
    return known_good
