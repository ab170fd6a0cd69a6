"""Robot arms behind one interface: G-code over serial, JAKA over TCP, and the physics twin."""
