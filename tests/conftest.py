import pathlib
import sys

# Test helpers (the plain-Python perm-v1 reference, the battery, process launchers).
sys.path.insert(0, str(pathlib.Path(__file__).parent))
