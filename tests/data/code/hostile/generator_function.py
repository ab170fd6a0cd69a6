# expect: refused
def forever():
    yield 1
