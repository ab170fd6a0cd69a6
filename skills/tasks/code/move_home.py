# Move the tool over the table and back home.
for point in [[0.4, 0.0, 0.3], [0.5, 0.1, 0.25]]:
    move_to(point[0], point[1], point[2])
home()
print("holding", holding())
