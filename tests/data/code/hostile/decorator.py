# expect: refused
@print
def f():
    pass
