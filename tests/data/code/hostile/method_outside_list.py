# expect: refused
data = "abc".encode()
print(data)
