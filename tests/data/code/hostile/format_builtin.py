# expect: refused
print(format(1, "x"))
