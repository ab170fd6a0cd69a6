# expect: cpu
total = sum(range(10**18))
