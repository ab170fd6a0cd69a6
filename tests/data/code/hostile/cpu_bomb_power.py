# expect: cpu
big = 10**10**8
