"""What every layer shares, drivers included: the error tree, TOML reading, stop signals."""
