# expect: refused
n = 0
while n < 10:
    n += 1
