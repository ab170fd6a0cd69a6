# expect: refused
g = lambda: 0
g = getattr
print(g((), "__cl" + "ass__"))
