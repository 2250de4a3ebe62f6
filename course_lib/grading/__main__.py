"""``python -m course_lib.grading``: see ``course_lib.grading.cli``."""

import sys

from course_lib.grading.cli import main

sys.exit(main())
