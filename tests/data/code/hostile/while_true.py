# expect: refused
while True:
    pass
