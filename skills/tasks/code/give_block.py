# Hand over the blue block, then go home still holding it.
detect()
pick("blue block")
give_me()
home()
print("holding", holding())
