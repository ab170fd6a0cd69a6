# expect: refused
del pick
