# Print where each seen object is, rounded to the centimetre.
for name in detect():
    x, y, z = where(name)
    print(name, round(x, 2), round(y, 2), round(z, 2))
