"""python -m mlite.cli"""

import sys

from . import main

sys.exit(main())
