# Task 5: the apple onto the plate on the left (+y), the lemon onto the plate on the right.
# The fruit ride to the conveyor's end stop first, and are picked from the queue there.
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
for name in names:
    if name.startswith("apple"):
        pick(name)
        put_in(left)
    if name.startswith("lemon"):
        pick(name)
        put_in(right)
home()
