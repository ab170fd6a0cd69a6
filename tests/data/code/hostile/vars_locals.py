# expect: refused
print(vars())
print(locals())
