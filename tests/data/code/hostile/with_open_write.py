# expect: refused
with open("/tmp/owned", "w") as f:
    f.write("x")
