# expect: steps
order = sorted(range(10**6), key=lambda v: -v)
