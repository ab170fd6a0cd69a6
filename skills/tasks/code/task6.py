# Task 6: the block is in the closed drawer, out of sight: open the drawer, find what
# appeared, take it out onto the table.
before = detect()
open_drawer("drawer")
after = detect()
found = [n for n in after if n not in before and n != "handle" and n.endswith("block")]
print("in the drawer:", found)
pick(found[0])
place([0.35, -0.08])
home()
