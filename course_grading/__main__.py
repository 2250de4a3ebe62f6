"""``python -m course_grading``: see ``course_grading.cli``."""

import sys

from course_grading.cli import main

sys.exit(main())
