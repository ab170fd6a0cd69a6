# expect: steps
found = any(i < 0 for i in range(10**12))
