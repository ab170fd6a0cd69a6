# Put the red block into the open drawer.
detect()
pick("red block")
put_in("drawer")
home()
