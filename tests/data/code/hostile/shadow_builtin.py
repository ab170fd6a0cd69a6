# expect: refused
len = lambda x: 0
print(len([1, 2]))
