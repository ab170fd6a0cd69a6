# expect: refused
code = compile("1 + 1", "x", "eval")
