# Read the stack: what rests on the red block, and the top of it.
detect()
on = objects_on("red block")
print("on the red block:", on)
if on:
    print("top:", on[-1])
