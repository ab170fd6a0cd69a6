# Task 2: the red block into the box; the blocks stacked on it come off first, top first.
# What is stacked on it is read from where things are seen (above it, within a block's width
# across), looking again after each block taken off: a block hidden in the stack shows once
# the one above it is gone.
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


def on_red(names):
    red = where("red block")
    above = []
    for name in names:
        x, y, z = where(name)
        if name != "red block" and abs(x - red[0]) < 0.03 and abs(y - red[1]) < 0.03:
            if z > red[2] + 0.01:
                above.append(name)
    return above


taken = []
for attempt in range(5):
    above = on_red(detect())
    print("on the red block:", above)
    if not above:
        break
    top = above[0]
    for name in above:
        if where(name)[2] > where(top)[2]:
            top = name
    spot = free_spot(taken)
    pick(top)
    place(spot)
    taken.append(spot)
pick("red block")
put_in("box")
home()
