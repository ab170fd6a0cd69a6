# expect: memory
rows = [[0] * 10**6 for i in range(1000)]
