# Put the red block on the blue block.
detect()
pick("red block")
place("blue block")
print(objects_on("blue block"))
