# Tidy the teddy bear into the box.
detect()
pick("teddy")
put_in("box")
home()
