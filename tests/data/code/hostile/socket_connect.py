# expect: refused
import socket
socket.create_connection(("93.184.216.34", 80))
