# expect: refused
__builtins__["open"]("/etc/passwd")
