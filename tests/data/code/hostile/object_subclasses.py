# expect: refused
print(object.__subclasses__())
