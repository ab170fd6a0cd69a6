# expect: refused
name = "__cl" + "ass__"
print(getattr((), name))
