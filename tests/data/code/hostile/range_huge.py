# expect: steps
for i in range(10**12):
    pass
