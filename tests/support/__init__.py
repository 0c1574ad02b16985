"""Helpers the tests share: fakes of peer services, payloads, servers and checks (the tests import
them as ``support.<module>``; tests/conftest.py puts ``tests/`` on the path)."""
