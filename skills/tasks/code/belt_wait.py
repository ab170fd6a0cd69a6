# Wait for the red block to reach the conveyor's end stop.
detect()
arrived = wait_until_at("red block", 0.56, 0.0, 0.04, 20.0)
print("arrived" if arrived else "did not arrive", where("red block"))
