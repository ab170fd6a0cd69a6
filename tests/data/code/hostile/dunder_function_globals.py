# expect: refused
pick.__globals__["__builtins__"]
