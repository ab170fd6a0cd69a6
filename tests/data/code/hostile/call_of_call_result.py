# expect: refused
detect()()
