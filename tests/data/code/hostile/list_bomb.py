# expect: memory
zeros = [0] * 10**9
