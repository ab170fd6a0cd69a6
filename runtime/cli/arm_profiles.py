"""The arm profiles of ``onboard init --arm KIND``: robot.toml's ``[drivers.arm]`` and
``[safety]`` for each kind of arm, every setting a user must check marked ``check this``.

Each is TOML text appended to the example robot (so its comments survive); what each kind
needs, how to home it and how to recover from each stop is on docs/arms.md, one section per
kind (the anchor is the kind's name).
"""

from __future__ import annotations

__all__ = ["PROFILES"]

_DEXARM = """\
# Rotrics DexArm (its Marlin-based firmware; docs/arms.md#dexarm). Positions are in the arm's
# own frame, in metres here (mm on the wire): +y forward, z = 0 at the height M1112 homes to,
# so the table is below zero.
[drivers.arm]
kind = "gcode"
dialect = "marlin"
url = "/dev/ttyACM0"           # check this: the DexArm's USB serial port (ls /dev/ttyACM*)
baudrate = 115200              # the DexArm's rate (not Marlin's stock 250000)
home_command = "M1112"         # DexArm's homing: to X0 Y300 Z0 (mm)
grip_on = "M1000"              # check this: the air picker sucks (soft gripper: its own codes)
grip_off = "M1002"             # ... and lets go
orientation = [3.14159265, 0.0, 0.0]   # the picker points straight down
feed_max = 6000.0              # check this: mm/min, what your module runs at safely
reach_tolerance = 0.005        # m: a move the firmware reports ending farther raises

[safety]
mode = "refuse"
# check this: the table in the arm's frame: jog the picker down until it touches, read M114's
# Z, and put z_floor 5 mm above it and the workspace's lowest z a little below it
workspace = { min = [-0.30, 0.15, -0.12], max = [0.30, 0.40, 0.15] }
z_floor = -0.09
max_speed = 0.1
default_speed = 0.05
"""

_SO101 = """\
# SO-101 / SO-100 on its Feetech servo bus (docs/arms.md#so101)
[drivers.arm]
kind = "so101"
url = "/dev/ttyACM0"           # check this: the bus adapter (lerobot-find-port names it)
# check this: your LeRobot calibration (lerobot-calibrate writes it under
# ~/.cache/huggingface/lerobot/calibration/robots/so101_follower/<id>.json); without it,
# ids 1-6, no offsets and +-120 degrees about each servo's middle are assumed
# calibration = "so101_follower.json"
zero_offsets = [0.0, 0.0, 0.0, 0.0, 0.0]   # check this: rad, each joint at its range's middle
stop_mode = "torque_off"       # check this: stop() goes limp (the arm sags); "hold" holds it
speed = 0.05                   # m/s when a move names none

# the hand around the tool axis, metres: a box the depth puts there is unknown, not an object
# (docs/perception.md); the SO-101's jaws are 5.5 cm long, its palm and wrist 5 cm behind them
[hand_zone]
grasp = 0.05                   # the jaws: what they hold is an object
length = 0.06                  # the palm and the wrist behind them
radius = 0.05                  # the open jaws' half-span and a margin

[safety]
mode = "refuse"
workspace = { min = [-0.35, -0.35, 0.0], max = [0.35, 0.35, 0.40] }   # check this: your table
z_floor = 0.01
max_speed = 0.2
default_speed = 0.05
"""

_GRBL_GANTRY = """\
# A gantry (XYZ, a tool pointing down) on GRBL 1.1 (docs/arms.md#grbl-gantry)
[drivers.arm]
kind = "gcode"
dialect = "grbl"
url = "/dev/ttyUSB0"           # check this: the board's serial port
baudrate = 115200              # GRBL 1.1's rate
home_command = "$H"            # check this: needs homing enabled on the board ($22=1)
unlock_on_connect = false      # true sends $X when it boots in alarm: only if it cannot home
grip_on = "M8"                 # check this: the output that drives the gripper or the vacuum
grip_off = "M9"                # (coolant flood here; M3 S1000 / M5 for the spindle output)
orientation = [3.14159265, 0.0, 0.0]   # the tool points straight down
feed_max = 6000.0              # check this: mm/min, at most the board's $110-$112
acceleration = true            # $120-$122 are only lowered to [safety] max_acceleration

[safety]
mode = "refuse"
# check this: the machine's travel ($130-$132) in its work coordinates (G54: set them so that
# the origin is the robot's base frame, z = 0 the table, z up)
workspace = { min = [0.0, 0.0, 0.0], max = [0.30, 0.30, 0.10] }
z_floor = 0.005
max_speed = 0.1
default_speed = 0.05
max_acceleration = 0.5         # m/s2: written to $120-$122 only where the board's is higher
"""

_MARLIN_SCARA = """\
# A SCARA on Marlin (MP_SCARA or MORGAN_SCARA: the firmware does the kinematics, G1 X Y Z is
# the tool; docs/arms.md#marlin-scara)
[drivers.arm]
kind = "gcode"
dialect = "marlin"
url = "/dev/ttyUSB0"           # check this: the board's serial port
baudrate = 250000              # check this: BAUDRATE in its Configuration.h
home_command = "G28"           # homes the arms to their endstops
grip_on = "M280 P0 S90"        # check this: a servo gripper (NUM_SERVOS > 0), its closed angle
grip_off = "M280 P0 S0"        # ... and its open one (a fan output: M106 S255 / M107)
orientation = [3.14159265, 0.0, 0.0]   # the tool points straight down
reach_tolerance = 0.005        # m: a move Marlin clamps to what the arms reach raises

[safety]
mode = "refuse"
# check this: a box inside the ring the two arms reach (SCARA_LINKAGE_1 + _2 in Marlin's
# configuration), in its coordinates (SCARA_OFFSET_X/Y: the shoulder), z = 0 the table
workspace = { min = [-0.20, 0.05, 0.0], max = [0.20, 0.25, 0.10] }
z_floor = 0.005
max_speed = 0.1
default_speed = 0.05
"""

_JAKA = """\
# A JAKA cobot (Zu and MiniCobo) over its TCP/IP protocol (docs/arms.md#jaka)
[drivers.arm]
kind = "jaka"
host = "10.5.5.100"            # check this: the controller's address (the JAKA app shows it)
port = 10001                   # commands
status_port = 10000            # the status stream a motion's end is seen on
# check this: rad, the joints home() moves to (read them off the JAKA app at a safe pose)
home_joints = [0.0, 1.5708, -1.5708, 1.5708, 1.5708, 0.0]
grip_io_type = 1               # check this: 1 = the tool's outputs, 0 = the cabinet's
grip_index = 0                 # check this: the gripper's output, counted from 0
grip_close_value = 1
completion = "inpos"           # a motion ends when the stream shows it in position
default_speed = 0.1            # m/s

[safety]
mode = "refuse"
workspace = { min = [-0.60, -0.60, 0.0], max = [0.60, 0.60, 0.80] }   # check this: your cell
z_floor = 0.02
max_speed = 0.25
default_speed = 0.1
"""

_MOVEO = """\
# BCN3D Moveo on Marlin (RAMPS 1.4, axes X Y Z A B are its joints; onboard does the
# kinematics from the DH table below: docs/arms.md#moveo). Dimensions from its published CAD;
# joint zero is the arm standing straight up; shoulder, elbow and wrist tilt forward (+x)
[drivers.arm]
kind = "gcode"
dialect = "marlin"
url = "/dev/ttyACM0"           # check this: the Arduino Mega's serial port
baudrate = 250000              # check this: BAUDRATE in its Configuration.h
kinematics = "joints"
# check this: no endstops on a stock Moveo: stand it straight up by hand, then this tells
# Marlin that is zero (with endstops: G28)
home_command = "G92 X0 Y0 Z0 A0 B0"
grip_on = "M280 P0 S90"        # check this: the gripper's servo, closed angle
grip_off = "M280 P0 S0"        # ... and open
tool = [0.0, 0.0, 0.09]        # m: the tool point in the wrist's frame
joint_feed_max = 1800.0        # check this: deg/min the steppers keep up with

# one table per joint, base first: standard DH (m, deg); min/max in degrees (check them)
[[drivers.arm.joints]]
axis = "X"                     # base yaw
alpha = -90.0
d = 0.15275
min = -121.5
max = 121.5

[[drivers.arm.joints]]
axis = "Y"                     # shoulder
a = 0.22112
theta = -90.0
min = -75.0
max = 75.0

[[drivers.arm.joints]]
axis = "Z"                     # elbow
alpha = 90.0
theta = 90.0
min = -30.0
max = 120.0

[[drivers.arm.joints]]
axis = "A"                     # forearm roll
alpha = -90.0
d = 0.223
min = -180.0
max = 180.0

[[drivers.arm.joints]]
axis = "B"                     # wrist pitch
alpha = 90.0
min = -100.0
max = 100.0

[safety]
mode = "refuse"
workspace = { min = [-0.50, -0.50, 0.0], max = [0.50, 0.50, 0.60] }   # check this: your table
z_floor = 0.02
max_speed = 0.1
default_speed = 0.05
max_joint_speed = 0.5
"""

#: ``onboard init --arm KIND``: the kind's robot.toml settings
PROFILES: dict[str, str] = {
    "dexarm": _DEXARM,
    "so101": _SO101,
    "grbl-gantry": _GRBL_GANTRY,
    "marlin-scara": _MARLIN_SCARA,
    "jaka": _JAKA,
    "moveo": _MOVEO,
}
