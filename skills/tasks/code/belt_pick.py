# Take the blue block off the moving conveyor.
detect()
pick("blue block")
place([0.45, 0.22])
home()
