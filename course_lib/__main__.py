"""``python -m course_lib``: the course's command line (see :mod:`course_lib.cli`)."""

import sys

from course_lib.cli import main

sys.exit(main())
