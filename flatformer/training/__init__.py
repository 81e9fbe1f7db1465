"""Training many seeds at once, evaluating them, and the recipes they follow."""
