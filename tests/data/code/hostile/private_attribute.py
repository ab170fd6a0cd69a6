# expect: refused
items = [1]
print(items._private)
