"""``onboard up``: a robot run headless as a service (missions, systemd, supervision)."""
