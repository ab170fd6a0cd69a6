# Task 3: stack the blocks as in the picture: green at the bottom, red on it, blue on top.
ORDER = ["green block", "red block", "blue block"]

detect()
for i in range(1, len(ORDER)):
    pick(ORDER[i])
    place(ORDER[i - 1])
home()
print("stacked:", objects_on(ORDER[0]))
