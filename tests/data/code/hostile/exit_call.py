# expect: refused
exit()
