# expect: refused
print(f"{().__class__.__mro__}")
