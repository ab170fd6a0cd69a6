"""Hardware behind small interfaces, and the simulated world the tests drive them against."""
