# expect: refused
answer = input("?")
