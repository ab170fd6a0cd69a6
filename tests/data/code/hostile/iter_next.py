# expect: refused
it = iter([1, 2])
print(next(it))
