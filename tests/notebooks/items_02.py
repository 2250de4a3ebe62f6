"""What tests/notebooks/test_assessment.py tries against lesson 02's autograded items."""

from assessment import Item

ITEMS: dict[str, Item] = {}
