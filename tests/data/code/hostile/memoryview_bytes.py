# expect: refused
view = memoryview(bytearray(10))
