# Count the blocks, nearest first.
names = [n for n in detect() if n.endswith("block")]


def distance(name):
    x, y, z = where(name)
    return (x * x + y * y) ** 0.5


print(len(names), "blocks:", sorted(names, key=distance))
