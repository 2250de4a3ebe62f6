"""What tests/notebooks/test_assessment.py tries against lesson 03's autograded items."""

from assessment import Item

ITEMS: dict[str, Item] = {}
