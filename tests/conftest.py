"""Fixtures shared by the unit and integration tests."""

pytest_plugins = ["tests.postgres"]
