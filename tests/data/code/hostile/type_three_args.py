# expect: refused
Thing = type("Thing", (), {"x": 1})
print(Thing)
