# expect: refused
table = globals()
table["pick"] = print
