# expect: refused
print(os)
