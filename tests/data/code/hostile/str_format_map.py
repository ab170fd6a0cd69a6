# expect: refused
print("{x.__class__}".format_map({"x": 1}))
