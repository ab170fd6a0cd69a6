# expect: refused
if (n := len(detect())) > 0:
    print(n)
