# Task 1, "I'm hungry.": hand over the one thing on the table that can be eaten.
FOODS = ["apple", "banana", "orange", "lemon"]

food = None
for name in detect():
    for kind in FOODS:
        if name.startswith(kind):
            food = name
if food is None:
    food = find("something to eat")
print("food:", food)
pick(food)
give_me()
