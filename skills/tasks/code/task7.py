# Task 7: the toy that looks like a bird (the duck, not the teddy bear) into the box.
bird = None
for name in detect():
    if name.startswith("duck"):
        bird = name
if bird is None:
    bird = find("a toy bird")
print("the bird:", bird)
pick(bird)
put_in("box")
home()
