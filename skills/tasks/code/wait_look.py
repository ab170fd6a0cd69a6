# Look, let time pass, look again: a still table keeps its names.
first = detect()
wait(1.0)
second = detect()
print(sorted(first) == sorted(second), len(second))
