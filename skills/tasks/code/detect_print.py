# Look once and print what is seen.
print(detect())
