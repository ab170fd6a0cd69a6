# Put the apple on the plate.
detect()
pick("apple")
put_in("plate")
home()
