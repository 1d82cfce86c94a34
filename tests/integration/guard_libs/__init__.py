"""Modules for the guard scenarios of tests/integration/guards_driver.py."""
