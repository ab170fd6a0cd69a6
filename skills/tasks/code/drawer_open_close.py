# Open the drawer, look inside, close it.
open_drawer("drawer")
print(detect())
close_drawer("drawer")
home()
