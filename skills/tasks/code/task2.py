# Task 2: the red block into the box; the blocks stacked on it come off first, top first.
SPOTS = [[0.36, -0.3], [0.55, -0.3], [0.34, 0.05], [0.55, 0.05]]


def free_spot(taken):
    for spot in SPOTS:
        clear = True
        for name in detect():
            x, y, z = where(name)
            if abs(x - spot[0]) < 0.08 and abs(y - spot[1]) < 0.08:
                clear = False
        if clear and spot not in taken:
            return spot
    return None


detect()
above = objects_on("red block")
print("on the red block:", above)
taken = []
for name in reversed(above):
    spot = free_spot(taken)
    pick(name)
    place(spot)
    taken.append(spot)
pick("red block")
put_in("box")
home()
