# expect: steps
squares = [i * i for i in range(10**12)]
