# expect: refused
def go(home):
    return home
go(1)
