# Task 5: the apple onto the plate on the left (+y), the lemon onto the plate on the right.
# The fruit ride to the conveyor's end stop first, and are picked from the queue there; the
# robot looks again after each one it moves (a fruit hidden between two others shows once
# one of them is gone).
wait(8.0)
names = detect()
plates = [n for n in names if n.startswith("plate")]
left = plates[0]
right = plates[0]
for plate in plates:
    if where(plate)[1] > where(left)[1]:
        left = plate
    if where(plate)[1] < where(right)[1]:
        right = plate
print("left:", left, "right:", right)
moved = []
for attempt in range(4):
    for name in detect():
        if name.startswith("apple") and "apple" not in moved:
            pick(name)
            put_in(left)
            moved.append("apple")
        elif name.startswith("lemon") and "lemon" not in moved:
            pick(name)
            put_in(right)
            moved.append("lemon")
print("moved:", moved)
home()
