# expect: refused
code = (lambda: 0).__code__
print(code)
