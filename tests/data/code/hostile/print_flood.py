# expect: steps
for i in range(10**9):
    print("x" * 10000)
