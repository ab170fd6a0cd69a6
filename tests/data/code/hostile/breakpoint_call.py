# expect: refused
breakpoint()
