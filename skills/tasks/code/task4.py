# Task 4: from the conveyor's end stop: blue, then green, then red. The blocks are taken
# off the belt, the one furthest from the stop first (it touches only the one ahead of it:
# the pick slides it back off that one before lifting), then put back on it upstream one by
# one in that order; each queues behind the one before.
ORDER = ["blue block", "green block", "red block"]
ASIDE = [[0.34, 0.2], [0.44, 0.2], [0.54, 0.2]]
BELT_START = [0.26, 0.0]
END = [0.56, 0.0]

detect()
for name in ORDER:
    wait_until_at(name, END[0] - 0.04, END[1], 0.05, 20.0)
wait(2.0)  # the last ones still closing up: picked standing, not met on the move
detect()
upstream_first = sorted(ORDER, key=lambda name: where(name)[0])
for i in range(len(upstream_first)):
    pick(upstream_first[i])
    place(ASIDE[i])
for i in range(len(ORDER)):
    pick(ORDER[i])
    place(BELT_START)
    arrived = wait_until_at(ORDER[i], END[0] - 0.04 * i, END[1], 0.02, 20.0)
    print(ORDER[i], "queued" if arrived else "not queued")
home()
