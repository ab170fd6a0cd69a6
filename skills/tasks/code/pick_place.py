# Pick the red block and put it down at a point on the table.
detect()
pick("red block")
print("holding", holding())
place([0.35, 0.25])
print("holding", holding())
