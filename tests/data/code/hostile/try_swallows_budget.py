# expect: refused
try:
    for i in range(10**9):
        pass
except BaseException:
    pass
