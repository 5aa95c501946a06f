"""Helpers shared by the tests (fakes, servers, stubs, probe tables); no tests are collected here."""
