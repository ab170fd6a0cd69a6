# expect: refused
g = (x for x in [1])
print(g.gi_code)
